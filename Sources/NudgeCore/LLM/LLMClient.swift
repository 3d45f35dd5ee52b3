import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// Why an LLM call gave no usable reply. The words never carry the API key or the prompt.
public enum LLMError: Error, CustomStringConvertible, Sendable, Equatable {
    /// The provider answered with an error status it does not want retried, or kept answering
    /// with a retryable one until the retries ran out.
    case status(Int, detail: String?, attempts: Int)
    /// No answer: the connection failed or the request timed out, on every attempt.
    case unreachable(String, attempts: Int)
    case malformedResponse(String)

    public var description: String {
        switch self {
        case .status(let code, let detail, let attempts):
            "the LLM answered HTTP \(code)" + (detail.map { " (\($0))" } ?? "") + Self.after(attempts)
        case .unreachable(let why, let attempts):
            "the LLM could not be reached: \(why)" + Self.after(attempts)
        case .malformedResponse(let why):
            "the LLM's response could not be read: \(why)"
        }
    }

    private static func after(_ attempts: Int) -> String {
        attempts > 1 ? " after \(attempts) attempts" : ""
    }
}

/// Calls the configured LLM over HTTP: one request per prompt, each attempt on its turn under
/// `NUDGE_LLM_REQUESTS_PER_MINUTE` (shared by every process through the database, `sharedPace`),
/// bounded as a whole (connection, head and body), retried with exponential backoff and jitter on
/// 408, 429, 500, 502, 503, 504, 529, time-outs and lost connections (honouring `retry-after`),
/// never on another 4xx.
public final class LLMClient: Sendable {
    public let configuration: LLMConfiguration
    private let httpClient: HTTPClient
    /// This process's own pace, for a client used without a database.
    private let localPace: LocalPace
    /// What a call's waits (its turn, the time before a retry) are measured on.
    private let waitClock: any WaitClock

    /// The longest a call waits for its turn under the pace.
    static let longestWaitForTurn: Duration = .seconds(120)

    static let retryableStatuses: Set<Int> = [408, 429, 500, 502, 503, 504, 529]
    /// A `retry-after` longer than this fails the call instead of stalling the run.
    static let longestRetryAfter: Duration = .seconds(60)

    private init(configuration: LLMConfiguration, concurrency: Int, waitClock: any WaitClock) throws(NudgeError) {
        self.configuration = configuration
        self.waitClock = waitClock
        httpClient = try ProviderHTTP(extraTrustedRoots: configuration.extraTrustedRoots, timeout: configuration.timeout)
            .makeClient(http2: false, connectionsPerHost: max(8, concurrency))
        localPace = LocalPace(interval: Self.paceInterval(requestsPerMinute: configuration.requestsPerMinute), clock: waitClock)
    }

    /// How much more unevenly late than their slots two requests may reach the provider: the
    /// slots of `requestsPerMinute` + 1 requests span 60.25 s, so that jitter in the time requests
    /// take to arrive cannot put one more than the limit inside one of the provider's minutes.
    static let arrivalAllowance: Duration = .milliseconds(250)

    /// The time between two of the LLM's slots at `requestsPerMinute`.
    static func paceInterval(requestsPerMinute: Int) -> Duration {
        PaceSpacing.interval(limit: requestsPerMinute, per: .seconds(60), allowance: arrivalAllowance)
    }

    /// The pace every process shares through `database` (the provider's row of `provider_pace`:
    /// `anthropic` or `openai`): the rate is the account's, however many shards and runs call it.
    public func sharedPace(_ database: Database, logger: Logger) -> SharedPace {
        SharedPace(provider: configuration.provider.rawValue, interval: localPace.interval, database: database, logger: logger)
    }

    /// A client for the length of `body`, shut down on every path out of it, whose waits are
    /// measured on `waitClock` (a run's: `RunOptions.waitClock`).
    public static func with<Result: Sendable>(
        _ configuration: LLMConfiguration, concurrency: Int, waitClock: any WaitClock = SystemWaitClock(),
        _ body: (LLMClient) async throws -> Result
    ) async throws -> Result {
        let client = try LLMClient(configuration: configuration, concurrency: concurrency, waitClock: waitClock)
        let result: Result
        do {
            result = try await body(client)
        } catch {
            try? await client.httpClient.shutdown()
            throw error
        }
        try await client.httpClient.shutdown()
        return result
    }

