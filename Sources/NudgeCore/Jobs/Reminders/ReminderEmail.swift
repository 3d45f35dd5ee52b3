import Foundation

/// The reminders' emails (the welcome email, the check-in reminder, the streak at risk, the
/// challenge milestones, the monthly report): one template, `templates/email/reminder.*`, in the
/// digest's layout, filled with `ReminderCopy.EmailText`. An email the user may stop carries its
/// one-click unsubscribe link; a required one says in its footer why it cannot be turned off.
public enum ReminderEmail {
    public static let template = "reminder"

    /// Why a required email cannot be turned off, in its footer.
    public enum Required: Sendable {
        case welcome
        case milestone

        func reason(french: Bool) -> String {
            switch (self, french) {
            case (.welcome, false): "This one-time welcome email comes with every new account and cannot be turned off."
            case (.welcome, true): "Cet e-mail de bienvenue, envoyé une seule fois à chaque nouveau compte, ne peut pas être désactivé."
            case (.milestone, false):
                "Challenge milestones are part of your FitCircle challenge and cannot be turned off; other emails can be, in your settings."
            case (.milestone, true):
                "Les étapes de défi font partie de ton défi FitCircle et ne peuvent pas être désactivées ; les autres e-mails, oui, dans tes réglages."
            }
        }
    }

    /// How the user may stop it: one click on `url` for `type`, or not at all (`required`).
    public enum Footer: Sendable {
        case unsubscribe(type: EmailType, url: String)
        case required(Required)
    }

    public static func render(
        _ text: ReminderCopy.EmailText, locale: String, name: String?, email: String, footer: Footer,
        dashboardURL: String?, postalAddress: String, templates: EmailTemplates
    ) -> RenderedEmail {
        templates.render(
            template, locale: locale, subject: text.subject,
            model: model(
                text, locale: locale, name: name, email: email, footer: footer, dashboardURL: dashboardURL,
                postalAddress: postalAddress))
    }

    static func model(
        _ text: ReminderCopy.EmailText, locale: String, name: String?, email: String, footer: Footer,
        dashboardURL: String?, postalAddress: String
    ) -> [String: Any] {
        let displayName = name?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        var model: [String: Any] = [
            "heading": text.heading,
            "hasName": !displayName.isEmpty,
            "name": displayName,
            "paragraphs": text.paragraphs.map { ["text": $0] },
            "hasStats": !text.stats.isEmpty,
            "stats": text.stats.map { ["label": $0.label, "value": $0.value] },
            "hasDashboard": dashboardURL != nil,
            "dashboardURL": dashboardURL ?? "",
            "button": text.button,
            "signOff": text.signOff,
            "email": email,
            "postalAddress": postalAddress,
        ]
        switch footer {
        case .unsubscribe(let type, let url):
            model["optional"] = true
            model["what"] = type.name(locale: locale)
            model["unsubscribeURL"] = url
        case .required(let why):
            model["optional"] = false
            model["requiredReason"] = why.reason(french: locale == "fr")
        }
        return model
    }
}
