import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOPosix
import NIOSSL
import Synchronization

/// A local APNs: HTTP/2 over TLS (a private CA's certificate, ALPN `h2`), `POST /3/device/<token>`
/// as Apple's provider API takes it. It checks what Apple checks: the provider token (an ES256 JWT
/// with the team's key id, signed by the key it was given, `iss` the team, an integer `iat` not
/// older than an hour), the `apns-topic`, `apns-push-type`, `apns-priority`, `apns-expiration`,
/// `apns-collapse-id` and `apns-id` headers, a JSON payload of at most 4 KiB with an `aps`
/// dictionary, and answers as Apple does (`{"reason": "…"}`). What it answers for each device is
/// the script's to say: accept, an error status with a reason and `retry-after`, or no answer.
public final class StandInAPNs: Sendable {
    /// One request as the stand-in received it.
    public struct Request: Sendable {
        public let deviceToken: String
        public let headers: [String: String]
        public let body: Data
        /// The provider token (the JWT) the request carried.
        public let providerToken: String
        /// How many requests for this device token arrived so far, this one included (0 on a
        /// stand-in that does not record).
        public let attempt: Int
        public let receivedAt: Date

        public var collapseID: String? { headers["apns-collapse-id"] }

        /// The payload's `aps.alert` title and body, and its `data`.
        public var alert: (title: String, body: String)? {
            guard let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any],
                let aps = object["aps"] as? [String: Any], let alert = aps["alert"] as? [String: Any]
            else { return nil }
            return ((alert["title"] as? String) ?? "", (alert["body"] as? String) ?? "")
        }

