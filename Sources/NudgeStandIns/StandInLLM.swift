import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
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

    public let port: Int
    private let log: RequestLog
    private let serverTask: Task<Void, Never>

    /// The URL to give as `ANTHROPIC_BASE_URL`; `OPENAI_BASE_URL` is this with `/v1`.
    public var baseURL: String { "http://127.0.0.1:\(port)" }

    /// Every request received so far, in order of arrival.
    public var requests: [Request] { log.requests.withLock { $0 } }

    private init(port: Int, log: RequestLog, task: Task<Void, Never>) {
        self.port = port
        self.log = log
        self.serverTask = task
    }

    public static func start(port: Int = 0, script: @escaping Script) async throws -> StandInLLM {
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .bind(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    return try NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>(wrappingChannelSynchronously: channel)
                }
            }
        let boundPort = server.channel.localAddress?.port ?? port
        let log = RequestLog()
        let task = Task {
            await withDiscardingTaskGroup { group in
                do {
                    try await server.executeThenClose { connections in
                        for try await connection in connections {
                            group.addTask { await serve(connection, script: script, log: log) }
                        }
                    }
                } catch {
                    // The server channel closes when the stand-in is shut down.
                }
            }
        }
        return StandInLLM(port: boundPort, log: log, task: task)
    }

    /// Stops listening and drops open connections.
    public func shutdown() async {
        serverTask.cancel()
        await serverTask.value
    }

    private static func serve(_ connection: NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>,
                              script: Script, log: RequestLog) async {
        try? await connection.executeThenClose { inbound, outbound in
            var head: HTTPRequestHead?
            var body = ByteBuffer()
            for try await part in inbound {
                switch part {
                case .head(let requestHead):
                    head = requestHead
                    body.clear()
                case .body(var chunk):
                    body.writeBuffer(&chunk)
                case .end:
                    guard let requestHead = head else { continue }
                    var headers: [String: String] = [:]
                    for (name, value) in requestHead.headers { headers[name.lowercased()] = value }
                    let request = Request(path: requestHead.uri, headers: headers, body: String(buffer: body),
                                          receivedAt: .now)
                    log.requests.withLock { $0.append(request) }
                    let (answer, latency) = script(request)
                    if latency > .zero { try await Task.sleep(for: latency) }
                    if case .stallAfterHead = answer {
                        var stalled = HTTPResponseHead(version: requestHead.version, status: .ok)
                        stalled.headers.add(name: "content-type", value: "application/json")
                        stalled.headers.add(name: "content-length", value: "4096")
                        try await outbound.write(.head(stalled))
                        try await outbound.write(.body(.byteBuffer(ByteBuffer(string: "{\"id\": \"msg_"))))
                        try await Task.sleep(for: .seconds(3600))
                        return
                    }
                    guard let response = Self.response(to: request, answer: answer) else { return }
                    var responseHead = HTTPResponseHead(version: requestHead.version, status: response.status)
                    responseHead.headers.add(name: "content-type", value: "application/json")
                    responseHead.headers.add(name: "content-length", value: String(response.body.utf8.count))
                    if let retryAfter = response.retryAfter { responseHead.headers.add(name: "retry-after", value: retryAfter) }
                    try await outbound.write(.head(responseHead))
                    try await outbound.write(.body(.byteBuffer(ByteBuffer(string: response.body))))
                    try await outbound.write(.end(nil))
                }
            }
        }
    }

    private static func response(to request: Request, answer: Answer) -> (status: HTTPResponseStatus, body: String, retryAfter: String?)? {
        let anthropic = request.path.hasSuffix("/messages")
        switch answer {
        case .hangUp, .stallAfterHead:
            return nil
        case .malformedBody:
            return (.ok, "<html>upstream proxy error</html>", nil)
        case .status(let code, let retryAfter):
            let kind = switch code {
            case 429: "rate_limit_error"
            case 529: "overloaded_error"
            case 400: "invalid_request_error"
            case 401: "authentication_error"
            default: "api_error"
            }
            let body = anthropic
                ? json(["type": "error", "error": ["type": kind, "message": "stand-in answered \(code)"]])
                : json(["error": ["type": kind, "message": "stand-in answered \(code)", "code": String(code)]])
            return (HTTPResponseStatus(statusCode: code), body, retryAfter)
        case .reply(let text, let input, let output):
            let body = anthropic
                ? json(["id": "msg_standin", "type": "message", "role": "assistant", "model": "claude-haiku-4-5-20251001",
                        "content": [["type": "text", "text": text]], "stop_reason": "end_turn", "stop_sequence": NSNull(),
                        "usage": ["input_tokens": input, "output_tokens": output]])
                : json(["id": "chatcmpl-standin", "object": "chat.completion", "created": 0, "model": "stand-in",
                        "choices": [["index": 0, "message": ["role": "assistant", "content": text], "finish_reason": "stop"]],
                        "usage": ["prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output]])
            return (.ok, body, nil)
        }
    }

    private static func json(_ object: Any) -> String {
        String(decoding: try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
    }
}

private final class RequestLog: Sendable {
    let requests = Mutex<[StandInLLM.Request]>([])
}