    /// The model's reply to `prompt`. Each attempt waits for its turn under `pace` (a run's:
    /// `sharedPace`; without one, this process's own); a 429's `retry-after` holds every request
    /// of that pace.
    public func complete(prompt: String, pace: (any ProviderPace)? = nil, logger: Logger) async throws -> LLMReply {
        let pace = pace ?? localPace
        let wire = LLMWireFormat.request(prompt: prompt, configuration: configuration)
        var request = HTTPClientRequest(url: configuration.baseURL + wire.path)
        request.method = .POST
        for (name, value) in wire.headers { request.headers.add(name: name, value: value) }
        request.body = .bytes(ByteBuffer(bytes: wire.body))

        var attempt = 0
        while true {
            attempt += 1
            // A turn further than that away (every shard's calls queued before it) is not waited
            // for: the user is tried again within their window.
            guard let wait = try await pace.reserve(within: Self.longestWaitForTurn) else {
                throw LLMError.status(
                    429, detail: "no turn under the shared pace (NUDGE_LLM_REQUESTS_PER_MINUTE) within \(Self.longestWaitForTurn)",
                    attempts: attempt - 1)
            }
            if wait > .zero { try await waitClock.sleep(for: wait) }
            let failure: LLMError
            var retryAfter: Duration?
            switch try await send(request, attempt: attempt) {
            case .success(let reply):
                return reply
            case .failure(.retryable(let error, let after)):
                failure = error
                retryAfter = after
            case .failure(.final(let error)):
                throw error
            }
            guard attempt <= configuration.maxRetries else { throw failure }
            if let retryAfter, retryAfter > Self.longestRetryAfter {
                throw LLMError.status(
                    Self.code(of: failure), detail: "asked to retry after \(retryAfter), longer than the \(Self.longestRetryAfter) Nudge waits",
                    attempts: attempt)
            }
            let delay = max(retryAfter ?? .zero, backoff(afterAttempt: attempt))
            if let retryAfter, Self.code(of: failure) == 429 {
                // The account is over its limit: every call waits, not just this one, in every
                // process that shares the pace (a hold that cannot be written, logged, still
                // leaves this call its own wait).
                try? await pace.hold(for: retryAfter)
            }
            logger.warning(
                "LLM call failed; retrying",
                metadata: [
                    LogKey.reason: "\(failure)", "nudge.llm_attempt": "\(attempt)", "nudge.llm_retry_in": "\(delay)",
                ])
            try await waitClock.sleep(for: delay)
        }
    }

    private enum AttemptFailure: Error {
        case retryable(LLMError, retryAfter: Duration?)
        case final(LLMError)
    }

    /// One attempt: the reply, or why not and whether another attempt may help.
    private func send(_ request: HTTPClientRequest, attempt: Int) async throws -> Result<LLMReply, AttemptFailure> {
        let response: HTTPClientResponse
        let body: Data
        do {
            // AsyncHTTPClient's own deadline ends when the response head arrives: the time-out
            // bounds the whole exchange, so a server that stalls mid-body cannot hold the run.
            let httpClient = self.httpClient
            let timeout = configuration.timeout
            (response, body) = try await withTimeout(timeout) {
                let response = try await httpClient.execute(request, timeout: TimeAmount(timeout))
                return (response, Data(try await response.body.collect(upTo: 1 << 20).readableBytesView))
            }
        } catch  where Task.isCancelled {
            throw CancellationError()
        } catch {
            return .failure(.retryable(.unreachable(Self.describe(error), attempts: attempt), retryAfter: nil))
        }
        let status = Int(response.status.code)
        guard (200..<300).contains(status) else {
            let error = LLMError.status(status, detail: LLMWireFormat.errorDescription(from: body, status: status), attempts: attempt)
            return .failure(
                Self.retryableStatuses.contains(status)
                    ? .retryable(error, retryAfter: ProviderHTTP.retryAfter(response.headers)) : .final(error))
        }
        do {
            return .success(try LLMWireFormat.reply(from: body, provider: configuration.provider))
        } catch {
            return .failure(.final(error))
        }
    }

    /// Exponential backoff with jitter: half to all of `initial × 2^(attempt−1)`, capped.
    func backoff(afterAttempt attempt: Int) -> Duration {
        let ceiling = min(configuration.maxBackoff, configuration.initialBackoff * (1 << min(attempt - 1, 20)))
        return ceiling * Double.random(in: 0.5...1.0)
    }

    private static func code(of error: LLMError) -> Int {
        if case .status(let code, _, _) = error { return code }
        return 0
    }

    private static func describe(_ error: any Error) -> String {
        ProviderHTTP.describe(error)
    }
}

extension TimeAmount {
    init(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        self = .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}
