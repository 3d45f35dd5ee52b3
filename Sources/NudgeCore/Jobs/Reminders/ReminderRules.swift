import Foundation

/// The parts of the reminders job (docs/jobs/reminders.md), each decided at most once per its
/// period, marked in `job_work` under `reminders:<part>` on the local day it is about.
public enum ReminderPart: String, Sendable, CaseIterable {
    /// At the user's reminder time, when they have not checked in: a push (required), or the
    /// email at 21:00 when no push can reach them (optional there).
    case dailyCheckin = "daily_checkin"
    /// The email at 21:00 (or at the reminder time, if later) when that day's push ended without
    /// reaching a device (refused, failed, a device gone, push turned off before it went).
    case checkinEmailAfterPush = "daily_checkin_email"
    /// The morning after validate-streaks found a miss without a freeze: the email beside its push
    /// at 09:00, queued when validate-streaks settles the day (a trigger makes the user due).
    case streakRiskEmail = "streak_at_risk_email"
    /// Wednesday 18:00, behind the share of the week's steps goal the week has used.
    case weeklyGoal = "weekly_goal_progress"
    /// 20:00, in a running circle with nothing submitted today.
    case dataSubmission = "data_submission"
    /// The morning after a 7/30/100-day streak (09:00 on the day validate-streaks granted the badge).
    case streakMilestone = "streak_milestone"
    /// The 1st, 09:00, when the month before had any activity.
    case monthlyReport = "monthly_report"
    /// Once, within its window after sign-up.
    case welcome
    /// 25/50/75/100 % of a circle's goal, when the user's submissions reach it.
    case challengeMilestone = "challenge_milestone"
    /// A user Nudge cannot place in time (an unknown zone, an impossible sign-up): skipped, once
    /// a day, with the reason.
    case unplaced
}

/// The times of the reminders (docs/jobs/reminders.md, "The parts"), and the rules that are not
/// about one user's data.
public enum ReminderRules {
    public static let defaultReminderTime = LocalTime(hour: 20, minute: 0)!
    /// The email instead, at 21:00, for a user no push reaches (docs/jobs/reminders.md, "The parts").
    public static let checkinEmailTime = LocalTime(hour: 21, minute: 0)!
    public static let morning = LocalTime(hour: 9, minute: 0)!
    public static let weeklyGoalTime = LocalTime(hour: 18, minute: 0)!
    public static let submissionTime = LocalTime(hour: 20, minute: 0)!
    /// How long after sign-up the welcome email is still sent (an outage of the job); never to
    /// the users who were there before the job was.
    public static let welcomeWindow: TimeInterval = 24 * 3600
    /// How long after the submission that reached it a challenge milestone is still told.
    public static let milestoneWindow: TimeInterval = 24 * 3600
    /// For a user a change made due: how far before the instant the job had set a moment is
    /// still caught up (a learned reminder time that moved a little earlier since); an older one
    /// the change brought into the past is not sent late.
    public static let catchUpBefore: TimeInterval = 2 * 3600
    /// For a user the job had set no instant for (new, or there before the job): how far before
    /// the run a moment is still caught up (one cron interval).
    public static let catchUpUnplanned: TimeInterval = 15 * 60
    /// A moment in the last quarter hour of its day is decided up to this long ahead, for
    /// delivery then: a run every 15 minutes would otherwise meet it only once its day is over.
    public static let lateMomentLead: TimeInterval = 15 * 60
    /// How long a user Nudge cannot place in time is left before the next try.
    public static let zoneRetry: TimeInterval = 24 * 3600

    // MARK: The learned reminder time

    /// The learned time (docs/jobs/reminders.md, "The reminder time"): at least this many check-in days…
    public static let learnedFromDays = 14
    /// …of the last 28 local days before today.
    public static let learningWindowDays = 28
    /// The reminder goes this long before the median check-in…
    public static let learnedLead = 45
    /// …and never outside 06:00–22:00.
    public static let learnedEarliest = LocalTime(hour: 6, minute: 0)!
    public static let learnedLatest = LocalTime(hour: 22, minute: 0)!
    /// A check-in within this long after the day's reminder reached the user may be its answer
    /// (`LearningDay`); a later one is the user's own time.
    public static let promptedWithin: TimeInterval = 60 * 60

