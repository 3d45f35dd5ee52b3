import Foundation
import Logging
import NIOHTTP1
import NudgeStandIns
import Synchronization
import Testing

@testable import NudgeCore

private let secret = "sk-ant-test-0000-not-a-real-key"

private func configuration(
    _ server: StandInLLM, provider: LLMConfiguration.Provider = .anthropic,
    timeout: Duration = .seconds(120), retries: Int = 3
) -> LLMConfiguration {
    LLMConfiguration(
        provider: provider, baseURL: provider == .anthropic ? server.baseURL : server.baseURL + "/v1",
        apiKey: secret, model: provider == .anthropic ? LLMConfiguration.defaultAnthropicModel : "local-model",
        timeout: timeout, requestsPerMinute: 1_000, maxRetries: retries,
        initialBackoff: .milliseconds(20), maxBackoff: .milliseconds(100))
}

/// Answers the n-th request (from 0) with `answers[n]`, then with a good reply.
private final class Counter: Sendable {
    private let value = Mutex(0)

    func next() -> Int {
        value.withLock { value in
            defer { value += 1 }
            return value
        }
    }
}

private func scripted(_ answers: [StandInLLM.Answer], latency: Duration = .zero) -> StandInLLM.Script {
    let count = Counter()
    return { _ in
        let index = count.next()
        return (index < answers.count ? answers[index] : .reply(#"{"title": "t", "body": "b"}"#), latency)
    }
}

private func withStandIn<T>(
    record: Bool = true, _ script: @escaping StandInLLM.Script,
    _ body: (StandInLLM) async throws -> T
) async throws -> T {
    let server = try await StandInLLM.start(record: record, script: script)
    do {
        let result = try await body(server)
        await server.shutdown()
        return result
    } catch {
        await server.shutdown()
        throw error
    }
}

private let logger = Logger(label: "test")

@Suite struct LLMClientTests {
    @Test func speaksTheMessagesAPI() async throws {
        try await withStandIn({ _ in (.reply("hello", inputTokens: 321, outputTokens: 12), .zero) }) { server in
            let reply = try await LLMClient.with(configuration(server), concurrency: 1) { try await $0.complete(prompt: "Say hello", logger: logger) }
            #expect(reply.text == "hello")
            #expect(reply.usage == TokenUsage(inputTokens: 321, outputTokens: 12))
            let request = try #require(server.requests.first)
            #expect(request.path == "/v1/messages")
            #expect(request.headers["x-api-key"] == secret)
            #expect(request.headers["anthropic-version"] == "2023-06-01")
            #expect(request.prompt == "Say hello")
            let body = try JSONSerialization.jsonObject(with: Data(request.body.utf8)) as! [String: Any]
            #expect(body["model"] as? String == "claude-haiku-4-5-20251001")
            #expect(body["max_tokens"] as? Int == 150)
        }
    }

    /// The stand-in the demo and the benchmarks run for hours keeps no prompt it answered: a
    /// million pushes' prompts held in memory slowed the million-user benchmark.
    @Test func aStandInThatDoesNotRecordAnswersAndKeepsNothing() async throws {
        try await withStandIn(record: false, { request in (.reply(request.prompt), .zero) }) { server in
            let replies = try await LLMClient.with(configuration(server), concurrency: 1) { client in
                var replies: [String] = []
                for n in 0..<20 { replies.append(try await client.complete(prompt: "prompt \(n)", logger: logger).text) }
                return replies
            }
            #expect(replies == (0..<20).map { "prompt \($0)" })
            #expect(server.requests.isEmpty)
        }
    }

    @Test func speaksOpenAIChatCompletions() async throws {
        try await withStandIn({ _ in (.reply("bonjour", inputTokens: 50, outputTokens: 5), .zero) }) { server in
            let reply = try await LLMClient.with(configuration(server, provider: .openAI), concurrency: 1) {
                try await $0.complete(prompt: "Dis bonjour", logger: logger)
            }
            #expect(reply.text == "bonjour")
            #expect(reply.usage == TokenUsage(inputTokens: 50, outputTokens: 5))
            let request = try #require(server.requests.first)
            #expect(request.path == "/v1/chat/completions")
            #expect(request.headers["authorization"] == "Bearer \(secret)")
            #expect(request.headers["x-api-key"] == nil)
        }
    }

    /// A 429's `retry-after` is waited out on the client's clock, which the test moves as each
    /// wait begins: the retry leaves once exactly that second has passed on it (the backoff, at
    /// most 20 ms here, is shorter; the pace's next turn is held to the same second), whatever
    /// the machine's load.
    @Test func retriesA429AfterItsRetryAfter() async throws {
        try await withStandIn(scripted([.status(429, retryAfter: "1")])) { server in
            let clock = ManualWaitClock()
            let advancing = Task {
                for await deadline in clock.sleepers {
                    let now = clock.now()
                    if deadline > now { clock.advance(by: deadline - now) }
                }
            }
            defer { advancing.cancel() }
            let reply = try await LLMClient.with(configuration(server), concurrency: 1, waitClock: clock) {
                try await $0.complete(prompt: "p", logger: logger)
            }
            #expect(reply.text.contains("title"))
            #expect(server.requests.count == 2)
            #expect(clock.deadlines == [.seconds(1)])
            #expect(clock.now() == .seconds(1))
        }
    }

    @Test func retriesOverloadAndServerErrors() async throws {
        try await withStandIn(scripted([.status(529), .status(503), .status(500), .hangUp])) { server in
            let reply = try await LLMClient.with(configuration(server, retries: 4), concurrency: 1) {
                try await $0.complete(prompt: "p", logger: logger)
            }
            #expect(reply.text.contains("title"))
            #expect(server.requests.count == 5)
        }
    }

    @Test func retriesRequestTimeoutAndGatewayTimeout() async throws {
        try await withStandIn(scripted([.status(408), .status(504)])) { server in
            let reply = try await LLMClient.with(configuration(server, retries: 2), concurrency: 1) {
                try await $0.complete(prompt: "p", logger: logger)
            }
            #expect(reply.text.contains("title"))
            #expect(server.requests.count == 3)
        }
    }

    /// A server that sends the response head and then stalls: the time-out bounds the whole
    /// exchange, body included, and the call is retried. (Unbounded, the call waits for ever.)
    /// The stand-in's stalled body never ends: only the client's own time-out ends the first
    /// attempt. The retry leaves no sooner than that time-out less the first request's way there
    /// (its task started, its connection made: the time-out runs from the call), given a second
    /// of it on a busy machine: a lower bound that a loaded machine cannot break. A client that waited for ever would meet
    /// the test's time limit, far above what a loaded machine takes.
    @Test(.timeLimit(.minutes(3))) func aBodyThatStallsAfterTheHeadTimesOutAndIsRetried() async throws {
        // A time-out that a loaded test machine still answers a loopback reply within.
        try await withStandIn(scripted([.stallAfterHead])) { server in
            let reply = try await LLMClient.with(configuration(server, timeout: .seconds(4), retries: 1), concurrency: 1) {
                try await $0.complete(prompt: "p", logger: logger)
            }
            #expect(reply.text.contains("title"))
            let requests = server.requests
            #expect(requests.count == 2)
            if requests.count == 2 { #expect(requests[0].receivedAt.duration(to: requests[1].receivedAt) >= .seconds(3)) }
        }
        _ = try await withStandIn(scripted([.stallAfterHead, .stallAfterHead])) { server in
            await #expect(throws: LLMError.unreachable("no answer within the time-out", attempts: 2)) {
                try await LLMClient.with(configuration(server, timeout: .seconds(1), retries: 1), concurrency: 1) {
                    try await $0.complete(prompt: "p", logger: logger)
                }
            }
        }
    }

    @Test func givesUpWhenTheRetriesRunOut() async throws {
        try await withStandIn(scripted(Array(repeating: .status(529), count: 10))) { server in
            await #expect(throws: LLMError.status(529, detail: "overloaded_error: stand-in answered 529", attempts: 3)) {
                try await LLMClient.with(configuration(server, retries: 2), concurrency: 1) { try await $0.complete(prompt: "p", logger: logger) }
            }
            #expect(server.requests.count == 3)
        }
    }

    @Test func neverRetriesAnotherClientError() async throws {
        for code in [400, 401, 404] {
            try await withStandIn(scripted([.status(code)])) { server in
                await #expect(throws: LLMError.self) {
                    try await LLMClient.with(configuration(server), concurrency: 1) { try await $0.complete(prompt: "p", logger: logger) }
                }
                #expect(server.requests.count == 1)
            }
        }
    }

    @Test func aMalformedResponseIsNotRetried() async throws {
        try await withStandIn(scripted([.malformedBody])) { server in
            await #expect(throws: LLMError.malformedResponse("the response is not a Messages API message")) {
                try await LLMClient.with(configuration(server), concurrency: 1) { try await $0.complete(prompt: "p", logger: logger) }
            }
            #expect(server.requests.count == 1)
        }
    }

    @Test func aSlowAnswerTimesOutAndIsRetried() async throws {
        try await withStandIn(scripted([], latency: .seconds(3))) { server in
            do {
                _ = try await LLMClient.with(configuration(server, timeout: .seconds(1), retries: 1), concurrency: 1) {
                    try await $0.complete(prompt: "p", logger: logger)
                }
                Issue.record("a reply slower than the time-out was accepted")
            } catch let error as LLMError {
                #expect(error == .unreachable("no answer within the time-out", attempts: 2))
            }
            #expect(server.requests.count == 2)
        }
    }

    @Test func errorsNeverCarryTheKey() async throws {
        try await withStandIn(scripted([.status(401)])) { server in
            do {
                _ = try await LLMClient.with(configuration(server), concurrency: 1) { try await $0.complete(prompt: "p", logger: logger) }
                Issue.record("a 401 was taken for a reply")
            } catch {
                #expect("\(error)" == "the LLM answered HTTP 401 (authentication_error)")
            }
        }
        // A provider's message that quotes part of a key loses it.
        let body = Data(#"{"error": {"type": "invalid_request_error", "message": "Incorrect key sk-proj-abc123 provided"}}"#.utf8)
        #expect(LLMWireFormat.errorDescription(from: body, status: 400) == "invalid_request_error: Incorrect key [redacted] provided")
        #expect(throws: NudgeError.self) { try LLMConfiguration(environment: Environment([:])) }
        #expect(throws: NudgeError.self) { try LLMConfiguration(environment: Environment(["NUDGE_LLM_PROVIDER": "openai"])) }
        #expect(throws: NudgeError.self) { try LLMConfiguration(environment: Environment(["NUDGE_LLM_PROVIDER": "gemini"])) }
        let openAI = try LLMConfiguration(
            environment: Environment([
                "NUDGE_LLM_PROVIDER": "openai", "OPENAI_BASE_URL": "http://127.0.0.1:8080/v1/", "NUDGE_LLM_MODEL": "llama",
                "NUDGE_LLM_REQUESTS_PER_MINUTE": "600",
            ]))
        #expect(openAI.baseURL == "http://127.0.0.1:8080/v1")
        #expect(openAI.apiKey == nil)
        #expect(openAI.requestsPerMinute == 600)
    }

    @Test func readsRetryAfterInSecondsOrAsADate() {
        var headers = HTTPHeaders()
        headers.add(name: "retry-after", value: "2.5")
        #expect(ProviderHTTP.retryAfter(headers) == .milliseconds(2500))
        headers.replaceOrAdd(name: "retry-after", value: "Wed, 21 Oct 2026 07:28:30 GMT")
        #expect(ProviderHTTP.retryAfter(headers, now: ISO8601DateFormatter().date(from: "2026-10-21T07:28:00Z")!) == .seconds(30))
    }
}

@Suite struct LLMMeterTests {
    private let user = UUID()

    @Test func theCallBudgetStopsTheRunAtItsLimit() async throws {
        let meter = LLMMeter(budget: LLMBudget(maxCalls: 2))
        try await meter.admit()
        try await meter.admit()
        await #expect(throws: RunStop.self) { try await meter.admit() }
        #expect(await meter.calls == 2)
    }

    @Test func theTokenBudgetCountsInputAndOutputAndEachResponseIsKeptOnceForTheLedger() async throws {
        let meter = LLMMeter(budget: LLMBudget(maxTokens: 300))
        try await meter.admit()
        await meter.record(.init(userID: user, model: "m", usage: TokenUsage(inputTokens: 200, outputTokens: 40), outcome: "used"))
        try await meter.admit()
        await meter.record(.init(userID: user, model: "m", usage: TokenUsage(inputTokens: 50, outputTokens: 10), outcome: "used"))
        do {
            try await meter.admit()
            Issue.record("a run past its token budget made another call")
        } catch {
            #expect(error.description == "the run's LLM budget of 300 tokens (--max-llm-tokens) is spent")
        }
        #expect(await meter.drain().count == 2)
        #expect(await meter.drain().isEmpty)
    }
}
