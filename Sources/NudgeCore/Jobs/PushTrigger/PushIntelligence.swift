import Foundation

/// The three kinds of proactive push, as `push_log.push_type` names them.
public enum PushType: String, Sendable, Equatable, CaseIterable {
    case eventBased = "event_based"
    case patternBased = "pattern_based"
    case reEngagement = "re_engagement"
}

/// What a proactive push will be about (docs/jobs/push-trigger.md, "What to say").
public struct PushDecision: Sendable, Equatable {
    public let pushType: PushType
    /// What the coach knows that makes this push specific, for the prompt: Nudge's words, with
    /// what the user wrote or the coach gathered about them marked as data (`UserText.asData`).
    public let context: String
    /// A word of Nudge's own vocabulary ("presentation"), never the user's.
    public let eventDescription: String?
    public let patternTheme: String?
    /// The coaching domain the push opens a new conversation in.
    public let conversationDomain: String?
    /// For re-engagement: what the last conversation was about, at most 50 tokens.
    public let topicSummary: String?
}

/// A message the user wrote to the coach.
public struct UserMessage: Sendable, Equatable {
    public let content: String
    public let createdAt: Date
    /// The domain of the conversation it belongs to.
    public let domain: String?

    public init(content: String, createdAt: Date, domain: String?) {
        self.content = content
        self.createdAt = createdAt
        self.domain = domain
    }
}

public struct ConversationSummary: Sendable, Equatable {
    public let domain: String?
    public let title: String?
    public let createdAt: Date
    public let updatedAt: Date

    public init(domain: String?, title: String?, createdAt: Date, updatedAt: Date) {
        self.domain = domain
        self.title = title
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}

/// A pattern the coach has recognised, from `pattern_cache` (docs/jobs/push-trigger.md, "What to say").
public struct RecognisedPattern: Sendable, Equatable, Decodable {
    public let theme: String
    public let occurrences: Int
    public let domains: [String]
    public let confidence: Double
    public let synthesis: String

    public init(theme: String, occurrences: Int, domains: [String], confidence: Double, synthesis: String) {
        self.theme = theme
        self.occurrences = occurrences
        self.domains = domains
        self.confidence = confidence
        self.synthesis = synthesis
    }
}

/// What a proactive push is about: the three layers in priority order (docs/jobs/push-trigger.md,
/// "What to say"), as pure functions of what the coach knows about the user and the run's clock.
public enum PushIntelligence {
    public static let minimumEventConfidence = 0.7
    /// How far ahead an event may be for an event-based push.
    public static let eventHorizon: TimeInterval = 24 * 3600
    /// How far back the user's messages are scanned for events.
    public static let messageLookback: TimeInterval = 7 * 24 * 3600
    public static let patternInactiveDays = 2
    public static let reEngagementInactiveDays = 3
    public static let topicSummaryTokens = 50

    /// What the coach knows about one user, for the decision.
    public struct Facts: Sendable {
        /// The user's own messages, newest first (the last 7 days, and the last conversation's).
        public let messages: [UserMessage]
        /// The most recent conversation, with the user's last words in it, newest first.
        public let lastConversation: ConversationSummary?
        public let lastConversationMessages: [String]
        /// Patterns from a cache that is still fresh (fewer than 3 sessions old).
        public let patterns: [RecognisedPattern]
        /// The latest sign of life: an app open, a conversation, a message.
        public let lastActivity: Date?

        public init(
            messages: [UserMessage], lastConversation: ConversationSummary?, lastConversationMessages: [String],
            patterns: [RecognisedPattern], lastActivity: Date?
        ) {
            self.messages = messages
            self.lastConversation = lastConversation
            self.lastConversationMessages = lastConversationMessages
            self.patterns = patterns
            self.lastActivity = lastActivity
        }
    }

