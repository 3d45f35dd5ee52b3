import Foundation

/// The words of the reminders (docs/jobs/reminders.md, "The words"), in English and French, with
/// the user's real numbers. Never a shaming line: a user who lost a streak is invited to start a
/// new one, and one who came back is welcomed back.
public struct ReminderCopy: Sendable {
    public let locale: String
    let numbers: DigestCopy

    public init(locale: String) {
        self.locale = locale == "fr" ? "fr" : "en"
        numbers = DigestCopy(locale: self.locale)
    }

    var french: Bool { locale == "fr" }

    func number(_ value: Int) -> String { numbers.number(value) }

    func percent(_ value: Int) -> String { french ? "\(number(value))\u{00A0}%" : "\(number(value))%" }

    /// "12 jours", "1 jour", "1 day": a count and its noun, agreeing as the locale has them.
    func days(_ count: Int) -> String { "\(number(count)) \(numbers.days(count))" }

    /// A count and the form of its noun the locale's plural rule takes ("1 check-in", "0 check-in"
    /// in French, "0 check-ins" in English).
    func counted(_ count: Int, one: String, other: String) -> String {
        "\(number(count)) \(numbers.plural(count) == .one ? one : other)"
    }

    // MARK: Pushes

    /// The daily check-in reminder by the day of the streak today is (`StreakRules.dayNumber`): 0
    /// without a streak (a new user's first day, or a fresh start after a lost one), 2 the day
    /// after a first check-in (a new user's second day) or after a comeback (`longestStreak` 2 or
    /// more: "You're back!"), more in a streak, which it names.
    public func checkin(dayNumber: Int, longestStreak: Int) -> (title: String, body: String) {
        let title = french ? "⏰ Ton check-in du jour" : "⏰ Daily Check-in Reminder"
        switch (dayNumber, french) {
        case (...1, false) where longestStreak == 0:
            return (title, "Complete your check-in to start your streak!")
        case (...1, true) where longestStreak == 0:
            return (title, "Fais ton check-in pour commencer ta série !")
        case (...1, false):
            return (title, "A fresh start is one check-in away. Complete today's check-in to start a new streak!")
        case (...1, true):
            return (title, "Un nouveau départ, c'est un check-in. Fais celui d'aujourd'hui pour lancer une nouvelle série !")
        case (2, false) where longestStreak >= 2:
            return (title, "You're back! Complete your check-in for a 2-day streak.")
        case (2, true) where longestStreak >= 2:
            return (title, "Te revoilà ! Fais ton check-in pour une série de 2 jours.")
        case (2, false):
            return (title, "Keep it going! Complete your check-in for a 2-day streak.")
        case (2, true):
            return (title, "Continue comme ça ! Fais ton check-in pour une série de 2 jours.")
        case (_, false):
            return (title, "Complete your check-in to keep your \(number(dayNumber - 1))-day streak alive!")
        case (_, true):
            return (title, "Fais ton check-in pour garder ta série de \(days(dayNumber - 1)) !")
        }
    }

    /// Weekly goal progress, said as it is on Wednesday evening: the share of the week gone, and
    /// of the goal reached (docs/jobs/reminders.md, "The parts").
    public func weeklyGoal(percent value: Int, weekGone: Int) -> (title: String, body: String) {
        french
            ? (
                "📊 Objectif de la semaine",
                "\(percent(weekGone)) de la semaine est passée et tu en es à \(percent(value)) de ton objectif de pas. Tu peux le faire !"
            )
            : (
                "📊 Weekly Goal Progress",
                "The week is \(percent(weekGone)) gone and you're at \(percent(value)) of your step goal. You've got this!"
            )
    }

    /// "Submit today's 8,234 steps to your FitCircles before midnight!" (docs/jobs/reminders.md,
    /// "The words").
    public func dataSubmission(steps: Int?) -> (title: String, body: String) {
        let title = french ? "🏃 Tes FitCircles t'attendent" : "🏃 FitCircle Data Submission"
        guard let steps, steps > 0 else {
            return (
                title,
                french
                    ? "Envoie tes pas du jour à tes FitCircles avant minuit !"
                    : "Submit today's steps to your FitCircles before midnight!"
            )
        }
        return (
            title,
            french
                ? "Envoie tes \(number(steps)) pas du jour à tes FitCircles avant minuit !"
                : "Submit today's \(number(steps)) steps to your FitCircles before midnight!"
        )
    }

    /// The submission reminder for a user whose running circles are all weight-loss ones.
    public var weightSubmission: (title: String, body: String) {
        french
            ? ("⚖️ Tes FitCircles t'attendent", "Envoie ton poids du jour à tes FitCircles avant minuit !")
            : ("⚖️ FitCircle Data Submission", "Submit today's weight to your FitCircles before midnight!")
    }

