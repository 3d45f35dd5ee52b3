import Foundation

/// A proactive push's copy, as the LLM wrote it and Nudge accepted it.
public struct PushCopy: Sendable, Equatable {
    public static let maximumTitleLength = 50
    public static let maximumBodyLength = 200
    /// This many of the user's words in a row, repeated, make the copy a quotation.
    public static let verbatimRun = 5

    public let title: String
    public let body: String

    /// Why a reply cannot be sent. The words never quote the reply or the user.
    public enum Rejection: Error, Sendable, Equatable, CustomStringConvertible {
        case notJSON
        case missingText(String)
        case titleTooLong(Int)
        case bodyTooLong(Int)
        case quotesUser
        /// A link, an e-mail address or a phone number: copy that sends the user somewhere is
        /// never the LLM's to write (a prompt injected through the user's own words could).
        case contact(String)
        /// Control characters, or the invisible marks that reorder text (bidi controls).
        case controlCharacters

        public var description: String {
            switch self {
            case .notJSON: "the LLM's reply is not a JSON object with a title and a body"
            case .missingText(let field): "the LLM's reply has an empty \(field)"
            case .titleTooLong(let count): "the LLM's title has \(count) characters, more than \(maximumTitleLength)"
            case .bodyTooLong(let count): "the LLM's body has \(count) characters, more than \(maximumBodyLength)"
            case .quotesUser: "the LLM's copy repeats \(verbatimRun) or more of the user's own words verbatim"
            case .contact(let what): "the LLM's copy holds \(what)"
            case .controlCharacters: "the LLM's copy holds control characters or bidirectional-text controls"
            }
        }
    }

    /// Reads the reply as JSON `{title, body}` (a Markdown code fence around it is allowed) and
    /// checks the lengths and that it does not quote `userMessages`.
    public static func parse(_ reply: String, userMessages: [String]) throws(Rejection) -> PushCopy {
        var text = reply.trimmingCharacters(in: .whitespacesAndNewlines)
        if text.hasPrefix("```") {
            text = String(text.drop { $0 != "\n" }.dropFirst())
            if text.hasSuffix("```") { text = String(text.dropLast(3)) }
        }
        struct Reply: Decodable {
            let title: String
            let body: String
        }
        guard let parsed = try? JSONDecoder().decode(Reply.self, from: Data(text.utf8)) else { throw .notJSON }
        let title = parsed.title.trimmingCharacters(in: .whitespacesAndNewlines)
        let body = parsed.body.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !title.isEmpty else { throw .missingText("title") }
        guard !body.isEmpty else { throw .missingText("body") }
        guard title.count <= maximumTitleLength else { throw .titleTooLong(title.count) }
        guard body.count <= maximumBodyLength else { throw .bodyTooLong(body.count) }
        for field in [title, body] {
            if field.unicodeScalars.contains(where: isControl) { throw .controlCharacters }
            if let what = contact(in: field) { throw .contact(what) }
        }
        let quoted = runs(of: userMessages.map { TemporalReferences.words(of: Substring($0)) })
        for field in [title, body] where !runs(of: [TemporalReferences.words(of: Substring(field))]).isDisjoint(with: quoted) {
            throw .quotesUser
        }
        return PushCopy(title: title, body: body)
    }