    /// A check-in day the reminder time is learned from: the local time of its check-in, in the
    /// zone the user was in when they made it; when it came within `promptedWithin` after that
    /// day's reminder reached the user (a check-in it may have prompted), no earlier than the time
    /// that reminder aimed at plus `learnedLead` (`prompted` then), so that the day holds the
    /// learned time where it was instead of pulling it earlier. A check-in later than that, in the
    /// hour or after it, counts at its own time: a habit that moves later is followed.
    public struct LearningDay: Sendable, Equatable {
        public let time: LocalTime
        public let prompted: Bool

        public init(time: LocalTime, prompted: Bool = false) {
            self.time = time
            self.prompted = prompted
        }
    }

    /// A user's reminder time, where it comes from, and why it is that one.
    public struct ReminderTime: Sendable, Equatable {
        public let time: LocalTime
        public let source: ReminderTimeSource
        public let why: String
    }

    /// The reminder time of a user (docs/jobs/reminders.md, "The reminder time"): their own when
    /// they chose one; otherwise, with 14+ check-in days in the last 28, 45 minutes before the
    /// circular median of those check-ins, within 06:00–22:00 and outside the user's quiet hours
    /// (the end of them when it falls inside, or the default when they last until the day is
    /// over); otherwise 20:00.
    public static func reminderTime(chosen: LocalTime?, checkIns: [LearningDay], quietHours: QuietHours = .standard) -> ReminderTime {
        if let chosen { return ReminderTime(time: chosen, source: .chosen, why: "\(chosen): the user's own reminder time") }
        guard checkIns.count >= learnedFromDays else {
            let why = "\(checkIns.count) of the \(learnedFromDays) check-in days needed"
            return ReminderTime(
                time: defaultReminderTime, source: .standard,
                why: "\(defaultReminderTime): the default (\(why) to learn the user's time)")
        }
        let median = circularMedian(checkIns.map(\.time.minutes))
        let learned = LocalTime(minutes: keptWithinDay(LocalTime(minutes: median - learnedLead).minutes))
        let prompted = checkIns.count { $0.prompted }
        let basis =
            "\(learnedLead) min before the user's median check-in \(LocalTime(minutes: median)) over \(checkIns.count) days"
            + (prompted > 0 ? " (\(prompted) prompted by the reminder, counted at the time it aimed at)" : "")
        guard quietHours.isQuiet(learned) else { return ReminderTime(time: learned, source: .learned, why: "\(learned): \(basis)") }
        let window = "\(quietHours.start)–\(quietHours.end)"
        // The end of the quiet hours, when it comes later the same day.
        if quietHours.end > learned {
            return ReminderTime(
                time: quietHours.end, source: .learned,
                why: "\(quietHours.end): the end of the user's quiet hours (\(window)); \(basis) is \(learned), inside them")
        }
        let inside = "\(basis) is \(learned), inside the user's quiet hours (\(window)), which last until the day is over"
        guard quietHours.isQuiet(defaultReminderTime) else {
            return ReminderTime(time: defaultReminderTime, source: .standard, why: "\(defaultReminderTime): the default; \(inside)")
        }
        // The default is quiet too: the last quarter hour before the quiet hours begin (when the
        // hours outside them are that many; else the default, as for a user Nudge learned nothing of).
        let before = LocalTime(minutes: quietHours.start.minutes - 15)
        guard !quietHours.isQuiet(before) else {
            return ReminderTime(time: defaultReminderTime, source: .standard, why: "\(defaultReminderTime): the default; \(inside)")
        }
        return ReminderTime(
            time: before, source: .learned,
            why: "\(before): before the user's quiet hours, the default \(defaultReminderTime) inside them too; \(inside)")
    }

    /// The median of times of day on the clock's circle, in minutes: the times are read from just
    /// after the widest gap between two of them, so that check-ins around midnight (23:50, 00:10)
    /// have their median at midnight, not at noon. An even count takes the mean of the middle two,
    /// to the minute below.
    public static func circularMedian(_ minutes: [Int]) -> Int {
        let sorted = minutes.sorted()
        guard !sorted.isEmpty else { return 0 }
        var cut = 0
        var widest = -1
        for index in sorted.indices {
            let next = index + 1 < sorted.count ? sorted[index + 1] : sorted[0] + 1440
            if next - sorted[index] > widest {
                widest = next - sorted[index]
                cut = (index + 1) % sorted.count
            }
        }
        let read = Array(sorted[cut...]) + sorted[..<cut].map { $0 + 1440 }
        let middle = read.count / 2
        let median = read.count % 2 == 1 ? read[middle] : (read[middle - 1] + read[middle]) / 2
        return median % 1440
    }

