import Foundation
import Mustache

/// One email, ready to send: its subject and both parts.
public struct RenderedEmail: Sendable, Equatable {
    public let subject: String
    public let html: String
    public let text: String
}

/// The email templates of `templates/email/` (Mustache): for each email, an HTML and a plain-text
/// part per locale, `<email>.<locale>.html.mustache` and `<email>.<locale>.text.mustache`. The
/// HTML escapes every value it is given; the text part is plain (`{{% CONTENT_TYPE: TEXT}}`).
/// A locale without its own templates gets English.
public struct EmailTemplates: Sendable {
    public static let locales = ["en", "fr"]

    private let templates: [String: MustacheTemplate]

    /// Reads and parses the templates of `emails`, every locale and part: a missing or broken
    /// file is a configuration error that names it, before anything is sent.
    public init(directory: URL, emails: [String]) throws(NudgeError) {
        var templates: [String: MustacheTemplate] = [:]
        for email in emails {
            for locale in Self.locales {
                for part in ["html", "text"] {
                    let name = "\(email).\(locale).\(part)"
                    let file = directory.appendingPathComponent(name + ".mustache")
                    guard let source = try? String(contentsOf: file, encoding: .utf8) else {
                        throw NudgeError(.configuration, "cannot read the email template \(file.path)")
                    }
                    do {
                        templates[name] = try MustacheTemplate(string: source)
                    } catch {
                        throw NudgeError(.configuration, "the email template \(file.path) is not valid Mustache: \(error)")
                    }
                }
            }
        }
        self.templates = templates
    }

    /// Both parts of `email` in `locale`, from `model` (a dictionary of strings, booleans and
    /// lists of dictionaries).
    public func render(_ email: String, locale: String, subject: String, model: [String: Any]) -> RenderedEmail {
        let locale = Self.locales.contains(locale) ? locale : "en"
        var model = model
        model["subject"] = subject
        let html = templates["\(email).\(locale).html"]?.render(model) ?? ""
        let text = templates["\(email).\(locale).text"]?.render(model) ?? ""
        return RenderedEmail(subject: subject, html: html, text: Self.tidy(text))
    }

    /// A text part without the blank lines its sections leave: at most one empty line in a row.
    static func tidy(_ text: String) -> String {
        var lines: [Substring] = []
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.drop { $0 == " " }.isEmpty ? Substring("") : line
            if trimmed.isEmpty && (lines.last?.isEmpty ?? true) { continue }
            lines.append(trimmed)
        }
        while lines.last?.isEmpty == true { lines.removeLast() }
        return lines.joined(separator: "\n") + "\n"
    }
}