    /// Event-based first, then pattern-based, then re-engagement; nil when no push is warranted
    /// (never a generic one).
    public static func decide(_ facts: Facts, now: Date, calendar: LocalCalendar, locale: String) -> PushDecision? {
        if let event = upcomingEvent(in: facts.messages, now: now, calendar: calendar, locale: locale) {
            return event
        }
        let today = calendar.localDate(at: now)
        let inactiveDays = facts.lastActivity.map { today.days(since: calendar.localDate(at: $0)) } ?? Int.max
        if inactiveDays >= patternInactiveDays, let pattern = topPattern(facts.patterns) {
            return PushDecision(
                pushType: .patternBased,
                context: "Quiet for \(describeDays(inactiveDays)). A pattern the coach has recognised: "
                    + UserText.asData("\(pattern.theme) (\(pattern.synthesis))"),
                eventDescription: nil, patternTheme: pattern.theme, conversationDomain: pattern.domains.first, topicSummary: nil)
        }
        if inactiveDays >= reEngagementInactiveDays, let conversation = facts.lastConversation {
            let topic = topicSummary(title: conversation.title, lastWords: facts.lastConversationMessages)
            let ago = today.days(since: calendar.localDate(at: conversation.updatedAt))
            return PushDecision(
                pushType: .reEngagement,
                context: "Quiet for \(describeDays(inactiveDays)). Last conversation \(describeDays(ago)) ago"
                    + (conversation.domain.map { ", about \(UserText.asData($0))" } ?? "") + ".",
                eventDescription: nil, patternTheme: nil, conversationDomain: conversation.domain, topicSummary: topic)
        }
        return nil
    }

    /// The soonest event within the next 24 hours mentioned in the last 7 days (the latest mention
    /// when two events are as soon).
    static func upcomingEvent(in messages: [UserMessage], now: Date, calendar: LocalCalendar, locale: String) -> PushDecision? {
        let horizon = now.addingTimeInterval(eventHorizon)
        var best: (reference: TemporalReference, start: Date, domain: String?)?
        for message in messages where message.createdAt <= now && now.timeIntervalSince(message.createdAt) <= messageLookback {
            for reference in TemporalReferences.extract(from: message.content, sentAt: message.createdAt, calendar: calendar, locale: locale)
            where reference.confidence >= minimumEventConfidence {
                let interval = reference.when.interval(in: calendar)
                guard interval.upperBound > now, interval.lowerBound <= horizon else { continue }
                let start = max(interval.lowerBound, now)
                if let current = best,
                    current.start < start || (current.start == start && current.reference.sourceMessageCreatedAt >= message.createdAt)
                {
                    continue
                }
                best = (reference, start, message.domain)
            }
        }
        guard let best, let event = best.reference.eventDescription else { return nil }
        let when = describe(best.reference.when, from: calendar.localDate(at: now))
        return PushDecision(
            pushType: .eventBased, context: "Mentioned an upcoming \(event), \(when).",
            eventDescription: event, patternTheme: nil, conversationDomain: best.domain, topicSummary: nil)
    }

    /// The most confident pattern, the most frequent among equals.
    static func topPattern(_ patterns: [RecognisedPattern]) -> RecognisedPattern? {
        patterns.max { ($0.confidence, $0.occurrences) < ($1.confidence, $1.occurrences) }
    }

    /// The conversation's title and the user's last words in it, cut to at most 50 tokens
    /// (estimated as four characters a token, the usual rule for English).
    static func topicSummary(title: String?, lastWords: [String]) -> String? {
        let parts = ([title] + lastWords.reversed().map(Optional.some)).compactMap { $0?.trimmingCharacters(in: .whitespacesAndNewlines) }
            .filter { !$0.isEmpty }
        guard !parts.isEmpty else { return nil }
        var summary = ""
        for word in parts.joined(separator: " / ").split(separator: " ") {
            let candidate = summary.isEmpty ? String(word) : summary + " " + word
            guard estimatedTokens(candidate) <= topicSummaryTokens else { break }
            summary = candidate
        }
        return summary.isEmpty ? nil : summary
    }

    static func estimatedTokens(_ text: String) -> Int {
        (text.count + 3) / 4
    }

    static func describe(_ when: EventTime, from today: LocalDate) -> String {
        switch when {
        case .evening(let day) where day == today: "tonight"
        case .evening(let day) where day == today.adding(days: 1): "tomorrow evening"
        case .day(let day) where day == today: "today"
        case .day(let day) where day == today.adding(days: 1): "tomorrow"
        case .evening(let day), .day(let day): "on \(day)"
        case .week(let monday): "in the week of \(monday)"
        }
    }

    private static func describeDays(_ days: Int) -> String {
        days == Int.max ? "a long time" : days == 1 ? "1 day" : "\(days) days"
    }
}