    /// A learned time outside 06:00–22:00 moved to the nearer of the two on the clock (23:15 to
    /// 22:00, 04:00 to 06:00).
    static func keptWithinDay(_ minutes: Int) -> Int {
        let earliest = learnedEarliest.minutes
        let latest = learnedLatest.minutes
        guard minutes < earliest || minutes > latest else { return minutes }
        let pastLatest = (minutes - latest + 1440) % 1440
        let beforeEarliest = (earliest - minutes + 1440) % 1440
        return pastLatest <= beforeEarliest ? latest : earliest
    }

    // MARK: Moments

    /// The days a moment falls on.
    public enum Days: Sendable, Equatable {
        case every
        /// ISO weekday, Monday 1.
        case weekday(Int)
        /// The first of the month.
        case firstOfMonth

        func contains(_ day: LocalDate) -> Bool {
            switch self {
            case .every: true
            case .weekday(let weekday): day.isoWeekday == weekday
            case .firstOfMonth: day.components.day == 1
            }
        }
    }

    /// The first occurrence after `now` on a day after `day` (or any day, when nil), within 32 days.
    public static func next(
        _ days: Days, at time: LocalTime, after now: Date, notOn decided: LocalDate? = nil,
        calendar: LocalCalendar
    ) -> Date {
        let today = calendar.localDate(at: now)
        for ahead in 0...32 {
            let day = today.adding(days: ahead)
            guard days.contains(day), decided.map({ day > $0 }) ?? true else { continue }
            let instant = calendar.instant(of: day, at: time)
            if instant > now { return instant }
        }
        return now.addingTimeInterval(24 * 3600)
    }

    // MARK: Weekly goal progress

    /// The share of the user's local week (Monday 00:00 to the next Monday 00:00, as their
    /// clocks have it) that has passed at `instant`: at Wednesday 18:00 of a week of 168 hours,
    /// 66/168 = 39 %.
    public static func weekElapsed(at instant: Date, calendar: LocalCalendar) -> Double {
        let monday = calendar.localDate(at: instant).monday
        let start = calendar.start(of: monday)
        let length = calendar.start(of: monday.adding(days: 7)).timeIntervalSince(start)
        return min(1, max(0, instant.timeIntervalSince(start) / length))
    }

    // MARK: Challenge milestones

    public static let milestones = [25, 50, 75, 100]
    /// By email, 50 % and 100 % only (docs/jobs/reminders.md, "The parts").
    public static let emailMilestones: Set<Int> = [50, 100]

    /// What a user's progress in one circle tells now: the milestones reached and not decided
    /// before, the one told by push and the one by email (the highest of each set; those passed
    /// together with a higher one are covered by it; the email's only when it was reached within
    /// `milestoneWindow` too), or, when the latest was reached more than `milestoneWindow` ago, none told.
    public struct MilestoneDecision: Sendable, Equatable {
        public var newlyReached: [Int] = []
        public var push: Int?
        public var email: Int?
        /// When the highest newly reached milestone was reached, when it is too long ago to tell.
        public var tooLate: Date?
    }

    /// `reached`: each milestone the user has reached, with the instant of the submission that
    /// reached it; `decided`: those recorded before.
    public static func milestones(reached: [Int: Date], decided: Set<Int>, now: Date) -> MilestoneDecision {
        var decision = MilestoneDecision()
        decision.newlyReached = milestones.filter { reached[$0] != nil && !decided.contains($0) }
        guard let highest = decision.newlyReached.last, let at = reached[highest] else { return decision }
        if now.timeIntervalSince(at) > milestoneWindow {
            decision.tooLate = at
            return decision
        }
        decision.push = highest
        // (An email milestone passed long before the fresh one is not told late either.)
        decision.email = decision.newlyReached.last {
            emailMilestones.contains($0) && reached[$0].map { now.timeIntervalSince($0) <= milestoneWindow } == true
        }
        return decision
    }

