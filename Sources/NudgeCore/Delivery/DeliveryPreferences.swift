import Foundation

/// A user's `notification_preferences` as dispatch reads them. No row means every switch on, quiet
/// hours 22:00–08:00 and no weekend pause (docs/jobs/dispatch.md, "Preferences").
public struct DeliveryPreferences: Sendable, Equatable {
    /// The channels' master switches.
    public var pushEnabled = true
    public var emailEnabled = true
    /// The per-type push switches that are off, by column name (`push_leaderboard_change`).
    public var pushSwitchedOff: Set<String> = []
    /// The per-type email switches that are off: `notification_preferences`' columns
    /// (`email_weekly_digest`) and `email_preferences`' (`email_preferences.weekly_digest`).
    public var emailSwitchedOff: Set<String> = []
    public var quietHours = QuietHours.standard

    public init() {}

    public static let standard = DeliveryPreferences()

    /// Why a push of `kind` is not wanted, or nil when it is: the master switch holds every
    /// type; a type's own switch holds it unless the type is critical.
    public func pushRefusal(for kind: NotificationKind) -> String? {
        if !pushEnabled { return "push notifications are off (notification_preferences.push_enabled)" }
        if !kind.isCritical, let column = kind.pushSwitch, pushSwitchedOff.contains(column) {
            return "\(kind.type) pushes are off (notification_preferences.\(column))"
        }
        return nil
    }

    /// Why an email of `type` is not wanted, or nil when it is: the email master switch holds
    /// every type; a type the user may stop is held by either table's switch for it (one-click
    /// unsubscribe turns both off).
    public func emailRefusal(for type: String) -> String? {
        if !emailEnabled { return "emails are off (notification_preferences.email_enabled)" }
        guard let email = EmailType.of(notificationType: type) else { return nil }
        if emailSwitchedOff.contains(email.notificationPreference) {
            return "\(type) emails are off (notification_preferences.\(email.notificationPreference))"
        }
        if emailSwitchedOff.contains("email_preferences." + email.emailPreference) {
            return "\(type) emails are off (email_preferences.\(email.emailPreference): unsubscribed)"
        }
        return nil
    }
}

/// Do-not-disturb hours and the weekend pause, in the user's local time
/// (docs/jobs/dispatch.md, "Quiet hours and the weekend pause").
public struct QuietHours: Sendable, Equatable {
    /// The window starts at `start` and ends at `end`, local wall-clock time; it runs overnight
    /// when `end` is earlier than `start` (22:00–08:00). Equal times mean no quiet hours.
    public let start: LocalTime
    public let end: LocalTime
    /// "Pause non-critical notifications on weekends": all of the user's local Saturday and Sunday.
    public let pauseWeekends: Bool

    public init(start: LocalTime, end: LocalTime, pauseWeekends: Bool) {
        self.start = start
        self.end = end
        self.pauseWeekends = pauseWeekends
    }

    public static let standard = QuietHours(
        start: LocalTime(hour: 22, minute: 0)!, end: LocalTime(hour: 8, minute: 0)!,
        pauseWeekends: false)

    /// The quiet hours of a `notification_preferences` row, its `dnd_start` and `dnd_end` read as
    /// `HH:MM`; a row that holds other text is malformed.
    public init(reading start: String, _ end: String, pauseWeekends: Bool) throws {
        guard let start = LocalTime(start), let end = LocalTime(end) else {
            throw MalformedData("notification_preferences holds quiet hours Nudge cannot read")
        }
        self.init(start: start, end: end, pauseWeekends: pauseWeekends)
    }

    /// Whether the wall-clock time `time` falls inside the do-not-disturb window.
    public func isQuiet(_ time: LocalTime) -> Bool {
        if start == end { return false }
        return start < end ? (start <= time && time < end) : (time >= start || time < end)
    }

    /// When a notification that may be held, due at `instant`, can go out: `instant` itself when
    /// it falls in no quiet window, else the end of the window (of both, when the weekend ends
    /// inside the night's quiet hours), with the reason. Days of 23 or 25 hours and a window end
    /// that the clocks skip come out as `LocalCalendar` places them.
    public func release(at instant: Date, calendar: LocalCalendar) -> (until: Date, reason: String)? {
        var moment = instant
        var reasons: [String] = []
        // Each step moves forward to a window's end; a weekend and two nights are the most.
        for _ in 0..<6 {
            let day = calendar.localDate(at: moment)
            if pauseWeekends && day.isoWeekday >= 6 {
                moment = calendar.start(of: day.adding(days: 8 - day.isoWeekday))
                if !reasons.contains("weekend pause") { reasons.append("weekend pause") }
                continue
            }
            let time = calendar.localTime(at: moment)
            if isQuiet(time) {
                let endDay = start < end || time < end ? day : day.adding(days: 1)
                moment = max(calendar.instant(of: endDay, at: end), moment.addingTimeInterval(60))
                if !reasons.contains("quiet hours \(start)–\(end)") { reasons.append("quiet hours \(start)–\(end)") }
                continue
            }
            break
        }
        return reasons.isEmpty ? nil : (moment, reasons.joined(separator: " and "))
    }
}
