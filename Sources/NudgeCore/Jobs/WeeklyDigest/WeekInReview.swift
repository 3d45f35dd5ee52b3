import Foundation

/// A user's local week, Monday to Sunday, as the weekly digest tells it
/// (docs/jobs/weekly-digest.md): what they did, against their goals, and next week's steps goal.
/// Every number comes from their own rows; a quiet week has none to show.
public struct WeekInReview: Sendable, Equatable {
    public let monday: LocalDate
    /// The week's steps (nil when no day of it has steps).
    public let steps: Int?
    /// The week's steps goal (`weekly_goals`), when there is one.
    public let stepsGoal: Int?
    /// Days the daily steps goal was met, of the days that had one.
    public let daysGoalMet: Int
    public let daysWithGoal: Int
    /// The check-in streak now, and whether no day of the week broke it.
    public let streak: Int
    public let streakHeldAllWeek: Bool
    /// Pounds, against the last weigh-in of the week before (nil without both).
    public let weightChange: Double?
    /// The user's place on each circle's weekly board.
    public let ranks: [CircleRank]
    public let topAchievement: Achievement?
    /// Next week's steps goal: the one weekly-digest sets for that week as it tells it (and
    /// generate-daily-goals keeps), or the one already set.
    public let nextWeekStepsGoal: Int
    /// Where next week's goal comes from, so the digest says why.
    public let nextGoalSource: NextGoalSource
    /// The circle that sets it, as generate-daily-goals will find it on Monday.
    public let nextGoalCircleID: UUID?
    /// Whether anything happened: steps, a check-in or a weigh-in.
    public let hadActivity: Bool

    public struct CircleRank: Sendable, Equatable {
        public let circle: String
        public let rank: Int

        public init(circle: String, rank: Int) {
            self.circle = circle
            self.rank = rank
        }
    }

    public enum NextGoalSource: Sendable, Equatable {
        /// The user's own last 7 days + 10 % (docs/jobs/generate-daily-goals.md), times 7.
        case progress
        /// A steps circle's `challenge_step_goal`.
        case circle
        /// The default 50,000, when no baseline can be computed.
        case standard
    }

    public enum Achievement: Sendable, Equatable {
        /// "You hit your daily goal 6 out of 7 days — your best week yet!"
        case bestWeek(daysMet: Int, of: Int)
        /// Five days or more, not the best.
        case goalDays(daysMet: Int, of: Int)
        /// Checked in every day.
        case everyCheckIn
    }

    /// The percentage of the weekly steps goal, rounded down (nil without both).
    public var stepsPercent: Int? {
        guard let steps, let stepsGoal, stepsGoal > 0 else { return nil }
        return steps * 100 / stepsGoal
    }

    /// The best place among the user's circles, the one a one-line summary names.
    public var bestRank: CircleRank? {
        ranks.min { ($0.rank, $0.circle) < ($1.rank, $1.circle) }
    }
}

/// How the digest's numbers come about, as pure functions of the user's rows.
public enum WeeklyDigestRules {
    /// How many weeks before this one "your best week yet" is measured against.
    public static let comparedWeeks = 4
    /// "Your best week yet" takes more than half of the week: one day of seven is nobody's best.
    public static let bestWeekMinimumDays = 4
    /// After this many quiet weeks in a row, a quiet week gets no digest until the user is active again.
    public static let quietWeeksBeforeRest = 4
    /// A week the user was signed up for less than this before its digest gets none.
    public static let signedUpAtLeast: TimeInterval = 3 * 86_400

    /// Whether anything happened in the week starting `monday`: steps, a check-in or a weigh-in.
    public static func hadActivity(monday: LocalDate, tracking: [LocalDate: TrackingDay]) -> Bool {
        (0..<7).compactMap { tracking[monday.adding(days: $0)] }.filter { $0.impossibility == nil }
            .contains { ($0.steps ?? 0) > 0 || $0.isCheckedIn || $0.weight != nil }
    }

    /// How many weeks in a row before the week starting `monday` were quiet, counting only weeks
    /// from `firstMonday` (the first the user had a digest for), at most `quietWeeksBeforeRest`.
    public static func quietWeeks(
        before monday: LocalDate, since firstMonday: LocalDate,
        tracking: [LocalDate: TrackingDay]
    ) -> Int {
        var count = 0
        var week = monday.adding(days: -7)
        while count < quietWeeksBeforeRest, week >= firstMonday, !hadActivity(monday: week, tracking: tracking) {
            count += 1
            week = week.adding(days: -7)
        }
        return count
    }

