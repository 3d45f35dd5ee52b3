import Foundation

/// How many parts (segments) an SMS text costs, as carriers and Twilio count them (3GPP TS 23.038):
///
/// - **GSM-7**, when every character is in the GSM 03.38 default alphabet or its extension
///   table: 160 septets in one part, 153 per part once split (7 go to the concatenation header).
///   A character of the extension table (`^ { } \ [ ~ ] |` `€` and the form feed) is an escape
///   and the character: it counts twice.
/// - **UCS-2** otherwise: a single character outside that alphabet (an emoji, `ê`, `—`) turns the
///   whole message into UTF-16 code units, 70 in one part, 67 per part. An emoji outside the
///   basic plane is two code units.
public struct SMSText: Sendable, Equatable {
    public enum Encoding: String, Sendable {
        case gsm7 = "GSM-7"
        case ucs2 = "UCS-2"
    }

    public let text: String
    public let encoding: Encoding
    /// Septets (GSM-7) or UTF-16 code units (UCS-2).
    public let units: Int

    public init(_ text: String) {
        self.text = text
        var septets = 0
        var gsm = true
        for scalar in text.unicodeScalars {
            if Self.basic.contains(scalar) {
                septets += 1
            } else if Self.extended.contains(scalar) {
                septets += 2
            } else {
                gsm = false
                break
            }
        }
        encoding = gsm ? .gsm7 : .ucs2
        units = gsm ? septets : text.utf16.count
    }

    /// How many parts it is sent as (1 for an empty text).
    public var segments: Int {
        let (single, part) = encoding == .gsm7 ? (160, 153) : (70, 67)
        guard units > single else { return 1 }
        return (units + part - 1) / part
    }

    /// The GSM 03.38 default alphabet (one septet each).
    static let basic: Set<Unicode.Scalar> = Set(
        "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"
            .unicodeScalars)
    /// Its extension table (an escape septet and one more each).
    static let extended: Set<Unicode.Scalar> = Set("^{}\\[~]|€\u{0C}".unicodeScalars)

    /// The text in the GSM-7 alphabet where a plain equivalent exists: French accents GSM-7 lacks
    /// (`ê` → `e`, `ç` → `c`, `œ` → `oe`), typographic quotes, dashes, ellipsis and the spaces
    /// French puts before `!` and `:`. Characters with no equivalent (an emoji, another script)
    /// are kept: the text is then UCS-2, and counted so.
    public static func plain(_ text: String) -> String {
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            if basic.contains(scalar) || extended.contains(scalar) {
                out.append(scalar)
            } else if let replacement = replacements[scalar] {
                out.append(contentsOf: replacement.unicodeScalars)
            } else {
                out.append(scalar)
            }
        }
        return String(out)
    }

    private static let replacements: [Unicode.Scalar: String] = [
        "â": "a", "á": "a", "ã": "a", "À": "A", "Â": "A", "Á": "A",
        "ê": "e", "ë": "e", "È": "E", "Ê": "E", "Ë": "E",
        "î": "i", "ï": "i", "í": "i", "Î": "I", "Ï": "I", "Í": "I",
        "ô": "o", "ó": "o", "õ": "o", "Ô": "O", "Ó": "O",
        "û": "u", "ú": "u", "Û": "U", "Ù": "U", "Ú": "U",
        "ç": "c", "ÿ": "y", "œ": "oe", "Œ": "OE",
        "\u{2018}": "'", "\u{2019}": "'", "\u{201C}": "\"", "\u{201D}": "\"", "«": "\"", "»": "\"",
        "\u{2013}": "-", "\u{2014}": "-", "\u{2026}": "...",
        "\u{00A0}": " ", "\u{202F}": " ", "\u{2009}": " ",
    ]
}

/// A phone number as Twilio takes it: E.164, a `+`, a country code that does not start with 0,
/// and at most 15 digits in all. Spaces, dots, dashes and brackets people type are tolerated and
/// dropped; anything else is not a number.
public struct PhoneNumber: Sendable, Equatable, CustomStringConvertible {
    /// `+` and the digits.
    public let e164: String

    public init?(_ text: String) {
        var digits = ""
        var sawPlus = false
        for character in text.trimmingCharacters(in: .whitespaces) {
            switch character {
            case "+" where !sawPlus && digits.isEmpty: sawPlus = true
            case "0"..."9": digits.append(character)
            case " ", "-", ".", "(", ")": continue
            default: return nil
            }
        }
        guard sawPlus, (8...15).contains(digits.count), digits.first != "0" else { return nil }
        e164 = "+" + digits
    }

    /// For logs and errors: never the whole number, only its country's first digit and its last
    /// two (`+1•••••••67`).
    public var masked: String { Self.mask(e164) }

    public var description: String { masked }

    /// `text` with every run of seven digits or more (a phone number, perhaps written with
    /// spaces or dashes) masked: for a provider's error message that quotes the number.
    public static func scrub(_ text: String) -> String {
        var out = ""
        var run = ""
        func flush() {
            if run.filter(\.isNumber).count >= 7 {
                out += mask(run) + (run.last == " " || run.last == "-" ? String(run.last!) : "")
            } else {
                out += run
            }
            run = ""
        }
        for character in text {
            if character.isNumber || (character == "+" && run.isEmpty) || ((character == " " || character == "-") && !run.isEmpty) {
                run.append(character)
            } else {
                flush()
                out.append(character)
            }
        }
        flush()
        return out
    }

    /// Any text that may be a phone number, masked the same way (for a number that is not valid).
    public static func mask(_ text: String) -> String {
        let digits = text.filter(\.isNumber)
        guard digits.count > 3 else { return "•••" }
        return "+" + String(digits.prefix(1)) + String(repeating: "•", count: digits.count - 3) + String(digits.suffix(2))
    }
}
