import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

/// Apple Push Notification service over HTTP/2 with token authentication.
///
/// Wire format: `POST /3/device/<device token>` on `api.push.apple.com` (production) or
/// `api.sandbox.push.apple.com`, headers `authorization: bearer <JWT>`, `apns-topic` (the bundle
/// id), `apns-push-type: alert`, `apns-priority` (10: at once), `apns-expiration` (epoch
/// seconds), `apns-collapse-id` (≤ 64 bytes), `apns-id` (a UUID), the JSON payload as body (≤ 4096
/// bytes). 200 with the `apns-id` header on success; otherwise a status and `{"reason": "…"}`.
/// The JWT is ES256 with header `{alg, kid: APNS_KEY_ID}` and claims `{iss: APNS_TEAM_ID, iat}`,
/// `iat` an integer; Apple wants it renewed between 20 and 60 minutes, never per request.
public struct APNsConfiguration: Sendable {
    public let keyID: String
    public let teamID: String
    public let bundleID: String
    /// `production` or `sandbox` (`APNS_ENVIRONMENT`).
    public let environmentName: String
    public let baseURL: String
    /// HTTP/2 connections to APNs (each `HTTPClient` keeps one per host): `APNS_CONNECTIONS`.
    /// Each carries `APNsClient.streamsPerConnection` requests at once.
    public let connections: Int
    let privateKey: P256.Signing.PrivateKey
    let keyBytes: Data

    /// Reads `APNS_KEY_ID`, `APNS_TEAM_ID`, `APNS_PRIVATE_KEY` (PEM text or a file path),
    /// `APNS_BUNDLE_ID`, `APNS_ENVIRONMENT` (production, the default, or sandbox), `APNS_BASE_URL`
    /// (tests) and `APNS_CONNECTIONS`. Nil when none of the four credentials is set.
    public init?(environment: Environment) throws(NudgeError) {
        let names = ["APNS_KEY_ID", "APNS_TEAM_ID", "APNS_PRIVATE_KEY", "APNS_BUNDLE_ID"]
        let missing = names.filter { environment[$0] == nil }
        if missing.count == names.count { return nil }
        guard missing.isEmpty else {
            throw NudgeError(.configuration, "APNs is half configured: \(missing.joined(separator: ", ")) not set")
        }
        keyID = environment["APNS_KEY_ID"]!
        teamID = environment["APNS_TEAM_ID"]!
        bundleID = environment["APNS_BUNDLE_ID"]!
        let name = environment["APNS_ENVIRONMENT"]?.lowercased() ?? "production"
        guard ["production", "sandbox", "development"].contains(name) else {
            throw NudgeError(.configuration, "APNS_ENVIRONMENT must be production or sandbox, not '\(name)'")
        }
        environmentName = name == "production" ? "production" : "sandbox"
        baseURL = try ProviderHTTP.baseURL(
            environment, "APNS_BASE_URL",
            default: environmentName == "production"
                ? "https://api.push.apple.com" : "https://api.sandbox.push.apple.com")
        connections = try environment.integer("APNS_CONNECTIONS", default: 2, in: 1...64)
        let pem = try Self.pem(environment["APNS_PRIVATE_KEY"]!, environment: environment)
        do {
            privateKey = try P256.Signing.PrivateKey(pemRepresentation: pem)
        } catch {
            throw NudgeError(.configuration, "APNS_PRIVATE_KEY is not an EC P-256 private key in PEM (the .p8 file Apple issues)")
        }
        keyBytes = Data(pem.utf8)
    }

    /// The key itself, or the contents of the file it names (`SecretFile.read`: systemd's
    /// credential, or the file when only its owner and group may read it).
    static func pem(_ value: String, environment: Environment) throws(NudgeError) -> String {
        if value.contains("-----BEGIN") { return value.replacingOccurrences(of: "\\n", with: "\n") }
        guard let text = String(data: try SecretFile.read(value, setting: "APNS_PRIVATE_KEY", environment: environment), encoding: .utf8)
        else { throw NudgeError(.configuration, "APNS_PRIVATE_KEY names \(value), which is not a PEM key") }
        return text
    }