    /// The week that ends on the Sunday of `sunday`'s week, from the user's rows: `tracking` of
    /// this week and the `comparedWeeks` before, the daily steps goals (`daily_goals`) of those
    /// days, the streak as validate-streaks last settled it, the weekly steps goal, the weekly
    /// ranks, and what next week's goal needs (sign-up, circles).
    /// `nextWeekSet` is next week's steps goal when one is already set (and the circle that set it).
    public static func review(
        monday: LocalDate, signedUpOn signup: LocalDate, tracking: [LocalDate: TrackingDay],
        dailyStepsGoals: [LocalDate: Int], weeklyStepsGoal: Int?,
        settledStreak: (current: Int, through: LocalDate?)?, ranks: [WeekInReview.CircleRank],
        memberships: [FitCircleMembership], nextWeekSet: (target: Int, circleID: UUID?)? = nil
    ) -> WeekInReview {
        let days = (0..<7).map { monday.adding(days: $0) }
        let usable = days.compactMap { tracking[$0] }.filter { $0.impossibility == nil }
        let stepDays = usable.compactMap(\.steps)
        let steps = stepDays.isEmpty ? nil : stepDays.reduce(0, +)
        let (met, withGoal) = goalDays(monday: monday, tracking: tracking, dailyStepsGoals: dailyStepsGoals)
        let (streak, held) = streakAtWeekEnd(monday: monday, tracking: tracking, settled: settledStreak)
        let hadActivity = Self.hadActivity(monday: monday, tracking: tracking)

        var achievement: WeekInReview.Achievement?
        if met > 0 {
            // The best of the weeks that had goals; a first week is nobody's best yet.
            let earlier = (1...comparedWeeks).map {
                goalDays(monday: monday.adding(days: -7 * $0), tracking: tracking, dailyStepsGoals: dailyStepsGoals)
            }.filter { $0.withGoal > 0 }
            if !earlier.isEmpty && met >= bestWeekMinimumDays && met > earlier.map(\.met).max()! {
                achievement = .bestWeek(daysMet: met, of: withGoal)
            } else if met >= 5 {
                achievement = .goalDays(daysMet: met, of: withGoal)
            }
        }
        if achievement == nil && days.allSatisfy({ tracking[$0]?.isCheckedIn == true }) {
            achievement = .everyCheckIn
        }
        let nextMonday = monday.adding(days: 7)
        let rules = GoalRules.weeklyTargets(
            monday: nextMonday, asOf: nextMonday, signedUpOn: signup, tracking: tracking,
            memberships: memberships)[.steps]
        let fromBaseline = GoalRules.dailyTargets(
            on: nextMonday, signedUpOn: signup, tracking: tracking,
            memberships: memberships
        ).stepsFromBaseline
        let next = nextWeekSet?.target ?? Int(rules?.target ?? Double(GoalRules.weeklyStepsDefault))
        let circleID = nextWeekSet.map(\.circleID) ?? rules?.circleID
        let source: WeekInReview.NextGoalSource = circleID != nil ? .circle : (fromBaseline ? .progress : .standard)
        return WeekInReview(
            monday: monday, steps: steps, stepsGoal: weeklyStepsGoal, daysGoalMet: met, daysWithGoal: withGoal,
            streak: streak, streakHeldAllWeek: held,
            weightChange: GoalRules.weightChange(to: monday, through: monday.adding(days: 6), tracking: tracking),
            ranks: ranks.sorted { ($0.rank, $0.circle) < ($1.rank, $1.circle) },
            topAchievement: achievement, nextWeekStepsGoal: next, nextGoalSource: source, nextGoalCircleID: circleID,
            hadActivity: hadActivity)
    }

    /// Days of the week starting `monday` whose steps reached that day's goal, of the days that had one.
    static func goalDays(
        monday: LocalDate, tracking: [LocalDate: TrackingDay],
        dailyStepsGoals: [LocalDate: Int]
    ) -> (met: Int, withGoal: Int) {
        var met = 0
        var withGoal = 0
        for offset in 0..<7 {
            let day = monday.adding(days: offset)
            guard let goal = dailyStepsGoals[day] else { continue }
            withGoal += 1
            if let row = tracking[day], row.impossibility == nil, let steps = row.steps, steps >= goal { met += 1 }
        }
        return (met, withGoal)
    }

    /// The streak at the digest's moment (Sunday evening): as validate-streaks settled it through
    /// Saturday (counted from the tracking when it has not), plus Sunday when the user has checked
    /// in. It held all week when Monday to Saturday all kept it.
    static func streakAtWeekEnd(
        monday: LocalDate, tracking: [LocalDate: TrackingDay],
        settled: (current: Int, through: LocalDate?)?
    ) -> (streak: Int, held: Bool) {
        let saturday = monday.adding(days: 5)
        let sunday = monday.adding(days: 6)
        let throughSaturday: Int
        if let settled, settled.through == saturday {
            throughSaturday = settled.current
        } else {
            var count = 0
            var day = saturday
            while tracking[day]?.isCheckedIn == true {
                count += 1
                day = day.adding(days: -1)
            }
            throughSaturday = count
        }
        let today = tracking[sunday]?.isCheckedIn == true ? 1 : 0
        return (throughSaturday + today, throughSaturday >= 6)
    }
}
