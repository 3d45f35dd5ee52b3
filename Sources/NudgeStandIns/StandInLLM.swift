import Foundation
import Synchronization

/// A local server that speaks the LLM wire formats Nudge uses: the Anthropic Messages API
/// (`POST /v1/messages`) and OpenAI chat completions (`POST /v1/chat/completions`). The tests
/// script it to answer each request as they need (a reply, a latency, an error status); the demo
/// uses it, with canned copy, when no real LLM is configured.
public final class StandInLLM: Sendable {
    /// One request as the stand-in received it.
    public struct Request: Sendable {
        public let path: String
        public let headers: [String: String]
        public let body: String
        public let receivedAt: ContinuousClock.Instant

        /// The prompt: the content of the request's last message.
        public var prompt: String {
            struct Body: Decodable {
                struct Message: Decodable { let content: String }
                let messages: [Message]
            }
            return (try? JSONDecoder().decode(Body.self, from: Data(body.utf8)))?.messages.last?.content ?? ""
        }
    }

    /// How to answer one request.
    public enum Answer: Sendable {
        /// A well-formed response whose text is `text`.
        case reply(String, inputTokens: Int = 120, outputTokens: Int = 40)
        /// An error status with the API's error body, and optionally a `retry-after` header.
        case status(Int, retryAfter: String? = nil)
        /// A 200 whose body is not the API's JSON.
        case malformedBody
        /// Close the connection without answering.
        case hangUp
        /// Send a 200's head, then nothing more: a server that stalls mid-body.
        case stallAfterHead
    }

    public typealias Script = @Sendable (Request) -> (answer: Answer, latency: Duration)

    private let server: StandInHTTPServer
    /// One more each time a request has been recorded (its answer is then on its way): what a
    /// test waits on.
    public var changes: Changes { server.changes }
    private let log: RequestLog

    public var port: Int { server.port }

    /// The URL to give as `ANTHROPIC_BASE_URL`; `OPENAI_BASE_URL` is this with `/v1`.
    public var baseURL: String { "http://127.0.0.1:\(port)" }

    /// Every request received so far, in order of arrival (none when started with `record: false`).
    public var requests: [Request] { log.requests.withLock { $0 } }

    private init(server: StandInHTTPServer, log: RequestLog) {
        self.server = server
        self.log = log
    }

    /// Starts a stand-in that answers each request as `script` says. `record: false` keeps no
    /// request (`requests` stays empty): a stand-in that serves for hours (the demo, the
    /// benchmarks) would otherwise hold every prompt it was sent, gigabytes at a million users.
    public static func start(port: Int = 0, record: Bool = true, script: @escaping Script) async throws -> StandInLLM {
        let log = RequestLog()
        let server = try await StandInHTTPServer.start(port: port) { http in
            let request = Request(
                path: http.path, headers: http.headers, body: String(decoding: http.body, as: UTF8.self),
                receivedAt: http.receivedAt)
            if record { log.requests.withLock { $0.append(request) } }
            let (answer, latency) = script(request)
            return (reply(to: request, answer: answer), latency)
        }
        return StandInLLM(server: server, log: log)
    }

    /// Stops listening and drops open connections.
    public func shutdown() async {
        await server.shutdown()
    }

    private static func reply(to request: Request, answer: Answer) -> StandInHTTPServer.Reply {
        let anthropic = request.path.hasSuffix("/messages")
        switch answer {
        case .hangUp:
            return .hangUp
        case .stallAfterHead:
            return .stallAfterHead
        case .malformedBody:
            return .respond(status: 200, headers: [], body: Data("<html>upstream proxy error</html>".utf8))
        case .status(let code, let retryAfter):
            let kind =
                switch code {
                case 429: "rate_limit_error"
                case 529: "overloaded_error"
                case 400: "invalid_request_error"
                case 401: "authentication_error"
                default: "api_error"
                }
            let body =
                anthropic
                ? standInJSON(["type": "error", "error": ["type": kind, "message": "stand-in answered \(code)"]])
                : standInJSON(["error": ["type": kind, "message": "stand-in answered \(code)", "code": String(code)]])
            return .respond(status: code, headers: retryAfter.map { [("retry-after", $0)] } ?? [], body: body)
        case .reply(let text, let input, let output):
            let body =
                anthropic
                ? standInJSON([
                    "id": "msg_standin", "type": "message", "role": "assistant", "model": "claude-haiku-4-5-20251001",
                    "content": [["type": "text", "text": text]], "stop_reason": "end_turn", "stop_sequence": NSNull(),
                    "usage": ["input_tokens": input, "output_tokens": output],
                ])
                : standInJSON([
                    "id": "chatcmpl-standin", "object": "chat.completion", "created": 0, "model": "stand-in",
                    "choices": [["index": 0, "message": ["role": "assistant", "content": text], "finish_reason": "stop"]],
                    "usage": ["prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output],
                ])
            return .respond(status: 200, headers: [], body: body)
        }
    }
}

private final class RequestLog: Sendable {
    let requests = Mutex<[StandInLLM.Request]>([])
}
