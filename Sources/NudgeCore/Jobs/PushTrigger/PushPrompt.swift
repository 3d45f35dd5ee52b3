import Foundation

/// A learned coaching style: four preferences from 0 to 1 (docs/jobs/push-trigger.md, "Copy").
public struct StylePreference: Sendable, Equatable, Decodable {
    public let directVsExploratory: Double
    public let briefVsDetailed: Double
    public let actionVsReflective: Double
    public let challengingVsSupportive: Double

    public init(directVsExploratory: Double, briefVsDetailed: Double, actionVsReflective: Double, challengingVsSupportive: Double) {
        self.directVsExploratory = directVsExploratory
        self.briefVsDetailed = briefVsDetailed
        self.actionVsReflective = actionVsReflective
        self.challengingVsSupportive = challengingVsSupportive
    }

    enum CodingKeys: String, CodingKey {
        case directVsExploratory = "direct_vs_exploratory"
        case briefVsDetailed = "brief_vs_detailed"
        case
            actionVsReflective = "action_vs_reflective"
        case challengingVsSupportive = "challenging_vs_supportive"
    }

    /// The style's instructions: a pole where the preference leans clearly, balance otherwise.
    public var instructions: String {
        func lean(_ value: Double, _ low: String, _ high: String, _ balanced: String) -> String {
            value < 0.35 ? low : value > 0.65 ? high : balanced
        }
        return [
            lean(
                directVsExploratory, "Be direct and get to the point.", "Be exploratory: open a question rather than state a view.",
                "Balance directness with exploration."),
            lean(briefVsDetailed, "Keep it brief.", "A little detail is welcome.", "Keep it short but specific."),
            lean(actionVsReflective, "Lean towards a concrete next step.", "Invite reflection.", "Mix a small step with reflection."),
            lean(challengingVsSupportive, "A gentle challenge is welcome.", "Be warm and supportive.", "Be warm, with a light nudge."),
        ].joined(separator: " ")
    }

    /// The style when none has been learned (docs/jobs/push-trigger.md, "Copy").
    public static let defaultInstructions = "Use a warm, supportive tone. Balance directness with exploration."
}

/// What the prompt says about the user besides the decision.
public struct CoachingContext: Sendable, Equatable {
    public let locale: String
    public let preferredStyle: String?
    public let preferredTime: String?
    /// Domains the user coaches in most, most used first.
    public let topDomains: [String]
    public let style: StylePreference?

    public init(locale: String, preferredStyle: String?, preferredTime: String?, topDomains: [String], style: StylePreference?) {
        self.locale = locale
        self.preferredStyle = preferredStyle
        self.preferredTime = preferredTime
        self.topDomains = topDomains
        self.style = style
    }
}

/// The prompt of a proactive push, with the user's context and style (docs/jobs/push-trigger.md,
/// "Copy"). Whatever the user wrote, or the app and the coach gathered about them (a
/// conversation's title and last words, a pattern, a domain, a preference), is marked as data
/// (`UserText.asData`), and the prompt says that data is never instructions: a user cannot write
/// the prompt.
public enum PushPrompt {
    public static func build(_ decision: PushDecision, context: CoachingContext) -> String {
        let data = UserText.asData
        var userContext = [decision.context]
        if let topic = decision.topicSummary { userContext.append("Last conversation, in short: \(data(topic))") }
        if !context.topDomains.isEmpty {
            userContext.append("Coaching domains they use most: \(context.topDomains.map(data).joined(separator: ", ")).")
        }
        if let style = context.preferredStyle { userContext.append("Coaching style they prefer: \(data(style)).") }
        if let time = context.preferredTime { userContext.append("They usually talk to the coach in the \(data(time)).") }
        userContext.append(
            context.locale == "fr"
                ? "They speak French: write the notification in French."
                : "They speak English: write the notification in English.")

        var lines = [
            "You are a warm, personal coach composing a brief push notification.",
            "",
            UserText.dataRule,
            "",
            "USER CONTEXT:",
            userContext.joined(separator: "\n"),
            "",
            "PUSH TYPE: \(decision.pushType.rawValue)",
        ]
        if let event = decision.eventDescription { lines.append("EVENT: \(event)") }
        if let pattern = decision.patternTheme { lines.append("PATTERN: \(data(pattern))") }
        if let domain = decision.conversationDomain { lines.append("LAST TOPIC: \(data(domain))") }
        lines += [
            "",
            "STYLE: \(context.style?.instructions ?? StylePreference.defaultInstructions)",
            "",
            "Write a push notification with:",
            "- title: Max 50 characters. Warm, personal. Never generic.",
            "- body: Max 200 characters. Reference their specific context. End with an invitation, not a demand.",
            "Never quote the user's own words; speak in the coach's voice.",
            "",
            #"Respond in JSON: { "title": "...", "body": "..." }"#,
        ]
        return lines.joined(separator: "\n")
    }
}
