import Foundation

/// How often a user wants proactive check-ins (`context_profiles.notification_preferences.frequency`).
public enum CheckInFrequency: String, Sendable, CaseIterable {
    case daily
    case fewTimesAWeek = "few_times_a_week"
    case weekly

    /// Local days that must separate two proactive pushes.
    public var intervalDays: Int {
        switch self {
        case .daily: 1
        case .fewTimesAWeek: 2
        case .weekly: 7
        }
    }
}

/// The frequency rules (docs/jobs/push-trigger.md, "Frequency"), on the user's local days: at
/// most one proactive push a local day, the user's interval since the last one, and none on a
/// local day with a conversation.
public enum PushEligibility {
    public enum Refusal: Sendable, Equatable, CustomStringConvertible {
        case tooSoon(lastPushDaysAgo: Int, frequency: CheckInFrequency)
        case sessionToday

        public var outcome: String {
            switch self {
            case .tooSoon: "too_soon"
            case .sessionToday: "session_today"
            }
        }

        public var description: String {
            switch self {
            case .tooSoon(let days, let frequency):
                "last proactive push \(days == 0 ? "today" : days == 1 ? "yesterday" : "\(days) days ago"); \(frequency.rawValue) waits \(frequency.intervalDays) day\(frequency.intervalDays == 1 ? "" : "s")"
            case .sessionToday:
                "had a conversation with the coach today"
            }
        }
    }

    /// Nil when a push may go today. `messageTimes` are when the user wrote to the coach lately.
    public static func refusal(
        frequency: CheckInFrequency, lastPushAt: Date?, conversations: [ConversationSummary],
        messageTimes: [Date] = [], now: Date, calendar: LocalCalendar
    ) -> Refusal? {
        let today = calendar.localDate(at: now)
        if let lastPushAt {
            let days = today.days(since: calendar.localDate(at: lastPushAt))
            if days < frequency.intervalDays { return .tooSoon(lastPushDaysAgo: days, frequency: frequency) }
        }
        // A conversation that began or went on today, or a message written today, is a session
        // today. A run replayed at an earlier `now` cannot know a later `updated_at`: it goes by
        // the start of such a conversation, and by the messages written up to `now`.
        let sessionToday =
            conversations.contains { conversation in
                guard conversation.createdAt <= now else { return false }
                let lastKnown = conversation.updatedAt <= now ? conversation.updatedAt : conversation.createdAt
                return calendar.localDate(at: conversation.createdAt) <= today && calendar.localDate(at: lastKnown) >= today
            } || messageTimes.contains { $0 <= now && calendar.localDate(at: $0) == today }
        return sessionToday ? .sessionToday : nil
    }
}
