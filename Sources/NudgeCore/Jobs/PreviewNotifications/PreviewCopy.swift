import Foundation

/// The words of a call preview (docs/jobs/preview-notifications.md), in the user's locale: French
/// for `fr`, English for every other.
///
/// - The push: title "{coach} is calling in {min} min! {emoji}", body "Day {streak}: {topic}."
///   (the 7th and 21st days celebrate first, and still say the topic; a user without a streak
///   reads "Today: {topic}."). `{streak}` is the day of the streak the call falls on
///   (`StreakRules.dayNumber`). The topic is the words of `topics` for a known key, the app's own
///   text for any other when it can be shown, "today's check-in" when there is none or it cannot.
///   The coach is the persona's name as the app shows it ("Coach Max", "Dr. Luna", "Mama Rosa"),
///   "Your coach" when the user has none.
/// - The SMS: one segment, always. An emoji or an em dash makes any SMS UCS-2 (70 characters a
///   part): an SMS with both, at ~95 characters, would cost two. So the SMS is the emoji-free
///   GSM-7 variant, "{coach} is calling you in {min} min! Day {streak} - {topic}.
///   Answer!", with French letters GSM-7 lacks written plain (`fête` → `fete`, see
///   `SMSText.plain`). When that is more than one segment (a long coach name in another script),
///   it drops the topic, then the streak; when even "{coach} is calling you in {min} min." is
///   longer, there is no SMS.
public enum PreviewCopy {
    /// The topics Nudge knows, by key: (English, French) (docs/jobs/preview-notifications.md).
    public static let topics: [String: (en: String, fr: String)] = [
        "fitness_checkin": ("your fitness goal check-in", "point objectif fitness"),
        "weekly_weighin": ("weekly weigh-in & meal review", "pesée & bilan repas de la semaine"),
        "mood_check": ("mood & energy check", "point humeur & énergie"),
        "meal_review": ("yesterday's meals review", "bilan repas d'hier"),
        "exercise_plan": ("today's exercise plan", "planning sport du jour"),
        "streak_celebrate": ("streak celebration!", "fête du streak !"),
    ]

    /// What a call without a topic is about.
    static let neutralTopic = (en: "today's check-in", fr: "le point du jour")
    /// The longest topic a preview shows, in characters (docs/jobs/preview-notifications.md).
    static let longestTopic = 100

    static func isFrench(_ locale: String) -> Bool { locale.lowercased().hasPrefix("fr") }

    /// The topic's words in the locale: those of `topics` for a key it holds; free text as the app
    /// wrote it, on one line and at most 100 characters, when it can be shown (`UserText.forCopy`:
    /// no link, address or phone number, no hidden marks); a neutral phrase when there is none,
    /// it cannot be shown, or it is a key this table does not know (`knee_rehab`: lower case and
    /// underscores, no words to show).
    public static func topic(_ key: String?, locale: String) -> String {
        let text = (key ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        if let words = topics[text.lowercased()] { return isFrench(locale) ? words.fr : words.en }
        if !isKey(text), let shown = UserText.forCopy(text, maxLength: longestTopic) { return shown }
        return isFrench(locale) ? neutralTopic.fr : neutralTopic.en
    }

    /// Whether `text` is a key rather than words: ASCII lower case, digits and underscores, with an underscore.
    static func isKey(_ text: String) -> Bool {
        text.contains("_") && text.allSatisfy { ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "_" }
    }

    /// The emoji of the streak's milestone: 🌱 starting out (0–2 days), 💪 3–6, 🔥 a week (7–13),
    /// ⭐ two weeks (14–20), 🏆 21 days and more.
    public static func emoji(streak: Int) -> String {
        switch streak {
        case ..<3: "🌱"
        case 3..<7: "💪"
        case 7..<14: "🔥"
        case 14..<21: "⭐"
        default: "🏆"
        }
    }

    static func coachName(_ coach: String?, locale: String) -> String {
        let name = coach?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        if !name.isEmpty { return name }
        return isFrench(locale) ? "Ton coach" : "Your coach"
    }

    /// A topic as a sentence's end: its own `!`, `?` or ellipsis kept, a full stop otherwise.
    static func sentence(_ topic: String) -> String {
        guard let last = topic.last, !".!?…".contains(last) else { return topic }
        return topic + "."
    }

    public static func pushTitle(coach: String?, minutes: Int, streak: Int, locale: String) -> String {
        let name = coachName(coach, locale: locale)
        return isFrench(locale)
            ? "\(name) t'appelle dans \(minutes) min ! \(emoji(streak: streak))"
            : "\(name) is calling in \(minutes) min! \(emoji(streak: streak))"
    }

    public static func pushBody(streak: Int, topicKey: String?, locale: String) -> String {
        let words = topic(topicKey, locale: locale)
        switch (streak, isFrench(locale)) {
        case (7, true): return "Jour 7 — une semaine complète ! On fête ça. Aujourd'hui : \(sentence(words))"
        case (7, false): return "Day 7 — one full week! Let's celebrate. Today: \(sentence(words))"
        case (21, true): return "JOUR 21 ! Trois semaines, tu l'as fait. 🏆 Aujourd'hui : \(sentence(words))"
        case (21, false): return "DAY 21! Three weeks, you made it. 🏆 Today: \(sentence(words))"
        case (1..., true): return "Jour \(streak) : \(sentence(words))"
        case (1..., false): return "Day \(streak): \(sentence(words))"
        case (_, true): return "Aujourd'hui : \(sentence(words))"
        case (_, false): return "Today: \(sentence(words))"
        }
    }

    /// The SMS, one segment; nil when no version of it fits in one.
    public static func sms(coach: String?, minutes: Int, streak: Int, topicKey: String?, locale: String) -> SMSText? {
        let name = coachName(coach, locale: locale)
        let words = sentence(topic(topicKey, locale: locale))
        let versions: [String]
        if isFrench(locale) {
            let opening = "\(name) t'appelle dans \(minutes) min !"
            versions = [
                streak > 0 ? "\(opening) Jour \(streak) - \(words) Décroche !" : "\(opening) Aujourd'hui : \(words) Décroche !",
                streak > 0 ? "\(opening) Jour \(streak). Décroche !" : "\(opening) Décroche !",
                "\(name) t'appelle dans \(minutes) min.",
            ]
        } else {
            let opening = "\(name) is calling you in \(minutes) min!"
            versions = [
                streak > 0 ? "\(opening) Day \(streak) - \(words) Answer!" : "\(opening) Today: \(words) Answer!",
                streak > 0 ? "\(opening) Day \(streak). Answer!" : "\(opening) Answer!",
                "\(name) is calling you in \(minutes) min.",
            ]
        }
        return versions.lazy.map { SMSText(SMSText.plain($0)) }.first { $0.segments == 1 }
    }
}
