import Foundation

/// A user's streak as `user_streaks` holds it (docs/jobs/validate-streaks.md).
public struct StreakState: Sendable, Equatable {
    public var currentStreak: Int
    public var longestStreak: Int
    public var lastCheckinDate: LocalDate?
    public var freezeUsedThisWeek: Bool
    /// The Monday of the week the freeze belongs to.
    public var weekStartDate: LocalDate?
    /// Consecutive days missed without a freeze: 1 is "at risk", 2 resets ("never miss twice").
    public var missedDays: Int

    public static let fresh = StreakState(
        currentStreak: 0, longestStreak: 0, lastCheckinDate: nil,
        freezeUsedThisWeek: false, weekStartDate: nil, missedDays: 0)

    public init(
        currentStreak: Int, longestStreak: Int, lastCheckinDate: LocalDate?, freezeUsedThisWeek: Bool,
        weekStartDate: LocalDate?, missedDays: Int
    ) {
        self.currentStreak = currentStreak
        self.longestStreak = longestStreak
        self.lastCheckinDate = lastCheckinDate
        self.freezeUsedThisWeek = freezeUsedThisWeek
        self.weekStartDate = weekStartDate
        self.missedDays = missedDays
    }
}

/// What settling one local day did to a streak.
public enum DayOutcome: String, Sendable, CaseIterable {
    /// Checked in: the streak grew by one.
    case checkedIn = "checked_in"
    /// Missed with this week's freeze unused: the freeze was used and the day counts as kept.
    case freezeUsed = "freeze_used"
    /// Missed without a freeze: the streak is at risk; one more miss resets it.
    case atRisk = "at_risk"
    /// The second consecutive miss: the current streak is back to 0.
    case reset
    /// Missed with no streak to lose.
    case inactive
}

public enum StreakBadge: String, Sendable, CaseIterable {
    case weekWarrior = "week_warrior"
    case monthlyMaster = "monthly_master"
    case centurion

    /// The streak length that earns the badge.
    public var days: Int {
        switch self {
        case .weekWarrior: 7
        case .monthlyMaster: 30
        case .centurion: 100
        }
    }

    public static func earned(at streak: Int) -> StreakBadge? {
        allCases.first { $0.days == streak }
    }
}

/// The streak rules (docs/jobs/validate-streaks.md), as pure functions.
public enum StreakRules {
    /// Settles one local day, the day after the last one settled.
    public static func settle(_ state: StreakState, day: LocalDate, checkedIn: Bool) -> (StreakState, DayOutcome) {
        var next = state
        if next.weekStartDate != day.monday {
            // The freeze resets on the local Monday.
            next.weekStartDate = day.monday
            next.freezeUsedThisWeek = false
        }
        if checkedIn {
            next.currentStreak += 1
            next.longestStreak = max(next.longestStreak, next.currentStreak)
            next.lastCheckinDate = day
            next.missedDays = 0
            return (next, .checkedIn)
        }
        guard next.currentStreak > 0 else {
            next.missedDays += 1
            return (next, .inactive)
        }
        if next.missedDays == 0 && !next.freezeUsedThisWeek {
            next.freezeUsedThisWeek = true
            return (next, .freezeUsed)
        }
        if next.missedDays == 0 {
            next.missedDays = 1
            return (next, .atRisk)
        }
        next.missedDays += 1
        next.currentStreak = 0
        return (next, .reset)
    }

    /// How many days back `dayNumber`'s check-ins are read.
    public static let checkInsRead = 8

    /// The day of the streak `today` is: a user with 6 days in a row through yesterday is on
    /// day 7 (whether or not they have checked in yet today), one without a streak on none (0).
    /// The days validate-streaks has not settled yet (it runs at 00:05) are settled here from
    /// `checkIns` (the user's check-in days of the last week), as it will settle them. A row
    /// validate-streaks never settled (the app's own) is taken as it stands, through yesterday;
    /// without a row, the check-ins in a row up to yesterday count.
    public static func dayNumber(
        today: LocalDate, stored: StreakState?, settledThrough: LocalDate?,
        checkIns: Set<LocalDate>
    ) -> Int {
        if let stored, settledThrough == nil {
            // (The app may have counted today's check-in in it already.)
            guard stored.currentStreak > 0 else { return 0 }
            return stored.lastCheckinDate == today ? stored.currentStreak : stored.currentStreak + 1
        }
        var state = stored ?? .fresh
        var day = settledThrough.map { $0.adding(days: 1) } ?? (checkIns.min() ?? today)
        // validate-streaks further behind than the check-ins read: those check-ins in a row alone.
        if day < today.adding(days: -checkInsRead) {
            state = .fresh
            day = checkIns.filter { $0 < today }.min() ?? today
        }
        while day < today {
            state = settle(state, day: day, checkedIn: checkIns.contains(day)).0
            day = day.adding(days: 1)
        }
        return state.currentStreak > 0 ? state.currentStreak + 1 : 0
    }

    /// Why a stored streak row cannot be trusted, or nil when it is consistent.
    public static func inconsistency(in state: StreakState, settledThrough: LocalDate?) -> String? {
        if state.currentStreak < 0 { return "current_streak \(state.currentStreak) is negative" }
        if state.longestStreak < state.currentStreak {
            return "longest_streak \(state.longestStreak) is below current_streak \(state.currentStreak)"
        }
        if state.missedDays < 0 { return "missed_days \(state.missedDays) is negative" }
        if let week = state.weekStartDate, week.isoWeekday != 1 { return "week_start_date \(week) is not a Monday" }
        if let last = state.lastCheckinDate, let settledThrough, last > settledThrough {
            return "last_checkin_date \(last) is after settled_through \(settledThrough)"
        }
        return nil
    }
}
