import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOSSL
import Synchronization

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
        var configuration = HTTPClient.Configuration(
            tlsConfiguration: tls,
            timeout: .init(connect: .seconds(10)),
            connectionPool: pool)
        configuration.httpVersion = http2 ? .automatic : .http1Only
        // A provider answers where it was asked: a redirect is an answer, never followed (it would
        // carry the request's key to wherever it points).
        configuration.redirectConfiguration = .disallow
        // Nudge bootstraps no tracer: skip building a span for every request.
        configuration.tracing.tracer = nil
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// A provider's address from `name` (tests and proxies set one), or `value`: https, since the
    /// request carries a key; plain http only to this machine (a stand-in, a local model server).
    public static func baseURL(_ environment: Environment, _ name: String, default value: String) throws(NudgeError) -> String {
        var text = environment[name].flatMap { $0.isEmpty ? nil : $0 } ?? value
        while text.hasSuffix("/") { text.removeLast() }
        try check(text, name: name)
        return text
    }

    /// Refuses an address that is not https, unless it is plain http to this machine.
    public static func check(_ text: String, name: String) throws(NudgeError) {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), let host = url.host, !host.isEmpty,
            scheme == "https" || (scheme == "http" && DatabaseURL.isLoopback(host))
        else {
            throw NudgeError(
                .configuration,
                """
                \(name) must be an https URL (plain http only to this machine: 127.0.0.1, localhost, ::1), not '\(text)'
                """)
        }
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
    public func exchangeUntilHead(
        _ request: HTTPClientRequest, on client: HTTPClient,
        largest: Int = 64 * 1024
    ) async throws -> (HTTPResponseHead, Data) {
        let response = try await client.execute(request, timeout: TimeAmount(timeout))
        let body = try await response.body.collect(upTo: largest)
        return (
            HTTPResponseHead(version: response.version, status: response.status, headers: response.headers),
            Data(body.readableBytesView)
        )
    }

    /// How an exchange made in a provider's slot ended.
    public enum Exchanged: Sendable {
        /// The provider's answer.
        case answered(HTTPResponseHead, Data)
        /// No answer, and why.
        case failed(ExchangeFailure)
        /// Kept from leaving once it had its slot: what `unless` said.
        case kept(SendResult)
        /// The task was cancelled while it waited for a slot: the request never left.
        case neverLeft
    }

    /// `exchangeUntilHead` once `slots` has a place for it, unless `unless`, asked then, says
    /// otherwise; the request made (`building`) only then, so that what it says about time is
    /// true when it leaves.
    public func exchangeUntilHead(
        on client: HTTPClient, in slots: ProviderSlots,
        unless: @Sendable () -> SendResult? = { nil },
        building: @Sendable () -> HTTPClientRequest
    ) async -> Exchanged {
        let exchanged = await slots.run { () async -> Exchanged in
            if let kept = unless() { return .kept(kept) }
            do {
                let (head, body) = try await exchangeUntilHead(building(), on: client)
                return .answered(head, body)
            } catch {
                return .failed(ExchangeFailure(description: Self.describe(error)))
            }
        }
        return exchanged ?? .neverLeft
    }

    /// A harmless request (one that sends nobody anything) that tells whether `provider` answers
    /// again, its answer read by `reading` (by default: any answer but a 5xx or a 408 says it
    /// does, whatever it says of the request). Its wait for a slot and its exchange are bounded
    /// together, by the time-out and as long again.
    public func probe(
        _ provider: String, on client: HTTPClient, in slots: ProviderSlots,
        reading: @escaping @Sendable (Int, Data) -> ProbeAnswer? = { _, _ in nil },
        building: @escaping @Sendable () -> HTTPClientRequest
    ) async -> ProbeAnswer {
        let timeout = self.timeout
        do {
            let answered = try await withTimeout(timeout * 2) {
                await slots.run { () async -> ProbeAnswer in
                    do {
                        let (head, body) = try await exchange(building(), on: client)
                        let status = Int(head.status.code)
                        return reading(status, body) ?? ProbeAnswer(provider, status: status)
                    } catch {
                        return .unavailable("\(provider): \(Self.describe(error))")
                    }
                }
            }
            return answered ?? .notAsked("\(provider): no connection was free for the probe")
        } catch {
            return .unavailable("\(provider): the probe had no answer within \(timeout * 2), its wait for a connection included")
        }
    }

    /// Why an exchange had no answer, in an operator's words.
    public struct ExchangeFailure: Error, Sendable, CustomStringConvertible {
        public let description: String
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

    /// A request cut off by its batch's bound: the answer had begun and did not end in time.
    static let stalled = "no whole answer within the batch's time bound (it stalled)"

    /// Why an exchange failed, in an operator's words.
    public static func describe(_ error: any Error) -> String {
        if let error = error as? HTTPClientError {
            switch error {
            case .deadlineExceeded, .readTimeout: return "no answer within the time-out"
            case .connectTimeout: return "the connection timed out"
            case .remoteConnectionClosed: return "the server closed the connection"
            case .cancelled: return Self.stalled
            default: return "\(error)"
            }
        }
        if error is TimedOut { return "no answer within the time-out" }
        if error is CancellationError { return Self.stalled }
        if let error = error as? NIOSSLError { return "TLS: \(error)" }
        return "\(error)"
    }
}

