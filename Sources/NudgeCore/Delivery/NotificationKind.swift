import Foundation

/// What dispatch knows about each type of notification (docs/jobs/dispatch.md, "Per user, in this
/// order"): its frequency caps and user control, whether it is critical, the proactive push, the
/// call preview, and the types Nudge's own jobs add (the streak freeze).
public struct NotificationKind: Sendable, Equatable {
    public let type: String
    /// The critical types, which the user cannot turn off (the daily check-in reminder, challenge
    /// milestones, FitCircle invitations; docs/jobs/dispatch.md, "Preferences"): no per-type switch
    /// holds them, quiet hours and the weekend pause do not defer them, and the daily total does
    /// not suppress them (they count towards it).
    public let isCritical: Bool
    /// A call preview (docs/jobs/preview-notifications.md): the user asked for the call, so neither quiet hours nor any cap
    /// applies, and a late one is worthless.
    public let isTimeCritical: Bool
    /// The `notification_preferences` column that switches this type's push off, if it has one.
    public let pushSwitch: String?
    public let caps: [FrequencyCap]
    /// Whether the daily total (3 a day) may suppress it, apart from the critical and
    /// time-critical kinds: not the week's one summary, which other types' traffic must not cost.
    let yieldsToDailyTotal: Bool
    /// Notifications of one group due within five minutes of each other go out as one delivery
    /// (docs/jobs/dispatch.md, "Grouping"), in one thread on the device (APNs `thread-id`, FCM's
    /// notification tag).
    public let group: String
    /// Where the notification opens the app when its payload names no `deep_link`.
    public let deepLink: String
    /// What it asks the user to do on its `local_day`, when doing it makes the notification
    /// pointless: once done, it is not sent (`DispatchRules.answered`).
    public let asks: Ask?

    /// Something a notification asks the user to do on the day it is for.
    public enum Ask: Sendable, Equatable {
        /// Check in (mood and energy logged in `daily_tracking`).
        case checkIn
        /// Submit the day's data to a FitCircle (`fitcircle_data_submissions`).
        case submission
    }

    init(
        _ type: String, critical: Bool = false, timeCritical: Bool = false, pushSwitch: String?, caps: [FrequencyCap],
        yieldsToDailyTotal: Bool = true, group: String? = nil, deepLink: String, asks: Ask? = nil
    ) {
        self.asks = asks
        self.type = type
        self.yieldsToDailyTotal = yieldsToDailyTotal
        self.isCritical = critical
        self.isTimeCritical = timeCritical
        self.pushSwitch = pushSwitch
        self.caps = caps
        self.group = group ?? type
        self.deepLink = deepLink
    }

    /// Whether quiet hours and the weekend pause let it through.
    public var passesQuietHours: Bool { isCritical || isTimeCritical }

    /// Whether the daily total (3 a day) may suppress it. Every delivery counts towards it.
    public var heldByDailyTotal: Bool { yieldsToDailyTotal && !isCritical && !isTimeCritical }

    /// At most this many notifications a user's local day (docs/jobs/dispatch.md, "Caps").
    public static let dailyTotal = 3

    public static let catalog: [String: NotificationKind] = Dictionary(
        uniqueKeysWithValues: [
            NotificationKind(
                "daily_checkin", critical: true, pushSwitch: nil, caps: [.perLocalDay(1)], deepLink: "fitcircle://checkin",
                asks: .checkIn),
            // Both are for the day after the missed one, and ask for its check-in.
            NotificationKind(
                "streak_at_risk", pushSwitch: "push_streak_risk", caps: [.perLocalDay(1)], group: "streak",
                deepLink: "fitcircle://checkin", asks: .checkIn),
            NotificationKind(
                "streak_freeze_used", pushSwitch: "push_streak_risk", caps: [.perLocalDay(1)], group: "streak",
                deepLink: "fitcircle://checkin", asks: .checkIn),
            // The morning after a 7/30/100-day streak (docs/jobs/reminders.md, "The parts"): one a day
            // at most.
            NotificationKind(
                "streak_milestone", pushSwitch: nil, caps: [.perLocalDay(1)], group: "streak",
                deepLink: "fitcircle://streak"),
            NotificationKind(
                "weekly_goal_progress", pushSwitch: "push_weekly_goal", caps: [.perLocalWeek(1)],
                deepLink: "fitcircle://goals"),
            NotificationKind(
                "data_submission", pushSwitch: "push_data_submission", caps: [.perLocalDay(1)],
                deepLink: "fitcircle://submit", asks: .submission),
            NotificationKind(
                "leaderboard_change", pushSwitch: "push_leaderboard_change", caps: [.perLocalDay(3), .perHour(1)],
                deepLink: "fitcircle://leaderboard"),
            NotificationKind(
                "social_engagement", pushSwitch: "push_social_engagement", caps: [.perLocalDay(10)],
                deepLink: "fitcircle://social"),
            // The week's one summary: never lost to the day's other traffic (its own cap holds it).
            NotificationKind(
                "weekly_digest", pushSwitch: "push_weekly_digest", caps: [.perLocalWeek(1)], yieldsToDailyTotal: false,
                deepLink: "fitcircle://digest"),
            NotificationKind(
                "challenge_milestone", critical: true, pushSwitch: nil, caps: [.perChallenge(4)],
                deepLink: "fitcircle://challenge"),
            NotificationKind("fitcircle_invite", critical: true, pushSwitch: nil, caps: [], deepLink: "fitcircle://invites"),
            // push-trigger decided it against the user's own frequency (docs/jobs/push-trigger.md); one
            // a day at most.
            NotificationKind("proactive_push", pushSwitch: nil, caps: [.perLocalDay(1)], deepLink: "fitcircle://coach"),
            // Five minutes before a call the user asked for (docs/jobs/preview-notifications.md).
            NotificationKind("preview_push", timeCritical: true, pushSwitch: nil, caps: [], deepLink: "fitcircle://incoming-call"),
            // Its SMS (path B), and the SMS after a push that did not reach the user (paths A and C).
            NotificationKind("preview_sms", timeCritical: true, pushSwitch: nil, caps: [], deepLink: "fitcircle://incoming-call"),
            NotificationKind("fallback_sms", timeCritical: true, pushSwitch: nil, caps: [], deepLink: "fitcircle://incoming-call"),
        ].map { ($0.type, $0) })

    /// The kind of `type`; a type this catalogue does not know is optional, has no switch of its
    /// own and only the daily total as cap.
    public static func of(_ type: String) -> NotificationKind {
        catalog[type] ?? NotificationKind(type, pushSwitch: nil, caps: [], deepLink: "fitcircle://home")
    }
}

/// A type's frequency caps (docs/jobs/dispatch.md, "Caps").
public enum FrequencyCap: Sendable, Equatable, CustomStringConvertible {
    /// At most n on the user's local day.
    case perLocalDay(Int)
    /// At most n in any 60 minutes ("throttled to 1/hour").
    case perHour(Int)
    /// At most n in the user's local week (Monday to Sunday).
    case perLocalWeek(Int)
    /// At most n for one challenge (the payload's `fitcircle_id`), ever.
    case perChallenge(Int)

    public var description: String {
        switch self {
        case .perLocalDay(let n): "\(n) a day"
        case .perHour(let n): "\(n) an hour"
        case .perLocalWeek(let n): "\(n) a week"
        case .perChallenge(let n): "\(n) per challenge"
        }
    }
}