    /// C0 and C1 controls (a line break included: a push is one paragraph), line and paragraph
    /// separators, and the invisible format characters (bidi controls, zero-width spaces) that
    /// make text read otherwise than it is stored; the joiners of emoji sequences and of some
    /// scripts (U+200C, U+200D), the tags of subdivision flags and variation selectors pass.
    static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .control, .lineSeparator, .paragraphSeparator: true
        case .format: !(0x200C...0x200D).contains(scalar.value) && !(0xE0020...0xE007F).contains(scalar.value)
        default: false
        }
    }

    /// The top-level domains a link in push copy would most likely use: a bare `name.tld` is a
    /// link only with one of these (or a path after it), so that "St.Louis" or "job.Keep" is not.
    static let linkDomains = ["com", "net", "org", "io", "co", "app", "me", "ly", "gg", "xyz", "info", "biz", "link", "click",
                              "site", "online", "top", "shop", "store", "live", "tv", "ai", "ru", "cn", "de", "fr", "uk", "us",
                              "eu", "ca", "au", "in", "br", "es", "it", "nl", "to", "sh", "gl", "cc", "ws", "page", "dev"]

    /// A link, an e-mail address or a phone number in `text`: what it is, never the text itself.
    /// Judged on the text as a reader sees it: compatibility forms folded (full-width letters
    /// and digits), invisible marks dropped (a zero-width joiner inside a link), disguised dots
    /// ("evil[.]com", the ideographic stop) made dots.
    static func contact(in text: String) -> String? {
        var plain = String(String.UnicodeScalarView(text.precomposedStringWithCompatibilityMapping.unicodeScalars.filter { scalar in
            ![.format, .nonspacingMark, .enclosingMark].contains(scalar.properties.generalCategory)
        }))
        for dot in ["[.]", "(.)", "[dot]", "(dot)", " dot ", "\u{3002}", "\u{FF61}"] {
            plain = plain.replacingOccurrences(of: dot, with: ".", options: .caseInsensitive)
        }
        let domains = linkDomains.joined(separator: "|")
        let checks: [(String, String)] = [
            (#"[\w.+-]+@[\w-]+(\.[\w-]+)+"#, "an e-mail address"),
            (#"(?i)\b[a-z][a-z0-9+.-]*://|\bwww\.|\b[a-z0-9-]+(\.[a-z0-9-]+)*\.(\#(domains))\b|\b[a-z0-9-]+\.[a-z]{2,24}/\S"#, "a link"),
        ]
        for (pattern, what) in checks where plain.range(of: pattern, options: .regularExpression) != nil {
            return what
        }
        return hasPhoneNumber(plain) ? "a phone number" : nil
    }

    /// Dates and times as copy writes them, set apart before numbers are read: 2026-03-22,
    /// 22.03.2026, 18:30, 18h30, 18.30 (each with valid values, and not part of a longer run of
    /// digits and dots, as a phone number written 06.12.34.56.78 is).
    private static let datesAndTimes = try! NSRegularExpression(pattern: #"(?<![\d.:-])(?:"#
        + #"\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"#                    // 2026-03-22
        + #"|(?:0?[1-9]|[12]\d|3[01])[./](?:0?[1-9]|1[0-2])[./]\d{4}"#           // 22.03.2026
        + #"|(?:[01]?\d|2[0-3])[h.:][0-5]\d"#                                    // 18:30, 18h30, 18.30
        + #")(?![\d.:]\d)"#)

    /// Seven digits or more in a row, with the separators numbers are written with, that are not
    /// a number grouped in thousands ("1 000 000 pas", "12 000 000"), once dates and times are
    /// set apart.
    static func hasPhoneNumber(_ text: String) -> Bool {
        let apart = datesAndTimes.stringByReplacingMatches(in: text, range: NSRange(text.startIndex..., in: text), withTemplate: " ¦ ")
        let candidate = try! NSRegularExpression(pattern: #"\+?\(?\d(?:[\s().\-–/]{0,3}\d){6,}"#)
        for match in candidate.matches(in: apart, range: NSRange(apart.startIndex..., in: apart)) {
            guard let found = Range(match.range, in: apart) else { continue }
            let number = apart[found].trimmingCharacters(in: .whitespaces)
            if number.range(of: #"^\d{1,2}([ \u00A0\u202F]\d{3}){2,}$"#, options: .regularExpression) != nil { continue }
            if number.filter(\.isNumber).count >= 7 { return true }
        }
        return false
    }

    /// What `push_log.content` keeps: the title and the body.
    public var content: String { "\(title) — \(body)" }

    private static func runs(of texts: [[String]]) -> Set<[String]> {
        var runs = Set<[String]>()
        for words in texts where words.count >= verbatimRun {
            for start in 0...(words.count - verbatimRun) { runs.insert(Array(words[start..<(start + verbatimRun)])) }
        }
        return runs
    }
}