    /// A provider token issued at `instant`.
    func providerToken(at instant: Date) throws -> ProviderToken {
        let issuedAt = Int(instant.timeIntervalSince1970)
        let jwt = try JWT.sign(
            header: [("kid", JWT.string(keyID))],
            claims: [("iss", JWT.string(teamID)), ("iat", String(issuedAt))], key: .es256(privateKey))
        return ProviderToken(
            value: jwt, issuedAt: Date(timeIntervalSince1970: TimeInterval(issuedAt)),
            expiresAt: Date(timeIntervalSince1970: TimeInterval(issuedAt + 3600)))
    }
}

public final class APNsClient: PushService {
    public var provider: DeliveryProvider { .apns }
    let configuration: APNsConfiguration
    private let http: ProviderHTTP
    /// A few clients, each with its HTTP/2 connection, taken in turn.
    private let clients: [HTTPClient]
    private let slots: ProviderSlots
    private let next = Counter()
    private let clock: any RunClock
    public let tokens: ProviderTokenStore

    /// Requests in flight on one connection: well within the streams APNs allows on one.
    static let streamsPerConnection = 100

    /// Renewed after 50 minutes, never before 20 (Apple's window is 20 to 60).
    static let renewAfter: TimeInterval = 50 * 60
    static let keepAtLeast: TimeInterval = 20 * 60

    public init(configuration: APNsConfiguration, http: ProviderHTTP, clock: any RunClock = SystemClock()) throws(NudgeError) {
        self.configuration = configuration
        self.http = http
        self.clock = clock
        var clients: [HTTPClient] = []
        for _ in 0..<configuration.connections { clients.append(try http.makeClient(http2: true, connectionsPerHost: 1)) }
        self.clients = clients
        slots = ProviderSlots(limit: configuration.connections * Self.streamsPerConnection)
        tokens = ProviderTokenStore(
            provider: "apns", credential: "\(configuration.teamID).\(configuration.keyID)",
            secret: configuration.keyBytes, renewAfter: Self.renewAfter,
            keepAtLeast: Self.keepAtLeast, clock: clock
        ) { instant in
            try configuration.providerToken(at: instant)
        }
    }

    public func shutdown() async {
        for client in clients { try? await client.shutdown() }
    }

    public func send(_ push: PushRequest, context: SendContext) async -> SendResult {
        // A token APNs cannot take (not hex: it would not even make a path) is the token's fault.
        guard !push.device.token.isEmpty, push.device.token.allSatisfy(\.isHexDigit) else {
            return .invalidToken("not an APNs device token (hexadecimal digits)", unknownToProvider: false)
        }
        for attempt in 1...2 {
            let token: String
            switch await tokens.fetch("make the APNs provider token", context: context) {
            case .token(let fetched): token = fetched
            case .refused(let why): return .configuration(why)
            case .unavailable(let why): return .unavailable(why, after: nil)
            }
            let result = await post(push, token: token, context: context)
            // An expired provider token is renewed once, unless it is too young to be replaced.
            if case .expiredProviderToken = result, attempt == 1 {
                if await tokens.refuse(token) { continue }
                return .configuration("APNs calls a provider token under 20 minutes old expired: check the clock and APNS_KEY_ID")
            }
            return result.sendResult
        }
        return .configuration("APNs refused two provider tokens in a row as expired")
    }

    private enum Answer {
        case result(SendResult)
        case expiredProviderToken

        var sendResult: SendResult {
            switch self {
            case .result(let result): result
            case .expiredProviderToken: .configuration("APNs refused the provider token as expired")
            }
        }
    }

