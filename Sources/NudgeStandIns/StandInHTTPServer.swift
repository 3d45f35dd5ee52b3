import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// The event loops every stand-in answers on, apart from the ones Nudge's HTTP clients and
/// database pools use in a test's process: a test's stand-in is never slowed by the load it is
/// answering, nor that load by a script that takes its time.
///
/// A stand-in's script (what it answers to each request) runs off these loops, on a queue of
/// its stand-in's own (`ScriptQueue`), in the order the requests came: a script that waits (a
/// test's that changes the database while a request is on the wire) holds up only its own
/// stand-in, never the others' answers. A stand-in process for the benchmarks, whose scripts
/// answer at once, runs them on the loops instead (`scriptsOnTheLoops()`).
public enum StandInLoops {
    public static let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)

    private static let onTheLoops = Atomic(false)

    /// From now on, the stand-ins started run their scripts on the event loops, without a hop.
    public static func scriptsOnTheLoops() { onTheLoops.store(true, ordering: .relaxed) }

    /// Whether the caller is a stand-in's script, running on its stand-in's queue.
    public static var isScript: Bool { ScriptQueue.isCurrent }

    /// Where a new stand-in runs its scripts: a queue of its own, or its event loop.
    static func scriptQueue(_ name: String) -> ScriptQueue {
        ScriptQueue(onTheLoops.load(ordering: .relaxed) ? nil : name)
    }
}

/// Where one stand-in's scripts run, one at a time, in the order they came: a queue of its own,
/// or (no name) the event loop the request came on.
struct ScriptQueue: Sendable {
    private let queue: DispatchQueue?
    /// Marks the queues' threads, for `isCurrent`.
    private static let key = DispatchSpecificKey<Bool>()

    init(_ name: String?) {
        queue = name.map { DispatchQueue(label: "stand-in scripts: \($0)") }
        queue?.setSpecific(key: Self.key, value: true)
    }

    /// `script`'s answer, handed to `answer` on `eventLoop`, the loop the caller is on.
    func run<T: Sendable>(_ script: @escaping @Sendable () -> T, answer: @escaping @Sendable (T) -> Void, on eventLoop: any EventLoop) {
        guard let queue else {
            answer(script())
            return
        }
        queue.async {
            let value = script()
            eventLoop.execute { answer(value) }
        }
    }

    /// Whether the caller is a stand-in's script, running on its queue.
    static var isCurrent: Bool { DispatchQueue.getSpecific(key: key) ?? false }
}

/// A small HTTP/1.1 server on loopback for the stand-ins that speak plain HTTP (the LLM, FCM and
/// its token endpoint): each request, read whole, goes to `handler`, whose reply is written back
/// after its latency. It runs on the stand-ins' own event loops (`StandInLoops`), never on
/// Swift's cooperative threads nor the loops Nudge's clients use in the same process.
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
        /// Keep the connection and never answer.
        case silence
        /// Send a 200's head and the start of a body, then nothing more.
        case stallAfterHead
    }

    typealias Handler = @Sendable (Request) -> (reply: Reply, latency: Duration)

    let port: Int
    /// One more each time a request has been handled (its handler ran, so what it records is
    /// there): what a test waits on.
    let changes: Changes
    private let channel: any Channel

    static func start(port: Int, handler: @escaping Handler) async throws -> StandInHTTPServer {
        let scripts = StandInLoops.scriptQueue("HTTP \(port)")
        let changes = Changes()
        let channel = try await ServerBootstrap(group: StandInLoops.group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(StandInHTTPHandler(handler: handler, scripts: scripts, changes: changes))
                }
            }
            .bind(host: "127.0.0.1", port: port).get()
        return StandInHTTPServer(port: channel.localAddress?.port ?? port, changes: changes, channel: channel)
    }

    func shutdown() async {
        try? await channel.close()
    }
}

private final class StandInHTTPHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let handler: StandInHTTPServer.Handler
    private let scripts: ScriptQueue
    private let changes: Changes
    private var head: HTTPRequestHead?
    private var body = ByteBuffer()

    init(handler: @escaping StandInHTTPServer.Handler, scripts: ScriptQueue, changes: Changes) {
        self.handler = handler
        self.scripts = scripts
        self.changes = changes
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let requestHead):
            head = requestHead
            body.clear()
        case .body(var chunk):
            body.writeBuffer(&chunk)
        case .end:
            guard let requestHead = head else { return }
            var headers: [String: String] = [:]
            for (name, value) in requestHead.headers { headers[name.lowercased()] = value }
            let request = StandInHTTPServer.Request(
                method: requestHead.method, path: requestHead.uri, headers: headers,
                body: Data(body.readableBytesView), receivedAt: .now)
            let version = requestHead.version
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            let (handler, changes) = (self.handler, self.changes)
            scripts.run(
                {
                    defer { changes.changed() }
                    return handler(request)
                },
                answer: { reply, latency in
                    let (this, context) = bound.value
                    this.answer(reply, after: latency, version: version, context: context)
                }, on: context.eventLoop)
        }
    }

    private func answer(_ reply: StandInHTTPServer.Reply, after latency: Duration, version: HTTPVersion, context: ChannelHandlerContext) {
        guard latency > .zero else {
            write(reply, version: version, context: context)
            return
        }
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let (seconds, attoseconds) = latency.components
        context.eventLoop.scheduleTask(in: .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)) {
            let (handler, context) = bound.value
            handler.write(reply, version: version, context: context)
        }
    }

    private func write(_ reply: StandInHTTPServer.Reply, version: HTTPVersion, context: ChannelHandlerContext) {
        switch reply {
        case .hangUp:
            context.close(promise: nil)
        case .silence:
            break
        case .stallAfterHead:
            var stalled = HTTPResponseHead(version: version, status: .ok)
            stalled.headers.add(name: "content-type", value: "application/json")
            stalled.headers.add(name: "content-length", value: "4096")
            context.write(wrapOutboundOut(.head(stalled)), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: "{\"id\": \"msg_")))), promise: nil)
        case .respond(let status, let extra, let data):
            var responseHead = HTTPResponseHead(version: version, status: HTTPResponseStatus(statusCode: status))
            responseHead.headers.add(name: "content-type", value: "application/json")
            responseHead.headers.add(name: "content-length", value: String(data.count))
            for (name, value) in extra { responseHead.headers.add(name: name, value: value) }
            context.write(wrapOutboundOut(.head(responseHead)), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: data)))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}

/// JSON text of an object, keys sorted.
func standInJSON(_ object: Any) -> Data {
    (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
}
