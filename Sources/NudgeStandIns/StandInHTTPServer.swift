import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// A small HTTP/1.1 server on loopback for the stand-ins that speak plain HTTP (the LLM, FCM and
/// its token endpoint): each request, read whole, goes to `handler`, whose reply is written back.
struct StandInHTTPServer: Sendable {
    struct Request: Sendable {
        let method: HTTPMethod
        let path: String
        /// Lower-cased names.
        let headers: [String: String]
        let body: Data
        let receivedAt: ContinuousClock.Instant
    }

    enum Reply: Sendable {
        case respond(status: Int, headers: [(String, String)], body: Data)
        /// Close the connection without answering.
        case hangUp
        /// Send a 200's head and the start of a body, then nothing more.
        case stallAfterHead
    }

    let port: Int
    private let task: Task<Void, Never>

    static func start(port: Int, handler: @escaping @Sendable (Request) async -> (reply: Reply, latency: Duration)) async throws
        -> StandInHTTPServer {
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
        let task = Task {
            await withDiscardingTaskGroup { group in
                do {
                    try await server.executeThenClose { connections in
                        for try await connection in connections {
                            group.addTask { await serve(connection, handler: handler) }
                        }
                    }
                } catch {
                    // The server channel closes when the stand-in is shut down.
                }
            }
        }
        return StandInHTTPServer(port: boundPort, task: task)
    }

    func shutdown() async {
        task.cancel()
        await task.value
    }

    private static func serve(_ connection: NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>,
                              handler: @escaping @Sendable (Request) async -> (reply: Reply, latency: Duration)) async {
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
                    let request = Request(method: requestHead.method, path: requestHead.uri, headers: headers,
                                          body: Data(body.readableBytesView), receivedAt: .now)
                    let (reply, latency) = await handler(request)
                    if latency > .zero { try await Task.sleep(for: latency) }
                    switch reply {
                    case .hangUp:
                        return
                    case .stallAfterHead:
                        var stalled = HTTPResponseHead(version: requestHead.version, status: .ok)
                        stalled.headers.add(name: "content-type", value: "application/json")
                        stalled.headers.add(name: "content-length", value: "4096")
                        try await outbound.write(.head(stalled))
                        try await outbound.write(.body(.byteBuffer(ByteBuffer(string: "{\"id\": \"msg_"))))
                        try await Task.sleep(for: .seconds(3600))
                        return
                    case .respond(let status, let extra, let data):
                        var responseHead = HTTPResponseHead(version: requestHead.version, status: HTTPResponseStatus(statusCode: status))
                        responseHead.headers.add(name: "content-type", value: "application/json")
                        responseHead.headers.add(name: "content-length", value: String(data.count))
                        for (name, value) in extra { responseHead.headers.add(name: name, value: value) }
                        try await outbound.write(.head(responseHead))
                        try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: data))))
                        try await outbound.write(.end(nil))
                    }
                }
            }
        }
    }
}

/// JSON text of an object, keys sorted.
func standInJSON(_ object: Any) -> Data {
    (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
}
