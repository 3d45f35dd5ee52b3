import Foundation

/// What no notification's words may hold, whoever wrote them: the LLM's push copy (`PushCopy`)
/// and the text one user writes that another reads (`UserText`). Each check says what it found,
/// never the text itself. The rules are in docs/jobs/push-trigger.md ("Copy").
enum CopyChecks {
    /// C0 and C1 controls (a line break included: a push is one paragraph), line and paragraph
    /// separators, and the invisible format characters (bidi controls, zero-width spaces) that
    /// make text read otherwise than it is stored. Judged alone; `withoutHidden` judges in context
    /// the joiners, variation selectors and tags that emoji need.
    static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .control, .lineSeparator, .paragraphSeparator, .format: true
        default: false
        }
    }

    /// `text` without what a reader cannot see (line breaks and tabs become spaces): controls,
    /// format characters and every other
    /// default-ignorable code point (fillers such as U+3164, variation selectors, tags), but for
    /// what an emoji is made of: a zero-width joiner between two emoji ("👩‍💻"), a variation
    /// selector after an emoji or a keycap's digit ("❤️", "1️⃣"), and the tags of a subdivision
    /// flag ("🏴 + tags", England's). Tags anywhere else spell invisible text a model can read.
    static func withoutHidden(_ text: String) -> String {
        let scalars = Array(text.unicodeScalars)
        var kept = String.UnicodeScalarView()
        var index = 0
        while index < scalars.count {
            let scalar = scalars[index]
            defer { index += 1 }
            switch scalar.value {
            case 0x200C, 0x200D:
                // Between two emoji (the first perhaps with its variation selector: "🏋️‍♀️"), or,
                // as some scripts write, between two letters that are not ASCII.
                let next = index + 1 < scalars.count ? scalars[index + 1] : nil
                guard let previous = kept.last, let next else { continue }
                if scalar.value == 0x200D, isEmoji(previous) || previous.value == 0xFE0F, isEmoji(next) {
                    kept.append(scalar)
                } else if isJoinableLetter(previous), isJoinableLetter(next) {
                    kept.append(scalar)
                }
            case 0xFE0E, 0xFE0F:
                if let previous = kept.last, previous.properties.isEmoji { kept.append(scalar) }
            case 0x1F3F4:
                kept.append(scalar)
                // The subdivision flags emoji show (England's, Scotland's, Wales'): 🏴, their tags,
                // the cancel tag. Other tags after 🏴 spell hidden text: gone.
                for flag in subdivisionFlags {
                    let end = index + flag.count + 1
                    let tags = flag.unicodeScalars.map { 0xE0000 + $0.value } + [0xE007F]
                    guard end < scalars.count, scalars[(index + 1)...end].map(\.value) == tags else { continue }
                    kept.append(contentsOf: scalars[(index + 1)...end])
                    index = end
                    break
                }
            default:
                // A line break or a tab is a space here; what else is a control goes.
                if scalar.properties.isWhitespace && scalar.properties.generalCategory != .spaceSeparator {
                    kept.append(" ")
                    continue
                }
                if isControl(scalar) || scalar.properties.isDefaultIgnorableCodePoint { continue }
                kept.append(scalar)
            }
        }
        return String(kept)
    }

    /// The tag letters of the subdivision flags emoji have.
    private static let subdivisionFlags = ["gbeng", "gbsct", "gbwls"]

    /// A letter a zero-width joiner or non-joiner may stand beside (Persian, Indic scripts).
    private static func isJoinableLetter(_ scalar: Unicode.Scalar) -> Bool {
        guard !scalar.isASCII else { return false }
        switch scalar.properties.generalCategory {
        case .otherLetter, .lowercaseLetter, .uppercaseLetter, .spacingMark, .nonspacingMark: return true
        default: return false
        }
    }

    /// An emoji a joiner may join (not a digit, `#` or `*`, which are emoji only as keycaps).
    private static func isEmoji(_ scalar: Unicode.Scalar) -> Bool {
        scalar.properties.isEmoji && scalar.value > 0x7F
    }

    /// A link, an e-mail address or a phone number in `text`: what it is, never the text itself.
    /// Judged on the text as a reader sees it: compatibility forms folded (full-width letters
    /// and digits), invisible marks dropped (a zero-width joiner inside a link), disguised dots
    /// ("evil[.]com", the ideographic stop) made dots.
    ///
    /// Any `name.name` whose last part is 2 to 24 letters is a link, whatever those letters are
    /// (new top-level domains are added every year: "evil.zip", "prize.casino"). The price is
    /// that two words joined by a dot without a space ("St.Louis", "great job.Keep going") read
    /// as a link too: the LLM's copy is then refused and asked for again, a user's text gives way
    /// to neutral words. Decimals ("2.5 km"), times ("18.30"), abbreviations followed by a space
    /// ("St. Louis") and initials ("e.g.", "a.m.") are not links. A link spelt out ("evil dot
    /// com") is one only with a common top-level domain after "dot", which is also a word ("a
    /// polka dot dress") and a name.
    static func contact(in text: String) -> String? {
        var plain = String(
            String.UnicodeScalarView(
                text.precomposedStringWithCompatibilityMapping.unicodeScalars.filter { scalar in
                    ![.format, .nonspacingMark, .enclosingMark].contains(scalar.properties.generalCategory)
                }))
        plain = plain.replacingOccurrences(
            of: #"(?i)\s+dot\s+(?=(\#(spokenDomains.joined(separator: "|")))\b)"#, with: ".",
            options: .regularExpression)
        // Disguised dots, and the marks that look like one (Lisu's full stop, the dot operators,
        // the Armenian and Urdu full stops). Not the middle dot: French writes "tous·tes".
        for dot in [
            "[.]", "(.)", "[dot]", "(dot)", "\u{3002}", "\u{FF61}", "\u{A4F8}", "\u{22C5}", "\u{2219}",
            "\u{0589}", "\u{06D4}", "\u{2024}", "\u{FE52}",
        ] {
            plain = plain.replacingOccurrences(of: dot, with: ".", options: .caseInsensitive)
        }
        let checks: [(String, String)] = [
            (#"[\w.+-]+@[\w-]+(\.[\w-]+)+"#, "an e-mail address"),
            (
                #"(?i)\b[a-z][a-z0-9+.-]*://|\bwww\."# + #"|[\p{L}\p{N}-]+(\.[\p{L}\p{N}-]+)*"#
                    + #"\.(\#(topLevelLetters){2,24}|xn--[a-z0-9-]+)(?![\p{L}\p{N}])"#, "a link"
            ),
        ]
        for (pattern, what) in checks where plain.range(of: pattern, options: .regularExpression) != nil {
            return what
        }
        return hasPhoneNumber(plain) ? "a phone number" : nil
    }

    /// The letters a top-level domain may be made of: any script's, but those of the scripts
    /// written without spaces (Chinese, Japanese), where the ideographic full stop, read as a dot,
    /// ends sentences.
    private static let topLevelLetters = #"[\p{L}&&[^\p{Han}\p{Hiragana}\p{Katakana}]]"#

    /// The top-level domains a link spelt out with "dot" is read with: the common ones that are
    /// no English or French word, so that "a dot in the sky", "dot to dot", "polka dot shop" or
    /// "la dot de sa fille" is no link.
    private static let spokenDomains = [
        "com", "net", "org", "io", "co", "app", "ly", "gg", "xyz", "info", "biz", "tv", "ai", "ru",
        "cn", "fr", "uk", "eu", "ca", "au", "br", "nl", "sh", "gl", "cc", "ws", "dev", "zip", "mov",
    ]

    /// Dates and times as copy writes them, set apart before numbers are read: 2026-03-22,
    /// 22.03.2026, 18:30, 18h30, 18.30 (each with valid values, and not part of a longer run of
    /// digits and dots, as a phone number written 06.12.34.56.78 is).
    private static let datesAndTimes = try! NSRegularExpression(
        pattern: #"(?<![\d.:-])(?:"#
            + #"\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"#   // 2026-03-22
            + #"|(?:0?[1-9]|[12]\d|3[01])[./](?:0?[1-9]|1[0-2])[./]\d{4}"#   // 22.03.2026
            + #"|(?:[01]?\d|2[0-3])[h.:][0-5]\d"#   // 18:30, 18h30, 18.30
            + #")(?![\d.:]\d)"#)

    private static let seasons = try! NSRegularExpression(
        pattern: #"(?<!\d[\s().\-–/]{0,3})(?<!\d)((?:19|20)\d\d)[-–/]((?:19|20)\d\d|\d\d)(?!\d)(?![\s().\-–/]{1,3}\d)"#)

    /// Seven digits or more in a row, with the separators numbers are written with, that are not
    /// a number grouped in thousands ("1 000 000 pas", "12 000 000"), once dates and times are
    /// set apart.
    static func hasPhoneNumber(_ text: String) -> Bool {
        var apart = datesAndTimes.stringByReplacingMatches(in: text, range: NSRange(text.startIndex..., in: text), withTemplate: " ¦ ")
        // A season (2024-2025, 2025/26: a year and the next), alone among the digits.
        for match in seasons.matches(in: apart, range: NSRange(apart.startIndex..., in: apart)).reversed() {
            guard let whole = Range(match.range, in: apart), let first = Range(match.range(at: 1), in: apart),
                let second = Range(match.range(at: 2), in: apart),
                let from = Int(apart[first]), let to = Int(apart[second])
            else { continue }
            if to == from + 1 || (apart[second].count == 2 && to == (from + 1) % 100) { apart.replaceSubrange(whole, with: " ¦ ") }
        }
        let candidate = try! NSRegularExpression(pattern: #"\+?\(?\d(?:[\s().\-–/]{0,3}\d){6,}"#)
        for match in candidate.matches(in: apart, range: NSRange(apart.startIndex..., in: apart)) {
            guard let found = Range(match.range, in: apart) else { continue }
            let number = apart[found].trimmingCharacters(in: .whitespaces)
            if number.range(of: #"^\d{1,2}([ \u00A0\u202F]\d{3}){2,}$"#, options: .regularExpression) != nil { continue }
            if number.filter(\.isNumber).count >= 7 { return true }
        }
        return false
    }

    /// Whether a word (what lies between spaces) mixes the letters of alphabets that look alike:
    /// "pаypal" with a Cyrillic "а" reads as the Latin word and is not. A word wholly in one
    /// alphabet passes (French accents are Latin letters); digits, punctuation, emoji and
    /// combining marks belong to none, and scripts that do not pass for Latin (Chinese, Arabic…)
    /// are not judged. The price: a word such as "β-carotene" or "10μm" (with a Greek mu) is
    /// refused too. A word wholly in look-alike letters ("раураl" in Cyrillic) is not caught.
    static func mixesAlphabets(_ text: String) -> Bool {
        // As a reader sees it: mathematical and full-width letters are the letters they show (and
        // only those: the micro sign stays Latin-1's, "50 µg").
        let folded = String(
            String.UnicodeScalarView(
                text.unicodeScalars.flatMap { scalar -> [Unicode.Scalar] in
                    (0x1D400...0x1D7FF).contains(scalar.value) || (0xFF21...0xFF5A).contains(scalar.value)
                        ? Array(String(scalar).precomposedStringWithCompatibilityMapping.unicodeScalars) : [scalar]
                }))
        for word in folded.split(whereSeparator: \.isWhitespace) {
            var first: LookAlikeAlphabet?
            for scalar in word.unicodeScalars {
                guard let alphabet = LookAlikeAlphabet(scalar) else { continue }
                if let first, first != alphabet { return true }
                first = alphabet
            }
        }
        return false
    }
}

/// The alphabets whose letters pass for one another, by the blocks of their letters (the
/// standard library has no script property).
enum LookAlikeAlphabet: Equatable {
    case latin, greek, cyrillic, armenian, cherokee, lisu, syllabics

    init?(_ scalar: Unicode.Scalar) {
        switch scalar.properties.generalCategory {
        case .uppercaseLetter, .lowercaseLetter, .titlecaseLetter, .modifierLetter, .otherLetter: break
        default: return nil
        }
        switch scalar.value {
        case 0x41...0x5A, 0x61...0x7A, 0xAA, 0xBA, 0xC0...0x24F, 0x250...0x2AF, 0x1D00...0x1D25, 0x1D2C...0x1D5C, 0x1D62...0x1D65,
            0x1D6B...0x1D77, 0x1D79...0x1DBE, 0x1E00...0x1EFF, 0x2071, 0x207F, 0x2090...0x209C, 0x2C60...0x2C7F, 0xA722...0xA7FF,
            0xAB30...0xAB5A, 0xAB5C...0xAB64, 0xAB66...0xAB69, 0xFB00...0xFB06, 0xFF21...0xFF3A, 0xFF41...0xFF5A:
            self = .latin
        case 0x370...0x3FF, 0x1D26...0x1D2A, 0x1D5D...0x1D61, 0x1D66...0x1D6A, 0x1DBF, 0x1F00...0x1FFF, 0xAB65:
            self = .greek
        case 0x400...0x52F, 0x1C80...0x1C8F, 0x1D2B, 0x1D78, 0x2DE0...0x2DFF, 0xA640...0xA69F:
            self = .cyrillic
        case 0x531...0x58F, 0xFB13...0xFB17:
            self = .armenian
        case 0x13A0...0x13FF, 0xAB70...0xABBF:
            self = .cherokee
        case 0xA4D0...0xA4FF:
            self = .lisu
        case 0x1400...0x167F, 0x18B0...0x18FF:
            self = .syllabics
        default:
            return nil
        }
    }
}
