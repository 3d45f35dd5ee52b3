import Foundation

/// The daily and weekly goal rules (docs/jobs/generate-daily-goals.md), as pure functions of a
/// user's tracking rows and FitCircle memberships. Weights are in pounds; a weight goal's target is
/// a change (negative: a loss), met when the actual change is at or below it.
public enum GoalRules {
    /// Days 1-7 after sign-up (the sign-up day is day 1) get the new-user goals.
    static let newUserDays = 7
    /// A new user whose logged days average fewer steps than this is sedentary.
    static let sedentaryBelowSteps = 5_000
    static let sedentaryStepsGoal = 5_000
    /// Moderate new users, and the default when nothing is known (docs/jobs/generate-daily-goals.md).
    static let moderateStepsGoal = 7_000
    static let stepsCap = 15_000
    /// An established user's step baseline needs steps on at least this many of the last 7 days.
    static let minimumBaselineDays = 3
    static let dailyWeightLoss = 0.1...0.3
    static let weeklyStepsDefault = 50_000
    static let activeDaySteps = 3_000
    static let activeDaysTarget = 5
    static let checkInDaysTarget = 7

    public enum DailyGoal: String, Sendable, CaseIterable {
        case steps, weight, checkin
    }

    public enum WeeklyGoal: String, Sendable, CaseIterable {
        case steps, weight, streak
        case activeDays = "active_days"
    }

    /// How a day's targets came about: the work outcome recorded for that day.
    public enum Basis: String, Sendable {
        case newUser = "new_user"
        case baseline
        case defaults
    }

    public struct DailyTargets: Sendable, Equatable {
        public var steps: Int
        /// Nil where no weight goal applies.
        public var weight: Double?
        public var basis: Basis
        /// The steps target is the user's own baseline (day 8+, enough days with steps).
        public var stepsFromBaseline: Bool
        /// Why the defaults were used, for the work record.
        public var reasons: [String]

        public func target(_ goal: DailyGoal) -> Double? {
            switch goal {
            case .steps: Double(steps)
            case .weight: weight
            case .checkin: 1
            }
        }
    }

    // MARK: Daily targets

    /// The targets of local day `day`, from what was known before it began: the tracking of the
    /// days before it and the circles the user is in that day.
    public static func dailyTargets(
        on day: LocalDate, signedUpOn signup: LocalDate, tracking: [LocalDate: TrackingDay],
        memberships: [FitCircleMembership]
    ) -> DailyTargets {
        let lookback = max(signup, day.adding(days: -7))
        let days = lookback < day ? (lookback.daysSinceEpoch..<day.daysSinceEpoch).compactMap { tracking[LocalDate(daysSinceEpoch: $0)] } : []
        if let bad = days.first(where: { $0.impossibility != nil }) {
            return DailyTargets(
                steps: moderateStepsGoal, weight: nil, basis: .defaults, stepsFromBaseline: false,
                reasons: ["daily_tracking \(bad.date): \(bad.impossibility!)"])
        }
        // A day with no steps, or zero, is a day the tracker was not worn: it is left out.
        let stepDays = days.compactMap(\.steps).filter { $0 > 0 }
        let total = stepDays.reduce(0, +)
        let count = stepDays.count

        if day.days(since: signup) < newUserDays {
            let sedentary = count > 0 && total < sedentaryBelowSteps * count
            return DailyTargets(
                steps: sedentary ? sedentaryStepsGoal : moderateStepsGoal, weight: nil, basis: .newUser,
                stepsFromBaseline: false, reasons: [])
        }

        var targets = DailyTargets(steps: moderateStepsGoal, weight: nil, basis: .baseline, stepsFromBaseline: false, reasons: [])
        if count >= minimumBaselineDays {
            // average + 10 %, to the nearest hundred (halves up), in integers: total * 1.1 / count / 100
            let hundreds = (total * 11 * 2 + count * 1_000) / (count * 2_000)
            targets.steps = min(stepsCap, hundreds * 100)
            targets.stepsFromBaseline = true
        } else {
            targets.basis = .defaults
            targets.reasons.append("steps on only \(stepDays.count) of the 7 days before \(day)")
        }
        switch weightCircle(on: day, memberships: memberships) {
        case .none:
            break
        case .circle(_, let weeklyLoss):
            targets.weight = -rounded(min(max(weeklyLoss / 7, dailyWeightLoss.lowerBound), dailyWeightLoss.upperBound))
        case .unusable(let reason):
            targets.basis = .defaults
            targets.reasons.append(reason)
        }
        return targets
    }

