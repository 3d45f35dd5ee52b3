import Foundation

/// What an email's outbox row carries besides its subject (`title`) and plain-text part
/// (`body`): the HTML part, the unsubscribe link for `List-Unsubscribe`, and what the logs
/// and Resend's tags name it by. The address is read when it is sent, so a changed address is
/// honoured.
public struct EmailPayload: Codable, Sendable, Equatable {
    /// `email_logs.email_type`, and a Resend tag.
    public let emailType: String
    public let html: String
    /// Nil for an email the user may not stop (docs/jobs/reminders.md, "Emails").
    public let unsubscribeURL: String?
    /// What else the email is about, as Resend tags (`week_start`).
    public let tags: [String: String]

    public init(emailType: String, html: String, unsubscribeURL: String?, tags: [String: String] = [:]) {
        self.emailType = emailType
        self.html = html
        self.unsubscribeURL = unsubscribeURL
        self.tags = tags
    }

    enum CodingKeys: String, CodingKey {
        case emailType = "email_type"
        case html
        case unsubscribeURL = "unsubscribe_url"
        case tags
    }

    public var json: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(self)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    public static func decode(_ text: String) -> EmailPayload? {
        try? JSONDecoder().decode(EmailPayload.self, from: Data(text.utf8))
    }
}

/// Whether `address` can be sent to: one `@`, something before it, a dotted domain after it,
/// no spaces or line breaks (nothing that could add a header).
public func isDeliverableAddress(_ address: String) -> Bool {
    let parts = address.split(separator: "@", omittingEmptySubsequences: false)
    guard parts.count == 2, !parts[0].isEmpty, parts[1].contains("."), !parts[1].hasPrefix("."), !parts[1].hasSuffix("."),
        address.count <= 254
    else { return false }
    return !address.contains { $0.isWhitespace || $0.isNewline || $0 == "<" || $0 == ">" || $0 == "," || $0 == ";" }
}
