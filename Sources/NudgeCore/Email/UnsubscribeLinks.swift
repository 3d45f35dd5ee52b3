import Crypto
import Foundation

/// One-click unsubscribe links (RFC 8058): a token names a user and an email type and carries an
/// HMAC-SHA256 of both under `NUDGE_UNSUBSCRIBE_SECRET`. It cannot be guessed or altered without
/// the secret, and it does not expire: a link in an old email works as long as the secret is
/// the same (changing the secret ends every link sent before, so it is changed only on a leak).
///
/// A token reads `<user id>.<email type>.<signature>`: only URL-safe characters, so it goes
/// into a query string as it is.
public struct UnsubscribeLinks: Sendable {
    private let key: SymmetricKey
    /// `NUDGE_PUBLIC_URL`: where `nudge serve` is reached from the internet, without a trailing slash.
    public let publicURL: String

    /// A secret shorter than this many bytes is refused.
    public static let shortestSecret = 32

    public init(secret: String, publicURL: String) throws(NudgeError) {
        guard secret.utf8.count >= Self.shortestSecret else {
            throw NudgeError(.configuration, """
                NUDGE_UNSUBSCRIBE_SECRET must be at least \(Self.shortestSecret) characters (for example the output of \
                `openssl rand -hex 32`)
                """)
        }
        key = SymmetricKey(data: Data(secret.utf8))
        self.publicURL = try PublicURL(publicURL).url
    }

    /// The links the environment configures: `NUDGE_UNSUBSCRIBE_SECRET` and `NUDGE_PUBLIC_URL`,
    /// both required by whatever sends or answers an email that can be stopped.
    public init(environment: Environment) throws(NudgeError) {
        let secret = try environment.require("NUDGE_UNSUBSCRIBE_SECRET",
                                             hint: "the key that signs one-click unsubscribe links (`openssl rand -hex 32`)")
        let url = try environment.require("NUDGE_PUBLIC_URL", hint: "the https address `nudge serve` is reached at, for the links")
        try self.init(secret: secret, publicURL: url)
    }

    public func token(user: UUID, type: EmailType) -> String {
        let subject = "\(user.uuidString.lowercased()).\(type.rawValue)"
        return subject + "." + signature(subject)
    }

    /// `https://…/unsubscribe?token=…`: the address of `List-Unsubscribe` and of the email's own link.
    public func url(user: UUID, type: EmailType) -> String {
        publicURL + "/unsubscribe?token=" + token(user: user, type: type)
    }

    /// The user and email type a genuine token names; nil for anything else (a forged or
    /// altered token, a malformed one, an email type Nudge does not know).
    public func verify(_ token: String) -> (user: UUID, type: EmailType)? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let user = UUID(uuidString: String(parts[0])), let type = EmailType(rawValue: String(parts[1])),
              let mac = Data(base64URL: String(parts[2])), mac.count == SHA256.byteCount
        else { return nil }
        let subject = Data(("unsubscribe:" + parts[0] + "." + parts[1]).utf8)
        guard HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: subject, using: key) else { return nil }
        return (user, type)
    }

    private func signature(_ subject: String) -> String {
        Data(HMAC<SHA256>.authenticationCode(for: Data(("unsubscribe:" + subject).utf8), using: key)).base64URL
    }
}