    /// A challenge milestone (docs/jobs/reminders.md, "The words"): "🎉 Halfway there! You're 50% to
    /// your weight loss goal.", in the circle it names ("in your FitCircle" when its name cannot be
    /// shown, `UserText.circleName`).
    public func milestone(_ percent: Int, challenge: FitCircleMembership.Challenge, circle: String) -> (title: String, body: String) {
        let goal =
            switch (challenge, french) {
            case (.steps, false): "step goal"
            case (.steps, true): "objectif de pas"
            case (.weightLoss, false): "weight loss goal"
            case (.weightLoss, true): "objectif de perte de poids"
            }
        let quoted =
            switch (UserText.circleName(circle), french) {
            case (let name?, true): "« \(name) »"
            case (let name?, false): "“\(name)”"
            case (nil, true): "ton FitCircle"
            case (nil, false): "your FitCircle"
            }
        switch (percent, french) {
        case (25, false): return ("🎉 A quarter of the way!", "You're 25% to your \(goal) in \(quoted).")
        case (25, true): return ("🎉 Un quart du chemin !", "Tu es à 25\u{00A0}% de ton \(goal) dans \(quoted).")
        case (50, false): return ("🎉 Halfway there!", "You're 50% to your \(goal) in \(quoted).")
        case (50, true): return ("🎉 À mi-chemin !", "Tu es à 50\u{00A0}% de ton \(goal) dans \(quoted).")
        case (75, false): return ("🎉 Three quarters there!", "You're 75% to your \(goal) in \(quoted). The finish is in sight!")
        case (75, true): return ("🎉 Aux trois quarts !", "Tu es à 75\u{00A0}% de ton \(goal) dans \(quoted). L'arrivée est en vue !")
        case (_, false): return ("🏆 Goal reached!", "You hit 100% of your \(goal) in \(quoted). What a challenge!")
        case (_, true): return ("🏆 Objectif atteint !", "Tu as atteint 100\u{00A0}% de ton \(goal) dans \(quoted). Quel défi !")
        }
    }

    /// The streak badge (docs/jobs/reminders.md, "The words"); on day 7: "You did it! 7-day streak
    /// complete. Your daily goals are now personalized based on your baseline."
    public func streakMilestone(_ badge: StreakBadge) -> (title: String, body: String) {
        switch (badge, french) {
        case (.weekWarrior, false):
            (
                "🎉 1 Week Warrior badge unlocked!",
                "You did it! 7-day streak complete. Your daily goals are now personalized based on your baseline."
            )
        case (.weekWarrior, true):
            (
                "🎉 Badge « Guerrier d'une semaine » débloqué !",
                "Tu l'as fait ! Série de 7 jours réussie. Tes objectifs du jour sont maintenant calculés sur ta moyenne."
            )
        case (.monthlyMaster, false):
            ("🎉 Monthly Master badge unlocked!", "You did it! 30-day streak complete. A whole month of check-ins!")
        case (.monthlyMaster, true):
            ("🎉 Badge « Maître du mois » débloqué !", "Tu l'as fait ! Série de 30 jours réussie. Un mois entier de check-ins !")
        case (.centurion, false):
            ("🏆 Centurion badge unlocked!", "You did it! 100-day streak complete. You are a Centurion!")
        case (.centurion, true):
            ("🏆 Badge « Centurion » débloqué !", "Tu l'as fait ! Série de 100 jours réussie. Te voilà Centurion !")
        }
    }

    // MARK: Emails

    /// One email's words: its subject, heading and paragraphs, the figures it lists, its button
    /// and the footer line that says why the user gets it (`ReminderEmail` renders them).
    public struct EmailText: Sendable, Equatable {
        public var subject: String
        public var heading: String
        public var paragraphs: [String]
        public var stats: [(label: String, value: String)] = []
        public var button: String
        public var signOff: String

        public static func == (lhs: EmailText, rhs: EmailText) -> Bool {
            lhs.subject == rhs.subject && lhs.heading == rhs.heading && lhs.paragraphs == rhs.paragraphs
                && lhs.stats.map(\.label) == rhs.stats.map(\.label) && lhs.stats.map(\.value) == rhs.stats.map(\.value)
                && lhs.button == rhs.button && lhs.signOff == rhs.signOff
        }
    }

    /// The welcome email (docs/jobs/reminders.md, "Emails").
    public var welcome: EmailText {
        french
            ? EmailText(
                subject: "Bienvenue sur FitCircle ! C'est parti 🎉", heading: "Bienvenue sur FitCircle",
                paragraphs: [
                    "Tu fais maintenant partie de FitCircle, où le sport rime avec plaisir et entraide !",
                    "Pour bien commencer :", "✅ Fais ton premier check-in du jour",
                    "✅ Rejoins ou crée ton premier FitCircle", "✅ Fixe tes objectifs du jour et de la semaine",
                ],
                button: "Faire mon check-in", signOff: "À tout de suite !")
            : EmailText(
                subject: "Welcome to FitCircle! Let's get started 🎉", heading: "Welcome to FitCircle",
                paragraphs: [
                    "You're now part of FitCircle—where fitness meets fun and accountability!",
                    "Here's what to do next:", "✅ Complete your first daily check-in",
                    "✅ Join or create your first FitCircle", "✅ Set your daily and weekly goals",
                ],
                button: "Complete Check-in", signOff: "See you inside!")
    }