    enum WeightCircle: Equatable {
        case none
        case circle(FitCircleMembership, weeklyLoss: Double)
        case unusable(String)
    }

    /// The weight-loss circle whose target sets the user's weight goals on `day`: of those the user
    /// is active in, the one asking the most loss this week.
    static func weightCircle(on day: LocalDate, memberships: [FitCircleMembership]) -> WeightCircle {
        let active = memberships.filter { $0.challenge == .weightLoss && $0.isActive(on: day) }
        guard !active.isEmpty else { return .none }
        let usable = active.compactMap { membership -> (FitCircleMembership, Double)? in
            guard let start = membership.startingWeight, let target = membership.targetWeight,
                start > target, target > 0, start < 1_500
            else { return nil }
            return (membership, (start - target) / Double(membership.weeksRemaining(from: day.monday)))
        }
        // (losses compared to a billionth of a pound: two circles asking the same loss tie, whatever
        // the floating point's last bits, and the lower circle id wins)
        func loss(_ candidate: (FitCircleMembership, Double)) -> Double { (candidate.1 * 1e9).rounded() }
        guard let best = usable.max(by: { (loss($0), $1.0.circleID.uuidString) < (loss($1), $0.0.circleID.uuidString) }) else {
            let circle = active[0]
            return .unusable(
                """
                FitCircle \(circle.circleID.uuidString.lowercased()): starting weight \(describe(circle.startingWeight)) \
                and target weight \(describe(circle.targetWeight)) give no weight loss
                """)
        }
        return .circle(best.0, weeklyLoss: best.1)
    }

    /// The steps circle whose goal is the user's weekly steps goal on `day`.
    static func stepsCircle(on day: LocalDate, memberships: [FitCircleMembership]) -> FitCircleMembership? {
        memberships
            .filter { $0.challenge == .steps && $0.isActive(on: day) && ($0.stepGoal ?? 0) > 0 }
            .max { ($0.stepGoal!, $1.circleID.uuidString) < ($1.stepGoal!, $0.circleID.uuidString) }
    }

    // MARK: Closing a day

    public struct Result: Sendable, Equatable {
        public let actual: Double?
        public let completed: Bool
    }

    /// A goal of local day `day` once the day is over: what the user did, and whether it meets the target.
    public static func close(_ goal: DailyGoal, target: Double?, on day: LocalDate, tracking: [LocalDate: TrackingDay]) -> Result {
        let row = tracking[day].flatMap { $0.impossibility == nil ? $0 : nil }
        let actual: Double?
        switch goal {
        case .steps:
            actual = tracking[day]?.impossibility == nil ? Double(row?.steps ?? 0) : nil
        case .checkin:
            actual = tracking[day]?.impossibility == nil ? (row?.isCheckedIn == true ? 1 : 0) : nil
        case .weight:
            actual = weightChange(to: day, through: day, tracking: tracking)
        }
        return Result(actual: actual, completed: meets(actual, target, lowerIsBetter: goal == .weight))
    }

    // MARK: Weekly goals

    public struct WeeklyTarget: Sendable, Equatable {
        public let target: Double
        public let circleID: UUID?
    }

