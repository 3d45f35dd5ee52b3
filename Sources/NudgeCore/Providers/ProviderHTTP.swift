import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOSSL

/// How every provider client (the LLM, APNs, FCM and its token endpoint) talks HTTP: TLS verified
/// against the system's roots and those of `NUDGE_CA_FILE` (never turned off), a connect
/// time-out, and each exchange bounded as a whole, body included: AsyncHTTPClient's own deadline
/// ends when the response head arrives, so a server that stalls mid-body could otherwise hold a
/// run.
public struct ProviderHTTP: Sendable {
    /// `NUDGE_CA_FILE`: a PEM file of roots trusted in addition to the system's (a private CA).
    public let extraTrustedRoots: String?
    /// How long one exchange may take, from connecting to the last byte of the answer.
    public let timeout: Duration

    public init(extraTrustedRoots: String?, timeout: Duration) {
        self.extraTrustedRoots = extraTrustedRoots
        self.timeout = timeout
    }

    /// The answers a provider may send back: anything longer is cut off (and so refused).
    static let largestAnswer = 1 << 20

    /// A new client; its owner shuts it down. `http2` lets it speak HTTP/2 where the server
    /// offers it (APNs requires it): AsyncHTTPClient then keeps one connection per host per
    /// client, with many streams on it.
    public func makeClient(http2: Bool, connectionsPerHost: Int = 8) throws(NudgeError) -> HTTPClient {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let extraTrustedRoots {
            guard FileManager.default.isReadableFile(atPath: extraTrustedRoots) else {
                throw NudgeError(.configuration, "NUDGE_CA_FILE names \(extraTrustedRoots), which cannot be read")
            }
            tls.additionalTrustRoots = [.file(extraTrustedRoots)]
        }
        var pool = HTTPClient.Configuration.ConnectionPool()
        pool.concurrentHTTP1ConnectionsPerHostSoftLimit = max(1, connectionsPerHost)
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls,
                                                     timeout: .init(connect: .seconds(10)),
                                                     connectionPool: pool)
        configuration.httpVersion = http2 ? .automatic : .http1Only
        // Nudge bootstraps no tracer: skip building a span for every request.
        configuration.tracing.tracer = nil
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// One exchange, bounded by `timeout` as a whole: the status, headers and body, or the error
    /// that ended it (`TimedOut` when the bound did).
    public func exchange(_ request: HTTPClientRequest, on client: HTTPClient) async throws -> (HTTPResponseHead, Data) {
        let timeout = self.timeout
        return try await withTimeout(timeout) {
            try await exchangeUntilHead(request, on: client, largest: Self.largestAnswer)
        }
    }

    /// One exchange whose wait for the response head is bounded by `timeout` (AsyncHTTPClient's
    /// deadline, an event-loop timer), and whose body, of at most `largest` bytes, by the caller:
    /// a push is sent tens of thousands of times a minute, and a timer task of its own for each
    /// would cost more than the push. dispatch bounds each batch's sends as a whole.
    public func exchangeUntilHead(_ request: HTTPClientRequest, on client: HTTPClient,
                                  largest: Int = 64 * 1024) async throws -> (HTTPResponseHead, Data) {
        let response = try await client.execute(request, timeout: TimeAmount(timeout))
        let body = try await response.body.collect(upTo: largest)
        return (HTTPResponseHead(version: response.version, status: response.status, headers: response.headers),
                Data(body.readableBytesView))
    }

    /// `retry-after` in seconds (an integer or a decimal) or as an HTTP date.
    public static func retryAfter(_ headers: HTTPHeaders, now: Date = Date()) -> Duration? {
        guard let value = headers.first(name: "retry-after")?.trimmingCharacters(in: .whitespaces) else { return nil }
        if let seconds = Double(value), seconds >= 0, seconds.isFinite { return .milliseconds(Int64(seconds * 1000)) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: value) else { return nil }
        return .milliseconds(Int64(max(0, date.timeIntervalSince(now)) * 1000))
    }

    /// Why an exchange failed, in an operator's words.
    public static func describe(_ error: any Error) -> String {
        if let error = error as? HTTPClientError {
            switch error {
            case .deadlineExceeded, .readTimeout: return "no answer within the time-out"
            case .connectTimeout: return "the connection timed out"
            case .remoteConnectionClosed: return "the server closed the connection"
            default: return "\(error)"
            }
        }
        if error is TimedOut { return "no answer within the time-out" }
        if let error = error as? NIOSSLError { return "TLS: \(error)" }
        return "\(error)"
    }
}
