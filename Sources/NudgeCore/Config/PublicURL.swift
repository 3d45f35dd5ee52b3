import Foundation

/// `NUDGE_PUBLIC_URL`: where `nudge serve` is reached from the internet, for the links and
/// callbacks others follow (one-click unsubscribe, Twilio's status callbacks). https, since mail
/// clients make one-click requests to https only (RFC 8058) and a callback carries what it
/// reports; plain http only for a server on this machine (the demo, tests).
public struct PublicURL: Sendable, Equatable {
    /// Without a trailing slash.
    public let url: String

    public init(_ text: String) throws(NudgeError) {
        var url = text.trimmingCharacters(in: .whitespaces)
        while url.hasSuffix("/") { url.removeLast() }
        guard let parsed = URL(string: url), let scheme = parsed.scheme, let host = parsed.host, parsed.query == nil,
            scheme == "https" || (scheme == "http" && ["127.0.0.1", "localhost", "::1"].contains(host))
        else {
            throw NudgeError(
                .configuration,
                """
                NUDGE_PUBLIC_URL must be an https URL without a query, such as https://nudge.example.com \
                (http only for 127.0.0.1 or localhost)
                """)
        }
        self.url = url
    }

    /// `scheme://host[:port]` of a URL (for a CSP source), or the URL itself when it has no host.
    static func origin(of text: String) -> String {
        guard let components = URLComponents(string: text), let scheme = components.scheme, let host = components.host else { return text }
        return "\(scheme)://\(host)\(components.port.map { ":\($0)" } ?? "")"
    }
}
