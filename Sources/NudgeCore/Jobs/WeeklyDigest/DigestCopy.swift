import Foundation

/// The weekly digest's words, in the user's locale (en, fr; anything else gets English), with
/// numbers written as that locale writes them (52,341 / 52 341).
public struct DigestCopy: Sendable, Equatable {
    public let locale: String

    public init(locale: String) {
        self.locale = locale == "fr" ? "fr" : "en"
    }

    private var french: Bool { locale == "fr" }

    /// A whole number with the locale's thousands separator (French: a narrow no-break space).
    public func number(_ value: Int) -> String {
        let digits = String(value.magnitude)
        var grouped = ""
        for (index, digit) in digits.enumerated() {
            if index > 0 && (digits.count - index) % 3 == 0 { grouped += french ? "\u{202F}" : "," }
            grouped.append(digit)
        }
        return (value < 0 ? "-" : "") + grouped
    }

    /// CLDR's plural categories for the digest's languages: English says "1 day" and "0 days",
    /// French "0 jour", "1 jour" and "2 jours" (`one` is 0 and 1 in French).
    public enum Plural: Sendable, Equatable {
        case one, other
    }

    public func plural(_ count: Int) -> Plural {
        switch (french, count) {
        case (true, 0), (true, 1), (false, 1): .one
        default: .other
        }
    }

    /// The word for `count` days, as the locale's plural rules choose it.
    public func days(_ count: Int) -> String {
        switch (french, plural(count)) {
        case (true, .one): "jour"
        case (true, .other): "jours"
        case (false, .one): "day"
        case (false, .other): "days"
        }
    }

    public static let kilogramsPerPound = 0.45359237

    /// A weight change, signed, one decimal, in the locale's unit: the rows hold pounds, which
    /// English readers get ("-1.2 lbs"); French readers get kilograms ("-0,5 kg").
    public func weight(_ pounds: Double) -> String {
        let value = french ? pounds * Self.kilogramsPerPound : pounds
        let tenths = Int((abs(value) * 10).rounded(.toNearestOrAwayFromZero))
        let sign = value < 0 && tenths > 0 ? "-" : (tenths > 0 ? "+" : "")
        let text = "\(tenths / 10)\(french ? "," : ".")\(tenths % 10)"
        return sign + text + (french ? "\u{00A0}kg" : " lbs")
    }

    /// What stands for a circle whose name cannot be shown (`UserText.circleName`).
    public var unnamedCircle: String { french ? "un de tes FitCircles" : "one of your FitCircles" }

    /// The push (docs/jobs/weekly-digest.md): "📅 Week in Review: 52,341 steps, 7-day streak maintained, #2 in Work Warriors".
    public func pushBody(_ week: WeekInReview) -> String {
        guard week.hadActivity else {
            return french
                ? "📅 Ta semaine : une semaine calme. La prochaine commence lundi, avec un objectif de \(number(week.nextWeekStepsGoal)) pas."
                : "📅 Week in Review: a quiet week. A fresh one starts on Monday, with a goal of \(number(week.nextWeekStepsGoal)) steps."
        }
        var parts: [String] = []
        if let steps = week.steps, steps > 0 { parts.append(french ? "\(number(steps)) pas" : "\(number(steps)) steps") }
        if week.streak > 0 {
            switch (french, week.streakHeldAllWeek) {
            case (true, true): parts.append("série de \(number(week.streak)) \(days(week.streak)) maintenue")
            case (true, false): parts.append("série de \(number(week.streak)) \(days(week.streak))")
            case (false, true): parts.append("\(week.streak)-day streak maintained")
            case (false, false): parts.append("\(week.streak)-day streak")
            }
        }
        if let best = week.bestRank {
            let circle = UserText.circleName(best.circle) ?? unnamedCircle
            parts.append(french ? "#\(best.rank) dans \(circle)" : "#\(best.rank) in \(circle)")
        }
        if parts.isEmpty {
            parts.append(french ? "tu as gardé le contact" : "you kept in touch")
        }
        return (french ? "📅 Ta semaine : " : "📅 Week in Review: ") + parts.joined(separator: ", ")
    }

    public var pushTitle: String { french ? "Ta semaine en bref" : "Your week in review" }

    /// The email's subject (docs/jobs/weekly-digest.md): "Your Week in Review: 52,341 steps, 7-day streak 🔥".
    public func subject(_ week: WeekInReview) -> String {
        let lead = french ? "Ta semaine en bref" : "Your Week in Review"
        guard week.hadActivity else { return french ? "\(lead) : une nouvelle semaine t'attend" : "\(lead): a fresh week awaits" }
        var parts: [String] = []
        if let steps = week.steps, steps > 0 { parts.append(french ? "\(number(steps)) pas" : "\(number(steps)) steps") }
        if week.streak > 0 {
            parts.append(french ? "série de \(number(week.streak)) \(days(week.streak)) 🔥" : "\(number(week.streak))-day streak 🔥")
        }
        guard !parts.isEmpty else { return french ? "\(lead) : ta semaine" : "\(lead): your week" }
        return lead + (french ? " : " : ": ") + parts.joined(separator: ", ")
    }

    /// "You hit your daily goal 6 out of 7 days — your best week yet!"
    public func achievement(_ achievement: WeekInReview.Achievement) -> String {
        switch (achievement, french) {
        case (.bestWeek(let met, let of), false): "You hit your daily goal \(met) out of \(of) \(days(of)) — your best week yet!"
        case (.bestWeek(let met, let of), true): "Tu as atteint ton objectif du jour \(met) \(days(met)) sur \(of) : ta meilleure semaine !"
        case (.goalDays(let met, let of), false): "You hit your daily goal \(met) out of \(of) \(days(of))."
        case (.goalDays(let met, let of), true): "Tu as atteint ton objectif du jour \(met) \(days(met)) sur \(of)."
        case (.everyCheckIn, false): "You checked in every day this week."
        case (.everyCheckIn, true): "Tu as fait ton check-in tous les jours cette semaine."
        }
    }
}
