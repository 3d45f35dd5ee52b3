import Foundation

/// The copy of the notifications validate-streaks queues, in the user's locale (en, fr), a count
/// and its noun agreeing as the language has them ("1 jour", "2 jours").
enum StreakMessages {
    /// "12 jours", "1 jour": the number as the locale writes it, and the word its plural rule takes.
    private static func days(_ count: Int, _ copy: DigestCopy) -> String { "\(copy.number(count)) \(copy.days(count))" }

    static func title(_ outcome: DayOutcome, streak: Int, locale: String) -> String {
        let french = DigestCopy(locale: "fr")
        return switch (outcome, locale) {
        case (.freezeUsed, "fr"): "💎 Gel de série utilisé"
        case (.freezeUsed, _): "💎 Streak freeze used"
        case (_, "fr"): "🔥 Ta série de \(days(streak, french)) est en danger"
        default: "🔥 Your \(streak)-day streak is at risk"
        }
    }

    static func body(_ outcome: DayOutcome, streak: Int, locale: String) -> String {
        let french = DigestCopy(locale: "fr")
        return switch (outcome, locale) {
        case (.freezeUsed, "fr"):
            "Tu as manqué hier : on a utilisé le gel de la semaine pour protéger ta série de \(days(streak, french)). Fais ton check-in aujourd'hui !"
        case (.freezeUsed, _):
            "You missed yesterday, so we used this week's freeze to protect your \(streak)-day streak. Check in today!"
        case (_, "fr"):
            "Tu as manqué le check-in d'hier. Fais-le aujourd'hui pour garder ta série : ne manque jamais deux fois."
        default:
            "You missed yesterday's check-in. Check in today to keep it alive: never miss twice."
        }
    }

    static func type(_ outcome: DayOutcome) -> String? {
        switch outcome {
        case .freezeUsed: "streak_freeze_used"
        case .atRisk: "streak_at_risk"
        case .checkedIn, .reset, .inactive: nil
        }
    }
}
