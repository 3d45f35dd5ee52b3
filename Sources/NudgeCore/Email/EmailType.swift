import Foundation

/// The emails a user may stop (docs/jobs/reminders.md, "Emails"; docs/jobs/weekly-digest.md): each
/// with the switches that turn it off, in `email_preferences` and `notification_preferences`. The
/// welcome email, FitCircle invitations and challenge milestones are required and have no
/// unsubscribe link.
public enum EmailType: String, Sendable, CaseIterable {
    case dailyCheckinReminder = "daily_checkin_reminder"
    case streakAtRisk = "streak_at_risk"
    case weeklyDigest = "weekly_digest"
    case monthlyReport = "monthly_report"

    /// The `email_preferences` column.
    public var emailPreference: String {
        switch self {
        case .dailyCheckinReminder: "daily_checkin_reminder"
        case .streakAtRisk: "streak_at_risk"
        case .weeklyDigest: "weekly_digest"
        case .monthlyReport: "monthly_report"
        }
    }

    /// The `notification_preferences` column.
    public var notificationPreference: String {
        switch self {
        case .dailyCheckinReminder: "email_daily_checkin"
        case .streakAtRisk: "email_streak_risk"
        case .weeklyDigest: "email_weekly_digest"
        case .monthlyReport: "email_monthly_report"
        }
    }

    /// The email type of an outbox row's notification type, when it is one a user may stop.
    public static func of(notificationType type: String) -> EmailType? {
        switch type {
        case "daily_checkin": .dailyCheckinReminder
        case "streak_at_risk": .streakAtRisk
        case "weekly_digest": .weeklyDigest
        case "monthly_report": .monthlyReport
        default: nil
        }
    }

    /// What stops, in the words of the unsubscribe page.
    public func name(locale: String) -> String {
        switch (self, locale == "fr") {
        case (.dailyCheckinReminder, false): "daily check-in reminder emails"
        case (.dailyCheckinReminder, true): "les e-mails de rappel du check-in quotidien"
        case (.streakAtRisk, false): "streak-at-risk emails"
        case (.streakAtRisk, true): "les e-mails « série en danger »"
        case (.weeklyDigest, false): "weekly digest emails (your Sunday week in review)"
        case (.weeklyDigest, true): "les e-mails du bilan de la semaine (le dimanche soir)"
        case (.monthlyReport, false): "monthly progress report emails"
        case (.monthlyReport, true): "les e-mails du bilan mensuel"
        }
    }
}
