import Foundation

/// The weekly digest email (seed 003 Feature 7's example): the template's model, from the week
/// in review and the user's name and address. Every number is formatted here, once, for both
/// parts, so the HTML and the text say the same.
public enum DigestEmail {
    public static let template = "weekly_digest"

    public static func render(_ week: WeekInReview, copy: DigestCopy, name: String?, email: String, unsubscribeURL: String,
                              dashboardURL: String?, templates: EmailTemplates) -> RenderedEmail {
        templates.render(template, locale: copy.locale, subject: copy.subject(week),
                         model: model(week, copy: copy, name: name, email: email, unsubscribeURL: unsubscribeURL,
                                      dashboardURL: dashboardURL))
    }

    static func model(_ week: WeekInReview, copy: DigestCopy, name: String?, email: String, unsubscribeURL: String,
                      dashboardURL: String?) -> [String: Any] {
        let french = copy.locale == "fr"
        let displayName = name?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        var model: [String: Any] = [
            "weekLabel": weekLabel(week.monday, french: french),
            "hasName": !displayName.isEmpty,
            "name": displayName,
            "email": email,
            "unsubscribeURL": unsubscribeURL,
            "hasDashboard": dashboardURL != nil,
            "dashboardURL": dashboardURL ?? "",
            "quiet": !week.hadActivity,
            "nextGoal": copy.number(week.nextWeekStepsGoal),
        ]
        if let steps = week.steps {
            model["hasSteps"] = true
            model["steps"] = copy.number(steps)
        }
        if let percent = week.stepsPercent {
            model["hasPercent"] = true
            model["stepsPercent"] = french ? "\(copy.number(percent))\u{00A0}%" : "\(copy.number(percent))%"
        }
        if week.daysWithGoal > 0 {
            model["hasGoalDays"] = true
            model["daysGoalMet"] = String(week.daysGoalMet)
            model["daysWithGoal"] = String(week.daysWithGoal)
        }
        model["hasStreak"] = week.streak > 0
        model["streak"] = copy.number(week.streak)
        model["streakUnit"] = week.streak == 1 ? (french ? "jour" : "day") : (french ? "jours" : "days")
        model["streakHeld"] = week.streakHeldAllWeek
        if let weight = week.weightChange {
            model["hasWeight"] = true
            model["weight"] = copy.weight(weight)
        }
        model["ranks"] = week.ranks.map { ["rank": String($0.rank), "circle": $0.circle] }
        if let achievement = week.topAchievement {
            model["hasAchievement"] = true
            model["achievement"] = copy.achievement(achievement)
        }
        let current = week.stepsGoal
        model["goalUp"] = current.map { week.nextWeekStepsGoal > $0 } ?? false
        model["goalSame"] = current.map { week.nextWeekStepsGoal == $0 } ?? false
        model["goalSet"] = current.map { week.nextWeekStepsGoal < $0 } ?? true
        return model
    }

    /// "Week of November 16, 2026", "Semaine du 16 novembre 2026".
    static func weekLabel(_ monday: LocalDate, french: Bool) -> String {
        let english = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
                       "November", "December"]
        let francais = ["janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août", "septembre", "octobre",
                        "novembre", "décembre"]
        let (year, month, day) = monday.components
        return french
            ? "Semaine du \(day == 1 ? "1er" : String(day)) \(francais[month - 1]) \(year)"
            : "Week of \(english[month - 1]) \(day), \(year)"
    }
}