        public var data: [String: String] {
            guard let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any] else { return [:] }
            return (object["data"] as? [String: String]) ?? [:]
        }
    }

    public enum Answer: Sendable {
        case accept
        /// Accept, after a while (a slow network, a busy APNs).
        case acceptAfter(Duration)
        /// An error status with Apple's reason (`BadDeviceToken`, `Unregistered`…).
        case reject(status: Int, reason: String, retryAfter: String? = nil)
        /// Never answer (the client's time-out ends the wait).
        case hang
    }

    public typealias Script = @Sendable (Request) -> Answer

    public let port: Int
    public let keyID: String
    public let teamID: String
    public let bundleID: String
    /// The provider key, PEM: what to give as `APNS_PRIVATE_KEY`.
    public let privateKeyPEM: String
    private let state: State
    private let channel: any Channel

    /// What to give as `APNS_BASE_URL`.
    public var baseURL: String { "https://localhost:\(port)" }

    /// Every request answered or not, in order of arrival (when `record` was set).
    public var requests: [Request] { state.log.withLock { $0.requests } }
    /// How many requests arrived, recorded or not.
    public var requestCount: Int { state.log.withLock { $0.count } }
    /// One more each time a request has been recorded (its answer is then on its way): what a
    /// test waits on.
    public var changes: Changes { state.changes }
    /// The distinct provider tokens (JWTs) requests carried.
    public var providerTokens: [String] { state.log.withLock { $0.tokensInOrder } }

    final class State: Sendable {
        struct Log {
            var requests: [Request] = []
            var count = 0
            var attempts: [String: Int] = [:]
            /// Each verified provider token and its `iat`.
            var verified: [String: Int] = [:]
            var tokensInOrder: [String] = []
        }
        let log = Mutex(Log())
        let script: Script
        let record: Bool
        /// One more for every request answered.
        let changes = Changes()
        let publicKey: P256.Signing.PublicKey
        let keyID: String
        let teamID: String
        let bundleID: String
        let clock: @Sendable () -> Date

        init(
            script: @escaping Script, record: Bool, publicKey: P256.Signing.PublicKey, keyID: String, teamID: String,
            bundleID: String, clock: @escaping @Sendable () -> Date
        ) {
            self.script = script
            self.record = record
            self.publicKey = publicKey
            self.keyID = keyID
            self.teamID = teamID
            self.bundleID = bundleID
            self.clock = clock
        }
    }

    private init(
        port: Int, keyID: String, teamID: String, bundleID: String, privateKeyPEM: String, state: State,
        channel: any Channel
    ) {
        self.port = port
        self.keyID = keyID
        self.teamID = teamID
        self.bundleID = bundleID
        self.privateKeyPEM = privateKeyPEM
        self.state = state
        self.channel = channel
    }

    /// Starts a stand-in with a new provider key. `record: false` keeps only counts (benchmarks);
    /// `clock` is the time it checks `iat` against.
    public static func start(
        ca: StandInCA, port: Int = 0, keyID: String = "STANDIN01", teamID: String = "TEAMSTANDIN",
        bundleID: String = "app.nudge.standin", record: Bool = true,
        clock: @escaping @Sendable () -> Date = { Date() },
        script: @escaping Script = { _ in .accept }
    ) async throws -> StandInAPNs {
        let key = P256.Signing.PrivateKey()
        let state = State(
            script: script, record: record, publicKey: key.publicKey, keyID: keyID, teamID: teamID,
            bundleID: bundleID, clock: clock)
        let tls = try ca.serverContext(protocols: ["h2"])
        let scripts = StandInLoops.scriptQueue("APNs")
        let channel = try await ServerBootstrap(group: StandInLoops.group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls))
                }.flatMap {
                    channel.configureHTTP2Pipeline(
                        mode: .server,
                        initialLocalSettings: [
                            HTTP2Setting(parameter: .maxConcurrentStreams, value: 1000),
                            HTTP2Setting(parameter: .maxHeaderListSize, value: 8192),
                        ]
                    ) { stream in
                        stream.eventLoop.makeCompletedFuture {
                            try stream.pipeline.syncOperations.addHandlers([
                                HTTP2FramePayloadToHTTP1ServerCodec(), APNsStreamHandler(state: state, scripts: scripts),
                            ])
                        }
                    }.map { _ in }
                }
            }
            .bind(host: "127.0.0.1", port: port).get()
        return StandInAPNs(
            port: channel.localAddress?.port ?? port, keyID: keyID, teamID: teamID, bundleID: bundleID,
            privateKeyPEM: key.pemRepresentation, state: state, channel: channel)
    }

    public func shutdown() async {
        try? await channel.close()
    }

    /// The answer Apple gives to what the request got wrong, or nil when it is well formed.
    static func check(path: String, headers: [String: String], body: Data, state: State) -> (Int, String)? {
        guard path.hasPrefix("/3/device/") else { return (404, "BadPath") }
        let token = String(path.dropFirst("/3/device/".count))
        guard !token.isEmpty, token.allSatisfy({ $0.isHexDigit }) else { return (400, "BadDeviceToken") }
        guard let authorization = headers["authorization"], authorization.hasPrefix("bearer ") else {
            return (403, "MissingProviderToken")
        }
        if let problem = verify(String(authorization.dropFirst("bearer ".count)), state: state) { return problem }
        guard let topic = headers["apns-topic"] else { return (400, "MissingTopic") }
        guard topic == state.bundleID else { return (400, "TopicDisallowed") }
        guard let type = headers["apns-push-type"],
            [
                "alert", "background", "voip", "complication", "fileprovider", "mdm",
                "liveactivity", "pushtotalk",
            ].contains(type)
        else { return (400, "InvalidPushType") }
        if let priority = headers["apns-priority"], !["1", "5", "10"].contains(priority) { return (400, "BadPriority") }
        if let expiration = headers["apns-expiration"], Int(expiration) == nil { return (400, "BadExpirationDate") }
        if let collapse = headers["apns-collapse-id"], collapse.utf8.count > 64 { return (400, "BadCollapseId") }
        if let id = headers["apns-id"], UUID(uuidString: id) == nil { return (400, "BadMessageId") }
        guard !body.isEmpty else { return (400, "PayloadEmpty") }
        guard body.count <= 4096 else { return (413, "PayloadTooLarge") }
        // A recording stand-in (the tests) reads the payload whole; a counting one (benchmarks)
        // checks its shape only, as fast as a server should.
        if state.record {
            guard let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any], object["aps"] is [String: Any]
            else { return (400, "BadPayload") }
        } else {
            let whitespace: Set<UInt8> = [0x20, 0x09, 0x0A, 0x0D]
            guard body.first(where: { !whitespace.contains($0) }) == UInt8(ascii: "{"),
                body.last(where: { !whitespace.contains($0) }) == UInt8(ascii: "}"),
                body.range(of: Data(#""aps":{"#.utf8)) != nil
            else { return (400, "BadPayload") }
        }
        return nil
    }

    /// Checks a provider token, once per distinct token: ES256, the key id, the team, an integer
    /// `iat` within the last hour.
    static func verify(_ jwt: String, state: State) -> (Int, String)? {
        if let issuedAt = state.log.withLock({ $0.verified[jwt] }) {
            return freshness(issuedAt, state: state)
        }
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerData = base64URL(parts[0]), let claimsData = base64URL(parts[1]),
            let signatureData = base64URL(parts[2])
        else { return (403, "InvalidProviderToken") }
        struct Header: Decodable {
            let alg: String
            let kid: String
        }
        struct Claims: Decodable {
            let iss: String
            let iat: Int
        }
        guard let header = try? JSONDecoder().decode(Header.self, from: headerData), header.alg == "ES256",
            header.kid == state.keyID,
            let claims = try? JSONDecoder().decode(Claims.self, from: claimsData), claims.iss == state.teamID,
            let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureData),
            state.publicKey.isValidSignature(signature, for: Data("\(parts[0]).\(parts[1])".utf8))
        else { return (403, "InvalidProviderToken") }
        state.log.withLock { log in
            log.verified[jwt] = claims.iat
            log.tokensInOrder.append(jwt)
        }
        return freshness(claims.iat, state: state)
    }

    /// Apple refuses a token issued more than an hour ago.
    private static func freshness(_ issuedAt: Int, state: State) -> (Int, String)? {
        let age = state.clock().timeIntervalSince1970 - TimeInterval(issuedAt)
        return age > 3600 || age < -300 ? (403, "ExpiredProviderToken") : nil
    }

    static func base64URL(_ text: Substring) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        return Data(base64Encoded: base64)
    }
}

