import Foundation

/// A user's streak as `user_streaks` holds it (seed 003, Feature 4).
public struct StreakState: Sendable, Equatable {
    public var currentStreak: Int
    public var longestStreak: Int
    public var lastCheckinDate: LocalDate?
    public var freezeUsedThisWeek: Bool
    /// The Monday of the week the freeze belongs to.
    public var weekStartDate: LocalDate?
    /// Consecutive days missed without a freeze: 1 is "at risk", 2 resets ("never miss twice").
    public var missedDays: Int

    public static let fresh = StreakState(currentStreak: 0, longestStreak: 0, lastCheckinDate: nil,
                                          freezeUsedThisWeek: false, weekStartDate: nil, missedDays: 0)

    public init(currentStreak: Int, longestStreak: Int, lastCheckinDate: LocalDate?, freezeUsedThisWeek: Bool,
                weekStartDate: LocalDate?, missedDays: Int) {
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

/// The streak rules of seed 003, Feature 4, and SPEC §4.2, as pure functions.
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