    /// The daily check-in reminder by email (at 21:00 for a user no push reaches,
    /// docs/jobs/reminders.md, "The parts").
    public func checkinEmail(dayNumber: Int, longestStreak: Int) -> EmailText {
        let line = checkin(dayNumber: dayNumber, longestStreak: longestStreak).body
        return french
            ? EmailText(
                subject: dayNumber > 2 ? "⏰ Ta série de \(days(dayNumber - 1)) t'attend" : "⏰ Ton check-in du jour",
                heading: "Ton check-in du jour", paragraphs: [line, "Il ne faut qu'une minute : ton humeur, ton énergie, et c'est fait."],
                button: "Faire mon check-in", signOff: "À tout de suite !")
            : EmailText(
                subject: dayNumber > 2 ? "⏰ Your \(number(dayNumber - 1))-day streak is waiting" : "⏰ Your daily check-in",
                heading: "Your daily check-in", paragraphs: [line, "It takes a minute: your mood, your energy, done."],
                button: "Complete Check-in", signOff: "See you inside!")
    }

    /// The streak-at-risk email (docs/jobs/reminders.md, "The parts"): a miss with the week's
    /// freeze already used ("never miss twice").
    public func streakRiskEmail(streak: Int) -> EmailText {
        french
            ? EmailText(
                subject: "⚠️ Ta série de \(days(streak)) est en danger !", heading: "Ta série est en danger",
                paragraphs: [
                    "Tu as manqué le check-in d'hier. Ta série de \(days(streak)) est en danger !",
                    "Aucun gel ne restait pour couvrir ce jour : fais ton check-in aujourd'hui pour la garder. Ne manque jamais deux fois.",
                ],
                button: "Faire mon check-in du jour", signOff: "Garde ton élan !")
            : EmailText(
                subject: "⚠️ Your \(number(streak))-day streak is at risk!", heading: "Your streak is at risk",
                paragraphs: [
                    "You missed yesterday's check-in. Your \(number(streak))-day streak is at risk!",
                    "No freeze was left to cover the day, so check in today to keep it: never miss twice.",
                ],
                button: "Complete Today's Check-in", signOff: "Don't lose your momentum!")
    }

    /// A challenge milestone by email (50 % and 100 %): its subject names the circle when its
    /// name can be shown.
    public func milestoneEmail(_ percent: Int, challenge: FitCircleMembership.Challenge, circle: String) -> EmailText {
        let push = milestone(percent, challenge: challenge, circle: circle)
        let subject = UserText.circleName(circle).map { "\(push.title) \($0)" } ?? push.title
        return french
            ? EmailText(
                subject: subject, heading: push.title, paragraphs: [push.body],
                button: "Voir le classement", signOff: "Bravo !")
            : EmailText(
                subject: subject, heading: push.title, paragraphs: [push.body],
                button: "View the Leaderboard", signOff: "Keep crushing it!")
    }

    /// The monthly progress report (the 1st, 09:00; docs/jobs/reminders.md, "The parts"). Its
    /// subject names what the user did: their steps, or, without steps, their check-ins, or else
    /// their active days (weigh-ins).
    public func monthlyReport(_ month: ReminderRules.Month, streak: Int) -> EmailText {
        let name = monthName(month.first)
        let did =
            if month.steps > 0 {
                french ? "\(number(month.steps)) pas" : counted(month.steps, one: "step", other: "steps")
            } else if month.checkInDays > 0 {
                counted(month.checkInDays, one: "check-in", other: "check-ins")
            } else {
                french
                    ? counted(month.activeDays, one: "jour actif", other: "jours actifs")
                    : counted(month.activeDays, one: "active day", other: "active days")
            }
        var text =
            french
            ? EmailText(
                subject: "📅 Ton bilan de \(name) : \(did)", heading: "Ton bilan de \(name)",
                paragraphs: ["Voici ton mois en chiffres :"], button: "Voir mon tableau de bord", signOff: "Bon mois à toi !")
            : EmailText(
                subject: "📅 Your \(name) report: \(did)", heading: "Your \(name) report",
                paragraphs: ["Here's how your month went:"], button: "View Full Dashboard", signOff: "Here's to next month!")
        text.stats =
            french
            ? [
                ("Pas", number(month.steps)), ("Jours actifs", number(month.activeDays)), ("Check-ins", number(month.checkInDays)),
                ("Série actuelle", days(streak)),
            ]
            : [
                ("Steps", number(month.steps)), ("Active days", number(month.activeDays)), ("Check-ins", number(month.checkInDays)),
                ("Current streak", days(streak)),
            ]
        if let change = month.weightChange {
            text.stats.append((french ? "Poids" : "Weight", numbers.weight(change)))
        }
        return text
    }

    /// "November 2026", "novembre 2026".
    func monthName(_ first: LocalDate) -> String {
        "\(first.monthName(french: french)) \(first.components.year)"
    }
}