/// One HTTP/2 stream: a request in, an answer out.
private final class APNsStreamHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let state: StandInAPNs.State
    private let scripts: ScriptQueue
    private var head: HTTPRequestHead?
    private var body = ByteBuffer()

    init(state: StandInAPNs.State, scripts: ScriptQueue) {
        self.state = state
        self.scripts = scripts
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
        case .body(var chunk):
            body.writeBuffer(&chunk)
        case .end:
            guard let head else { return }
            var lowered: [String: String] = [:]
            for (name, value) in head.headers { lowered[name.lowercased()] = value }
            let payload = Data(body.readableBytesView)
            let (state, path, headers) = (self.state, head.uri, lowered)
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            scripts.run(
                { Self.answer(path: path, headers: headers, payload: payload, state: state) },
                answer: { answer in
                    state.changes.changed()
                    let (this, context) = bound.value
                    this.respond(answer, apnsID: headers["apns-id"], context: context)
                }, on: context.eventLoop)
        }
    }

    /// What the stand-in answers to a request: Apple's error when it is malformed, else the script's.
    private static func answer(path: String, headers: [String: String], payload: Data, state: StandInAPNs.State) -> StandInAPNs.Answer {
        let token = path.hasPrefix("/3/device/") ? String(path.dropFirst("/3/device/".count)) : ""
        let answer: StandInAPNs.Answer
        if let (status, reason) = StandInAPNs.check(path: path, headers: headers, body: payload, state: state) {
            state.log.withLock { $0.count += 1 }
            answer = .reject(status: status, reason: reason)
        } else {
            let jwt = String(headers["authorization"]!.dropFirst("bearer ".count))
            let record = state.record
            let request: StandInAPNs.Request = state.log.withLock { log in
                log.count += 1
                // A counting stand-in (benchmarks) keeps no per-device history.
                guard record else {
                    return StandInAPNs.Request(
                        deviceToken: token, headers: headers, body: payload, providerToken: jwt,
                        attempt: 0, receivedAt: Date())
                }
                log.attempts[token, default: 0] += 1
                return StandInAPNs.Request(
                    deviceToken: token, headers: headers, body: payload, providerToken: jwt,
                    attempt: log.attempts[token]!, receivedAt: Date())
            }
            answer = state.script(request)
            if state.record { state.log.withLock { $0.requests.append(request) } }
        }
        return answer
    }

    private func respond(_ answer: StandInAPNs.Answer, apnsID: String?, context: ChannelHandlerContext) {
        if case .acceptAfter(let delay) = answer {
            let later = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(
                in: .nanoseconds(
                    Int64(delay.components.seconds) * 1_000_000_000
                        + delay.components.attoseconds / 1_000_000_000)
            ) {
                let (handler, context) = later.value
                handler.respond(.accept, apnsID: apnsID, context: context)
            }
            return
        }
        var responseHead = HTTPResponseHead(version: .http2, status: .ok)
        responseHead.headers.add(name: "apns-id", value: apnsID ?? UUID().uuidString)
        var body = ByteBuffer()
        switch answer {
        case .hang:
            return
        case .accept, .acceptAfter:
            break
        case .reject(let status, let reason, let retryAfter):
            responseHead.status = HTTPResponseStatus(statusCode: status)
            responseHead.headers.add(name: "content-type", value: "application/json")
            if let retryAfter { responseHead.headers.add(name: "retry-after", value: retryAfter) }
            let timestamp = status == 410 ? #","timestamp":\#(Int(Date().timeIntervalSince1970 * 1000))"# : ""
            body.writeString(#"{"reason":"\#(reason)"\#(timestamp)}"#)
        }
        responseHead.headers.add(name: "content-length", value: String(body.readableBytes))
        context.write(wrapOutboundOut(.head(responseHead)), promise: nil)
        if body.readableBytes > 0 { context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil) }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }
}
