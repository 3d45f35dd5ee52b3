import Foundation

/// What the user has done that a notification may ask for, as dispatch reads it when the
/// notification's turn comes (docs/jobs/dispatch.md, "A reason that is gone").
public struct UserActions: Sendable, Equatable {
    /// Their check-ins by local day (mood and energy logged), with when each was made, when the
    /// app recorded it (`daily_tracking.checked_in_at`).
    public var checkIns: [LocalDate: Date?]
    /// The local days they submitted to a FitCircle on, with the first submission's instant.
    public var submissions: [LocalDate: Date]

    public init(checkIns: [LocalDate: Date?] = [:], submissions: [LocalDate: Date] = [:]) {
        self.checkIns = checkIns
        self.submissions = submissions
    }

    public static let none = UserActions()
}

extension DispatchRules {
    /// The step a notification whose reason is gone ends at.
    public static let answeredStep = "answered"

    /// Why `row` is no longer worth sending, or nil: what it asks the user to do on its day
    /// (`NotificationKind.asks`) is done. One rule for every type that asks something: the daily
    /// check-in reminder, the streak notifications (for the day after the missed one) and the data
    /// submission reminder, by push or by email. Not a row whose request left (an email, an
    /// SMS); a push some device has and that waits for the others ends there (`.reached`).
    static func answered(_ row: QueuedNotification, actions: UserActions) -> String? {
        guard let ask = row.kind.asks, row.sentAt == nil || !row.deliveredTo.isEmpty else { return nil }
        switch ask {
        case .checkIn:
            guard let made = actions.checkIns[row.localDay] else { return nil }
            let when = made.map { " at \($0.formatted(.iso8601))" } ?? ""
            return "the user checked in for \(row.localDay)\(when), which it asks for"
        case .submission:
            guard let made = actions.submissions[row.localDay] else { return nil }
            return "the user submitted their data for \(row.localDay) at \(made.formatted(.iso8601)), which it asks for"
        }
    }

    /// The quiet hours that hold `row`, or nil when none does. A critical or time-critical type
    /// passes them and the weekend pause, except the daily check-in reminder at a time Nudge
    /// learned (its payload's `"reminder_time": "learned"`): the exemption belongs to a time the
    /// user chose, so quiet hours hold that one (the weekend pause does not: it is still the
    /// required reminder). docs/jobs/reminders.md, "The reminder time".
    static func quietHours(holding row: QueuedNotification, preferences: DeliveryPreferences) -> QuietHours? {
        let kind = row.kind
        guard kind.passesQuietHours else { return preferences.quietHours }
        guard kind.type == "daily_checkin", row.payloadObject?["reminder_time"]?.text == ReminderTimeSource.learned.rawValue
        else { return nil }
        let hours = preferences.quietHours
        return QuietHours(start: hours.start, end: hours.end, pauseWeekends: false)
    }
}

/// Where a user's daily check-in reminder time comes from; its push's payload says which
/// (`reminder_time`), so that dispatch knows whether quiet hours hold it.
public enum ReminderTimeSource: String, Sendable, Equatable {
    /// The user's own (`notification_preferences.daily_reminder_time`, chosen).
    case chosen
    /// Learned from the user's check-ins.
    case learned
    /// 20:00, the default (docs/jobs/reminders.md, "The reminder time").
    case standard = "default"
}