    /// The first submission (in the order they were made) at which the user's progress in a
    /// circle reached each milestone. A steps circle: the steps submitted within the challenge
    /// against its whole goal (`challenge_step_goal`, a week's, times the challenge's weeks); a
    /// weight-loss circle: the weight lost from the starting weight against the loss the
    /// member set out to make (starting − target).
    public static func reached(_ progress: CircleProgress) -> [Int: Date] {
        var reached: [Int: Date] = [:]
        var steps = 0
        for submission in progress.submissions.sorted(by: { ($0.at, $0.day) < ($1.at, $1.day) }) {
            let percent: Double
            switch progress.challenge {
            case .steps:
                guard let goal = progress.stepsGoal, goal > 0 else { return [:] }
                steps += max(0, submission.steps ?? 0)
                percent = 100 * Double(steps) / Double(goal)
            case .weightLoss:
                guard let start = progress.startingWeight, let target = progress.targetWeight, start > target,
                    let weight = submission.weight
                else { continue }
                percent = 100 * (start - weight) / (start - target)
            }
            for milestone in milestones where percent >= Double(milestone) && reached[milestone] == nil {
                reached[milestone] = submission.at
            }
        }
        return reached
    }

    /// A member's place in a running challenge, as the milestones read it.
    public struct CircleProgress: Sendable, Equatable {
        public let circleID: UUID
        public let name: String
        public let challenge: FitCircleMembership.Challenge
        /// The whole challenge's steps goal (a steps circle).
        public let stepsGoal: Int?
        public let startingWeight: Double?
        public let targetWeight: Double?
        /// The member's submissions within the challenge's days.
        public let submissions: [Submission]

        public struct Submission: Sendable, Equatable {
            public let day: LocalDate
            public let steps: Int?
            public let weight: Double?
            public let at: Date

            public init(day: LocalDate, steps: Int?, weight: Double?, at: Date) {
                self.day = day
                self.steps = steps
                self.weight = weight
                self.at = at
            }
        }

        public init(
            circleID: UUID, name: String, challenge: FitCircleMembership.Challenge, stepsGoal: Int?,
            startingWeight: Double?, targetWeight: Double?, submissions: [Submission]
        ) {
            self.circleID = circleID
            self.name = name
            self.challenge = challenge
            self.stepsGoal = stepsGoal
            self.startingWeight = startingWeight
            self.targetWeight = targetWeight
            self.submissions = submissions
        }

        /// A steps circle's whole goal: its weekly goal per member over the challenge's days.
        public static func stepsGoal(weekly: Int?, startsOn: LocalDate, endsOn: LocalDate) -> Int? {
            guard let weekly, weekly > 0 else { return nil }
            let days = endsOn.days(since: startsOn) + 1
            return Int((Double(weekly) * Double(days) / 7).rounded())
        }
    }

    // MARK: The month before

    /// What the monthly report tells of one month.
    public struct Month: Sendable, Equatable {
        public let first: LocalDate
        public var steps = 0
        public var activeDays = 0
        public var checkInDays = 0
        public var weightChange: Double?

        public var hadActivity: Bool { activeDays > 0 }
    }

    /// The month starting on `first` from the user's tracking: steps, active days (steps, a
    /// check-in or a weigh-in), check-in days, and the change from the month's first weigh-in
    /// to its last. A row no person could have logged is left out.
    public static func month(_ first: LocalDate, tracking: [LocalDate: TrackingDay]) -> Month {
        var month = Month(first: first)
        let (year, number, _) = first.components
        let next = number == 12 ? LocalDate(year: year + 1, month: 1, day: 1)! : LocalDate(year: year, month: number + 1, day: 1)!
        var weights: [Double] = []
        var day = first
        while day < next {
            defer { day = day.adding(days: 1) }
            guard let row = tracking[day], row.impossibility == nil else { continue }
            month.steps += max(0, row.steps ?? 0)
            if (row.steps ?? 0) > 0 || row.isCheckedIn || row.weight != nil { month.activeDays += 1 }
            if row.isCheckedIn { month.checkInDays += 1 }
            if let weight = row.weight { weights.append(weight) }
        }
        if weights.count >= 2 { month.weightChange = weights.last! - weights.first! }
        return month
    }
}
