import Foundation

/// The weekly digest email (docs/jobs/weekly-digest.md): the template's model, from the week
/// in review and the user's name and address. Every number is formatted here, once, for both
/// parts, so the HTML and the text say the same.
public enum DigestEmail {
    public static let template = "weekly_digest"

    /// `postalAddress`: the sender's (`NUDGE_POSTAL_ADDRESS`), in the footer as CAN-SPAM requires.
    public static func render(
        _ week: WeekInReview, copy: DigestCopy, name: String?, email: String, unsubscribeURL: String,
        dashboardURL: String?, postalAddress: String, templates: EmailTemplates
    ) -> RenderedEmail {
        templates.render(
            template, locale: copy.locale, subject: copy.subject(week),
            model: model(
                week, copy: copy, name: name, email: email, unsubscribeURL: unsubscribeURL,
                dashboardURL: dashboardURL, postalAddress: postalAddress))
    }

    static func model(
        _ week: WeekInReview, copy: DigestCopy, name: String?, email: String, unsubscribeURL: String,
        dashboardURL: String?, postalAddress: String
    ) -> [String: Any] {
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
            "postalAddress": postalAddress,
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
            // "met 1 of 1 day", "atteint 1 jour sur 7": English counts the days of the whole, French those met.
            model["goalDaysUnit"] = copy.days(french ? week.daysGoalMet : week.daysWithGoal)
        }
        model["hasStreak"] = week.streak > 0
        model["streak"] = copy.number(week.streak)
        model["streakUnit"] = copy.days(week.streak)
        model["streakHeld"] = week.streakHeldAllWeek
        if let weight = week.weightChange {
            model["hasWeight"] = true
            model["weight"] = copy.weight(weight)
        }
        // A name that cannot be shown is not quoted: "#2 in one of your FitCircles".
        model["ranks"] = week.ranks.map { rank -> [String: Any] in
            let name = UserText.circleName(rank.circle)
            return ["rank": String(rank.rank), "circle": name ?? copy.unnamedCircle, "named": name != nil]
        }
        if let achievement = week.topAchievement {
            model["hasAchievement"] = true
            model["achievement"] = copy.achievement(achievement)
        }
        // "Based on your progress" only when the goal is the user's own baseline.
        let next = week.nextWeekStepsGoal
        let same = week.stepsGoal == next
        let up = !same && week.nextGoalSource == .progress && week.stepsGoal.map { next > $0 } == true
        let circle = !same && week.nextGoalSource == .circle
        model["goalUp"] = up
        model["goalSame"] = same
        model["goalCircle"] = circle
        model["goalSet"] = !same && !up && !circle
        return model
    }

    /// "Week of November 16, 2026", "Semaine du 16 novembre 2026".
    static func weekLabel(_ monday: LocalDate, french: Bool) -> String {
        let (year, _, day) = monday.components
        let month = monday.monthName(french: french)
        return french
            ? "Semaine du \(day == 1 ? "1er" : String(day)) \(month) \(year)"
            : "Week of \(month) \(day), \(year)"
    }
}
