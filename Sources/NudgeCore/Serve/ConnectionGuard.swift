import Hummingbird
import NIOCore
import NIOHTTPTypes
import Synchronization

/// The connections `nudge serve` has open, so that past `ServerLimits.maxConnections` the one idle
/// the longest is closed to make room for the new one. A connection is idle from when it opens or
/// its last response ended until its next request's head has come: a client holding connections
/// open (or sending heads it never finishes) loses them before any request in progress is touched.
final class OpenConnections: Sendable {
    private struct Entry {
        let channel: any Channel
        var busy: Bool
        var since: NIODeadline
    }

    private let entries = Mutex([ObjectIdentifier: Entry]())
    private let limit: Int

    init(limit: Int) {
        self.limit = limit
    }

    var count: Int { entries.withLock { $0.count } }

    /// Keeps `channel`, and closes the connection idle the longest when there are too many.
    func opened(_ channel: any Channel) {
        let victim: (any Channel)? = entries.withLock { entries in
            entries[ObjectIdentifier(channel)] = Entry(channel: channel, busy: false, since: .now())
            guard entries.count > limit else { return nil }
            let oldest = entries.filter { !$0.value.busy && $0.key != ObjectIdentifier(channel) }
                .min { $0.value.since < $1.value.since }
            guard let oldest else { return nil }
            entries[oldest.key] = nil
            return oldest.value.channel
        }
        victim?.close(promise: nil)
    }

    func closed(_ channel: any Channel) {
        _ = entries.withLock { $0.removeValue(forKey: ObjectIdentifier(channel)) }
    }

    func mark(_ channel: any Channel, busy: Bool) {
        entries.withLock { entries in
            entries[ObjectIdentifier(channel)]?.busy = busy
            entries[ObjectIdentifier(channel)]?.since = .now()
        }
    }
}

/// One connection's guard, between the HTTP decoder and Hummingbird: it keeps the connection in
/// `OpenConnections`, refuses a body larger than `ServerLimits.maxBody` (413, by its
/// `Content-Length` before a byte of it is read, or once a chunked one passes the limit) and a
/// request whose body has not come within `ServerLimits.bodyTimeout` (408), closing the connection
/// in both cases so that the rest is never read.
final class ConnectionGuard: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let limits: ServerLimits
    private let connections: OpenConnections
    private var registered = false
    /// The request's body bytes so far.
    private var received = 0
    /// The request is refused: the rest of what the client sends is dropped until the close.
    private var refusing = false
    /// Requests passed on whose response has not ended (more than one when a client pipelines).
    private var owed = 0
    /// The request being read was passed on (its head was).
    private var currentPassedOn = false
    /// A response has begun and not ended.
    private var responding = false
    private var bodyDeadline: Scheduled<Void>?

    init(limits: ServerLimits, connections: OpenConnections) {
        self.limits = limits
        self.connections = connections
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { register(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        register(context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        unregister(context)
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        unregister(context)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !refusing else { return }
        switch unwrapInboundIn(data) {
        case .head(let head):
            connections.mark(context.channel, busy: true)
            received = 0
            currentPassedOn = false
            let loopBound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
            bodyDeadline = context.eventLoop.scheduleTask(in: TimeAmount(limits.bodyTimeout)) {
                loopBound.value.handler.refuse(loopBound.value.context, .requestTimeout)
            }
            if let length = head.headerFields[.contentLength].flatMap(Int.init), length > limits.maxBody {
                refuse(context, .contentTooLarge)
                return
            }
            owed += 1
            currentPassedOn = true
        case .body(let buffer):
            received += buffer.readableBytes
            if received > limits.maxBody {
                refuse(context, .contentTooLarge)
                return
            }
        case .end:
            bodyDeadline?.cancel()
            bodyDeadline = nil
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head:
            responding = true
        case .body:
            break
        case .end:
            responding = false
            owed = max(0, owed - 1)
            if owed == 0 { connections.mark(context.channel, busy: false) }
        }
        context.write(data, promise: promise)
    }

    private func refuse(_ context: ChannelHandlerContext, _ status: HTTPResponse.Status) {
        guard !refusing else { return }
        refusing = true
        bodyDeadline?.cancel()
        bodyDeadline = nil
        // The refusal is the answer only when it is the next one the client reads: no earlier
        // request's response is owed, and none to this one has begun. Otherwise, only the close.
        if owed == (currentPassedOn ? 1 : 0) && !responding {
            let head = HTTPResponse(
                status: status,
                headerFields: [
                    .connection: "close", .contentLength: "0",
                    .contentType: "text/plain; charset=utf-8",
                ])
            context.write(wrapOutboundOut(.head(head)), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
        context.close(promise: nil)
    }

    private func register(_ context: ChannelHandlerContext) {
        guard !registered else { return }
        registered = true
        connections.opened(context.channel)
    }

    private func unregister(_ context: ChannelHandlerContext) {
        bodyDeadline?.cancel()
        bodyDeadline = nil
        guard registered else { return }
        registered = false
        connections.closed(context.channel)
    }
}