    /// The week's targets, with the circles the user is in on `day` (a day of that week).
    public static func weeklyTargets(
        monday: LocalDate, asOf day: LocalDate, signedUpOn signup: LocalDate,
        tracking: [LocalDate: TrackingDay],
        memberships: [FitCircleMembership]
    ) -> [WeeklyGoal: WeeklyTarget] {
        let steps: WeeklyTarget
        if let circle = stepsCircle(on: day, memberships: memberships) {
            steps = WeeklyTarget(target: Double(circle.stepGoal!), circleID: circle.circleID)
        } else {
            let mondayTargets = dailyTargets(on: monday, signedUpOn: signup, tracking: tracking, memberships: memberships)
            let baselineAdjusted = mondayTargets.stepsFromBaseline ? mondayTargets.steps * 7 : weeklyStepsDefault
            steps = WeeklyTarget(target: Double(baselineAdjusted), circleID: nil)
        }
        let weight: WeeklyTarget
        if case .circle(let circle, let weeklyLoss) = weightCircle(on: day, memberships: memberships) {
            weight = WeeklyTarget(target: -rounded(weeklyLoss), circleID: circle.circleID)
        } else {
            weight = WeeklyTarget(target: 0, circleID: nil)   // maintenance
        }
        return [
            .steps: steps,
            .weight: weight,
            .streak: WeeklyTarget(target: Double(checkInDaysTarget), circleID: nil),
            .activeDays: WeeklyTarget(target: Double(activeDaysTarget), circleID: nil),
        ]
    }

    public struct WeeklyProgress: Sendable, Equatable {
        public let actual: Double?
        /// Day name ("Mon") to that day's value.
        public let breakdown: [String: Double]
        public let completed: Bool
    }

    static let dayNames = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]

    /// The week's progress over its days from sign-up through `lastEnded` (the days that are over).
    public static func weeklyProgress(
        _ goal: WeeklyGoal, target: Double, monday: LocalDate, signedUpOn signup: LocalDate,
        lastEnded: LocalDate, tracking: [LocalDate: TrackingDay]
    ) -> WeeklyProgress {
        let first = max(monday, signup)
        let last = min(monday.adding(days: 6), lastEnded)
        var breakdown: [String: Double] = [:]
        var total = 0.0
        if first <= last {
            for number in first.daysSinceEpoch...last.daysSinceEpoch {
                let day = LocalDate(daysSinceEpoch: number)
                let row = tracking[day].flatMap { $0.impossibility == nil ? $0 : nil }
                let name = dayNames[day.isoWeekday - 1]
                let value: Double?
                switch goal {
                case .steps: value = row?.steps.map(Double.init)
                case .streak: value = row?.isCheckedIn == true ? 1 : 0
                case .activeDays: value = (row?.steps ?? 0) >= activeDaySteps ? 1 : 0
                case .weight: value = row?.weight
                }
                if let value {
                    breakdown[name] = value
                    if goal != .weight { total += value }
                }
            }
        }
        let actual = goal == .weight ? weightChange(to: monday, through: last, tracking: tracking) : total
        return WeeklyProgress(actual: actual, breakdown: breakdown, completed: meets(actual, target, lowerIsBetter: goal == .weight))
    }

    // MARK: Helpers

    /// The change from the last weigh-in of the 7 days before `start` to the last weigh-in from
    /// `start` through `end`; nil when either is missing.
    static func weightChange(to start: LocalDate, through end: LocalDate, tracking: [LocalDate: TrackingDay]) -> Double? {
        func lastWeight(_ from: LocalDate, _ to: LocalDate) -> Double? {
            guard from <= to else { return nil }
            for number in stride(from: to.daysSinceEpoch, through: from.daysSinceEpoch, by: -1) {
                if let row = tracking[LocalDate(daysSinceEpoch: number)], row.impossibility == nil, let weight = row.weight {
                    return weight
                }
            }
            return nil
        }
        guard let now = lastWeight(start, end), let before = lastWeight(start.adding(days: -7), start.adding(days: -1)) else {
            return nil
        }
        return rounded(now - before)
    }

    static func meets(_ actual: Double?, _ target: Double?, lowerIsBetter: Bool) -> Bool {
        guard let actual, let target else { return false }
        return lowerIsBetter ? actual <= target + 1e-9 : actual >= target - 1e-9
    }

    /// Two decimals, halves away from zero as PostgreSQL's numeric round does: weights and their
    /// changes are kept to a hundredth of a pound. (The nudge keeps a decimal half that binary
    /// floating point holds as …4999999 a half.)
    static func rounded(_ value: Double) -> Double {
        let hundredths = (abs(value) * 100 + 1e-7).rounded(.toNearestOrAwayFromZero)
        return (value < 0 ? -hundredths : hundredths) / 100
    }

    private static func describe(_ weight: Double?) -> String {
        weight.map { "\($0)" } ?? "none"
    }
}
