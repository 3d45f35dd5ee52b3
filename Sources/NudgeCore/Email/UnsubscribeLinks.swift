import Crypto
import Foundation

/// One-click unsubscribe links (RFC 8058): a token names a user and an email type and carries an
/// HMAC-SHA256 of both under `NUDGE_UNSUBSCRIBE_SECRET`. It cannot be guessed or altered without
/// the secret, and it does not expire: a link in an old email must keep working.
///
/// A token reads `<user id>.<email type>.<key id>.<signature>`: only URL-safe characters, so it
/// goes into a query string as it is. The key id (derived from the secret, never revealing it)
/// names the secret that signed it, so that a rotation keeps old links working: set the new
/// secret in `NUDGE_UNSUBSCRIBE_SECRET` and the old one in `NUDGE_UNSUBSCRIBE_SECRET_PREVIOUS`;
/// new links are signed with the new one, and both are accepted. Tokens written before key ids
/// (`<user id>.<email type>.<signature>`) are checked against both.
public struct UnsubscribeLinks: Sendable {
    private struct Key: Sendable {
        let id: String
        let key: SymmetricKey

        init(_ secret: String) {
            key = SymmetricKey(data: Data(secret.utf8))
            id = String(SHA256.hash(data: Data("nudge-unsubscribe-key-id:\(secret)".utf8)).map { String(format: "%02x", $0) }.joined().prefix(8))
        }
    }

    /// The secret that signs, then the previous one (still accepted).
    private let keys: [Key]
    /// `NUDGE_PUBLIC_URL`: where `nudge serve` is reached from the internet, without a trailing slash.
    public let publicURL: String

    /// A secret shorter than this many bytes is refused.
    public static let shortestSecret = 32
    /// What a secret must be worth: 32 random bytes.
    public static let leastBits = 256

    public init(secret: String, previous: String? = nil, publicURL: String) throws(NudgeError) {
        for (name, value) in [("NUDGE_UNSUBSCRIBE_SECRET", secret)] + (previous.map { [("NUDGE_UNSUBSCRIBE_SECRET_PREVIOUS", $0)] } ?? []) {
            if let weakness = Self.weakness(of: value) {
                throw NudgeError(
                    .configuration,
                    """
                    \(name) \(weakness): it signs every unsubscribe link, and one guessed would let anyone stop anyone's \
                    emails. Use 32 random bytes, such as the output of `openssl rand -hex 32`
                    """)
            }
        }
        keys = [Key(secret)] + (previous.map { [Key($0)] } ?? [])
        if keys.count == 2 && keys[0].id == keys[1].id {
            throw NudgeError(.configuration, "NUDGE_UNSUBSCRIBE_SECRET_PREVIOUS is the same as NUDGE_UNSUBSCRIBE_SECRET: give the old secret")
        }
        self.publicURL = try PublicURL(publicURL).url
    }

    /// The links the environment configures: `NUDGE_UNSUBSCRIBE_SECRET` (and, through a rotation,
    /// `NUDGE_UNSUBSCRIBE_SECRET_PREVIOUS`) and `NUDGE_PUBLIC_URL`, required by whatever sends or
    /// answers an email that can be stopped.
    public init(environment: Environment) throws(NudgeError) {
        let secret = try environment.require(
            "NUDGE_UNSUBSCRIBE_SECRET",
            hint: "the key that signs one-click unsubscribe links (`openssl rand -hex 32`)")
        let url = try environment.require("NUDGE_PUBLIC_URL", hint: "the https address `nudge serve` is reached at, for the links")
        let previous = environment["NUDGE_UNSUBSCRIBE_SECRET_PREVIOUS"].flatMap { $0.isEmpty ? nil : $0 }
        try self.init(secret: secret, previous: previous, publicURL: url)
    }

    /// Why `secret` is too weak to sign links, or nil: shorter than `shortestSecret`, worth fewer
    /// than `leastBits` at the most its alphabet allows (hex 4 bits a character, base64 6,
    /// anything else about 6.5), a phrase (words joined by spaces or punctuation), or made of few
    /// distinct characters.
    public static func weakness(of secret: String) -> String? {
        let characters = Array(secret.unicodeScalars)
        guard characters.count >= shortestSecret else { return "is shorter than \(shortestSecret) characters" }
        let hex = CharacterSet(charactersIn: "0123456789abcdefABCDEF")
        let base64 = CharacterSet.alphanumerics.intersection(CharacterSet(charactersIn: Unicode.Scalar(0)..<Unicode.Scalar(128)))
            .union(CharacterSet(charactersIn: "+/=_-"))
        let perCharacter: Double = characters.allSatisfy(hex.contains) ? 4 : characters.allSatisfy(base64.contains) ? 6 : 6.5
        if Double(characters.count) * perCharacter < Double(leastBits) {
            return "is worth fewer than \(leastBits) bits (\(characters.count) characters of its kind)"
        }
        // Words joined by spaces or punctuation ("correct-horse-battery-staple-…").
        if characters.contains(where: CharacterSet.whitespaces.contains)
            || secret.range(of: #"^[A-Za-z]+([-_.,:;'][A-Za-z]+)+[0-9!?.]*$"#, options: .regularExpression) != nil
        {
            return "reads as a phrase, not random bytes"
        }
        if Set(characters).count < 12 {
            return "has only \(Set(characters).count) distinct characters"
        }
        return nil
    }

    public func token(user: UUID, type: EmailType) -> String {
        let subject = "\(user.uuidString.lowercased()).\(type.rawValue)"
        return subject + "." + keys[0].id + "." + signature(subject, keys[0])
    }

    /// `https://…/unsubscribe?token=…`: the address of `List-Unsubscribe` and of the email's own link.
    public func url(user: UUID, type: EmailType) -> String {
        publicURL + "/unsubscribe?token=" + token(user: user, type: type)
    }

    /// The user and email type a genuine token names; nil for anything else (a forged or
    /// altered token, a malformed one, one signed by a secret no longer configured, an email type
    /// Nudge does not know).
    public func verify(_ token: String) -> (user: UUID, type: EmailType)? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 || parts.count == 4, let user = UUID(uuidString: String(parts[0])),
            let type = EmailType(rawValue: String(parts[1])), let mac = Data(base64URL: String(parts[parts.count - 1])),
            mac.count == SHA256.byteCount
        else { return nil }
        let candidates = parts.count == 4 ? keys.filter { $0.id == parts[2] } : keys
        let subject = Data(("unsubscribe:" + parts[0] + "." + parts[1]).utf8)
        guard candidates.contains(where: { HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: subject, using: $0.key) })
        else { return nil }
        return (user, type)
    }

    private func signature(_ subject: String, _ key: Key) -> String {
        Data(HMAC<SHA256>.authenticationCode(for: Data(("unsubscribe:" + subject).utf8), using: key.key)).base64URL
    }
}
