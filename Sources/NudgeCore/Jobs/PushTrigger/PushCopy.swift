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
        /// A word whose letters come from alphabets that look alike ("pаypal" with a Cyrillic
        /// "а"): a name passing for another.
        case mixedAlphabets

        public var description: String {
            switch self {
            case .notJSON: "the LLM's reply is not a JSON object with a title and a body"
            case .missingText(let field): "the LLM's reply has an empty \(field)"
            case .titleTooLong(let count): "the LLM's title has \(count) characters, more than \(maximumTitleLength)"
            case .bodyTooLong(let count): "the LLM's body has \(count) characters, more than \(maximumBodyLength)"
            case .quotesUser: "the LLM's copy repeats \(verbatimRun) or more of the user's own words verbatim"
            case .contact(let what): "the LLM's copy holds \(what)"
            case .controlCharacters: "the LLM's copy holds control characters or bidirectional-text controls"
            case .mixedAlphabets: "the LLM's copy holds a word mixing look-alike alphabets (Latin, Greek, Cyrillic)"
            }
        }
    }

    /// Reads the reply as JSON `{title, body}` (a Markdown code fence around it is allowed) and
    /// checks the lengths, what no copy may hold (`CopyChecks`) and that it does not quote
    /// `userMessages`.
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
            if let what = CopyChecks.contact(in: field) { throw .contact(what) }
            if CopyChecks.withoutHidden(field) != field { throw .controlCharacters }
            if CopyChecks.mixesAlphabets(field) { throw .mixedAlphabets }
        }
        let quoted = runs(of: userMessages.map { TemporalReferences.words(of: Substring($0)) })
        for field in [title, body] where !runs(of: [TemporalReferences.words(of: Substring(field))]).isDisjoint(with: quoted) {
            throw .quotesUser
        }
        return PushCopy(title: title, body: body)
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