/// At most `limit` requests to one provider at once: what its connection pool carries. A request
/// waits here for its turn, outside its exchange's time-out (a request still queued has not
/// left, and its wait is no answer from the provider), and gives up when its task is cancelled
/// (the batch's bound), having sent nothing.
public final class ProviderSlots: Sendable {
    public let limit: Int
    private struct State {
        var free: Int
        var waiters: [(id: Int, continuation: CheckedContinuation<Bool, Never>)] = []
        /// Waits begun and not yet queued, and those of them cancelled meanwhile.
        var starting: Set<Int> = []
        var cancelled: Set<Int> = []
        var nextID = 0
    }
    private let state: Mutex<State>

    public init(limit: Int) {
        self.limit = max(1, limit)
        state = Mutex(State(free: max(1, limit)))
    }

    /// Runs `body` in a slot; nil, without running it, when the task was cancelled first.
    public func run<T: Sendable>(_ body: () async -> T) async -> T? {
        guard await acquire() else { return nil }
        defer { release() }
        // Cancelled as it got its slot: nothing is sent.
        if Task.isCancelled { return nil }
        return await body()
    }

    private func acquire() async -> Bool {
        let id = state.withLock { state in
            defer { state.nextID += 1 }
            state.starting.insert(state.nextID)
            return state.nextID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let now: Bool? = state.withLock { state in
                    state.starting.remove(id)
                    if state.cancelled.remove(id) != nil { return false }
                    if state.free > 0 {
                        state.free -= 1
                        return true
                    }
                    state.waiters.append((id, continuation))
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
        } onCancel: {
            let waiting: CheckedContinuation<Bool, Never>? = state.withLock { state in
                if let index = state.waiters.firstIndex(where: { $0.id == id }) {
                    return state.waiters.remove(at: index).continuation
                }
                if state.starting.contains(id) { state.cancelled.insert(id) }
                return nil
            }
            waiting?.resume(returning: false)
        }
    }

    private func release() {
        let next: CheckedContinuation<Bool, Never>? = state.withLock { state in
            guard !state.waiters.isEmpty else {
                state.free += 1
                return nil
            }
            return state.waiters.removeFirst().continuation
        }
        next?.resume(returning: true)
    }
}

/// What a harmless probe learnt of a provider found down (`ProviderHTTP.probe`).
public enum ProbeAnswer: Sendable, Equatable {
    /// It answered (any status but a 5xx or a 408): it is up again.
    case answered(String)
    /// It answered by refusing Nudge's configuration (a key, an account, a project): it is
    /// paused, as a send refused so would pause it.
    case refused(String)
    /// A 5xx, a 408, no answer within the time-out, a refused connection: still down.
    case unavailable(String)
    /// It was not asked (no connection, no turn under the pace): nothing learnt.
    case notAsked(String)

    /// An HTTP answer's meaning: a 5xx is no answer about anything.
    public init(_ provider: String, status: Int) {
        self = status >= 500 || status == 408 ? .unavailable("\(provider) answered \(status)") : .answered("\(provider) answered \(status)")
    }

    public var description: String {
        switch self {
        case .answered(let why), .refused(let why), .unavailable(let why), .notAsked(let why): why
        }
    }
}