    /// The request for `push` as it leaves at `now` (the provider's clock) with `keepFor`
    /// seconds of its shelf life left: `apns-expiration` is the instant its shelf life ends.
    func request(for push: PushRequest, token: String, now: Date, keepFor: TimeInterval) -> HTTPClientRequest {
        var request = HTTPClientRequest(url: "\(configuration.baseURL)/3/device/\(push.device.token)")
        request.method = .POST
        request.headers.add(name: "authorization", value: "bearer \(token)")
        request.headers.add(name: "apns-topic", value: configuration.bundleID)
        request.headers.add(name: "apns-push-type", value: "alert")
        request.headers.add(name: "apns-priority", value: "10")
        request.headers.add(name: "apns-expiration", value: String(Int(now.timeIntervalSince1970 + keepFor)))
        request.headers.add(name: "apns-collapse-id", value: push.collapseID)
        request.headers.add(name: "apns-id", value: push.requestID.uuidString.lowercased())
        request.headers.add(name: "content-type", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: push.content.apnsBody))
        return request
    }

    /// `runClock`: the run's clock, which what is left of the push's shelf life is read from as
    /// it leaves (an explicit `--now` stands still).
    private func post(_ push: PushRequest, token: String, context: SendContext) async -> Answer {
        let client = clients[next.increment() % clients.count]
        let clock = self.clock
        let runClock = context.clock
        let exchanged = await http.exchangeUntilHead(on: client, in: slots, unless: context.leaving) {
            self.request(for: push, token: token, now: clock.now(), keepFor: push.keepFor(at: runClock.now()))
        }
        let head: HTTPResponseHead
        let body: Data
        switch exchanged {
        case .answered(let answerHead, let answerBody):
            (head, body) = (answerHead, answerBody)
        case .failed(let failure):
            return .result(.unavailable(failure.description, after: nil))
        case .kept(let result):
            return .result(result)
        case .neverLeft:
            return .result(.notSent("APNs: no stream was free for it before the batch's bound (it never left)", after: 1))
        }
        let status = Int(head.status.code)
        if status == 200 {
            return .result(.delivered(providerID: head.headers.first(name: "apns-id") ?? push.requestID.uuidString.lowercased()))
        }
        let reason = Self.reason(body) ?? "HTTP \(status)"
        return Self.classify(status: status, reason: reason, retryAfter: ProviderHTTP.retryAfter(head.headers))
    }

    /// `{"reason": "BadDeviceToken"}`, as APNs words an error.
    static func reason(_ body: Data) -> String? {
        struct Answer: Decodable { let reason: String? }
        return (try? JSONDecoder().decode(Answer.self, from: body))?.reason
    }

    /// What an APNs error means for Nudge (Apple's "Handling notification responses from APNs").
    private static func classify(status: Int, reason: String, retryAfter: Duration?) -> Answer {
        let text = "APNs \(status) \(reason)"
        switch (status, reason) {
        case (410, _):
            // Unregistered, ExpiredToken: the app is gone from the device.
            return .result(.invalidToken(text, unknownToProvider: false))
        case (400, "BadDeviceToken"), (400, "DeviceTokenNotForTopic"), (400, "MissingDeviceToken"):
            // Also what every token gets with the wrong APNS_ENVIRONMENT or bundle id.
            return .result(.invalidToken(text, unknownToProvider: true))
        case (403, "ExpiredProviderToken"):
            return .expiredProviderToken
        case (429, "TooManyProviderTokenUpdates"):
            return .result(.throttled(text, after: max(retryAfter?.seconds ?? 0, 60)))
        case (429, _), (400, "IdleTimeout"):
            // Too many requests for this device token, or a connection APNs found idle.
            return .result(.retry(text, after: retryAfter.map { $0.seconds }))
        case (500...599, _):
            return .result(.unavailable(text, after: retryAfter.map { $0.seconds }))
        case (403, _), (400, "BadTopic"), (400, "TopicDisallowed"), (400, "MissingTopic"), (400, "BadCertificate"),
            (400, "BadCertificateEnvironment"), (404, _), (405, _):
            // A key, team, topic or endpoint Apple refuses: Nudge's configuration, not the device.
            return .result(.configuration(text))
        default:
            // The request itself (its payload, a header): this notification fails, the others go.
            return .result(.rejected(text))
        }
    }
}

/// A counter shared by concurrent sends.
final class Counter: Sendable {
    private let value = Mutex(0)

    func increment() -> Int {
        value.withLock { value in
            defer { value &+= 1 }
            return value
        }
    }
}
