import AsyncHTTPClient
import CryptoExtras
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// Firebase Cloud Messaging, HTTP v1 API.
///
/// Wire format: `POST /v1/projects/<project>/messages:send` on `fcm.googleapis.com`,
/// `authorization: Bearer <OAuth2 access token>`, body `{"message": {"token", "notification",
/// "data", "android": {…}}}`; 200 `{"name": "projects/…/messages/…"}`; an error is
/// `{"error": {"code", "message", "status", "details": [{"@type": "…FcmError", "errorCode"}, …]}}`.
/// A probe is the same request with `"validate_only": true` and the topic `nudge-probe` for its
/// target: FCM validates it and sends nothing, answering `{"name": "projects/…/messages/fake_message_id"}`.
/// The access token comes from the service account's `token_uri` (OAuth2 JWT-bearer grant: an
/// RS256 JWT `{iss: client_email, scope: …/firebase.messaging, aud: token_uri, iat, exp}`),
/// answered `{"access_token", "expires_in", "token_type": "Bearer"}`; it is reused until
/// shortly before it expires.
public struct FCMConfiguration: Sendable {
    public let projectID: String
    public let clientEmail: String
    public let privateKeyID: String
    public let tokenURI: String
    public let baseURL: String
    /// Requests in flight at once on FCM's HTTP/2 connection (`FCM_CONCURRENCY`).
    public let concurrency: Int
    let privateKey: _RSA.Signing.PrivateKey
    let keyBytes: Data

    static let scope = "https://www.googleapis.com/auth/firebase.messaging"

    /// Reads the service-account JSON `GOOGLE_APPLICATION_CREDENTIALS` names (as Google's own
    /// tools do), `FCM_PROJECT_ID` (default: the account's project) and `FCM_BASE_URL` (tests).
    /// Nil when `GOOGLE_APPLICATION_CREDENTIALS` is not set.
    public init?(environment: Environment) throws(NudgeError) {
        guard let path = environment["GOOGLE_APPLICATION_CREDENTIALS"] else { return nil }
        struct ServiceAccount: Decodable {
            let type: String?
            let project_id: String?
            let private_key_id: String?
            let private_key: String?
            let client_email: String?
            let token_uri: String?
        }
        let data = try SecretFile.read(path, setting: "GOOGLE_APPLICATION_CREDENTIALS", environment: environment)
        guard let account = try? JSONDecoder().decode(ServiceAccount.self, from: data) else {
            throw NudgeError(.configuration, "\(path) (GOOGLE_APPLICATION_CREDENTIALS) is not a service-account JSON file")
        }
        guard account.type == nil || account.type == "service_account" else {
            throw NudgeError(.configuration, "\(path) (GOOGLE_APPLICATION_CREDENTIALS) is a '\(account.type!)' credential; FCM needs a service account")
        }
        let missing = [("private_key", account.private_key), ("client_email", account.client_email)]
            .filter { $0.1?.isEmpty ?? true }.map(\.0)
        guard missing.isEmpty, let pem = account.private_key, let email = account.client_email else {
            throw NudgeError(.configuration, "\(path) (GOOGLE_APPLICATION_CREDENTIALS) lacks \(missing.joined(separator: " and "))")
        }
        guard let project = environment["FCM_PROJECT_ID"] ?? account.project_id else {
            throw NudgeError(.configuration, "no FCM project: set FCM_PROJECT_ID (the service account names none)")
        }
        do {
            privateKey = try _RSA.Signing.PrivateKey(pemRepresentation: pem)
        } catch {
            throw NudgeError(.configuration, "\(path) (GOOGLE_APPLICATION_CREDENTIALS): its private_key is not an RSA key in PEM")
        }
        projectID = project
        clientEmail = email
        privateKeyID = account.private_key_id ?? ""
        tokenURI = account.token_uri ?? "https://oauth2.googleapis.com/token"
        try ProviderHTTP.check(tokenURI, name: "the service account's token_uri (GOOGLE_APPLICATION_CREDENTIALS)")
        baseURL = try ProviderHTTP.baseURL(environment, "FCM_BASE_URL", default: "https://fcm.googleapis.com")
        concurrency = try environment.integer("FCM_CONCURRENCY", default: 100, in: 1...1_000)
        keyBytes = Data(pem.utf8)
    }

    /// The signed grant Google's token endpoint exchanges for an access token.
    func grant(at instant: Date) throws -> String {
        let issuedAt = Int(instant.timeIntervalSince1970)
        return try JWT.sign(
            header: [("typ", JWT.string("JWT")), ("kid", JWT.string(privateKeyID))],
            claims: [
                ("iss", JWT.string(clientEmail)), ("scope", JWT.string(Self.scope)),
                ("aud", JWT.string(tokenURI)), ("iat", String(issuedAt)), ("exp", String(issuedAt + 3600)),
            ],
            key: .rs256(privateKey))
    }
}

public final class FCMClient: PushService {
    public var provider: DeliveryProvider { .fcm }
    let configuration: FCMConfiguration
    private let http: ProviderHTTP
    private let client: HTTPClient
    private let slots: ProviderSlots
    public let tokens: ProviderTokenStore

    /// An access token is renewed five minutes before it expires.
    static let renewBeforeExpiry: TimeInterval = 5 * 60
    /// FCM asks for at least a minute's pause after QUOTA_EXCEEDED.
    static let quotaPause: TimeInterval = 60

    public init(configuration: FCMConfiguration, http: ProviderHTTP, clock: any RunClock = SystemClock()) throws(NudgeError) {
        self.configuration = configuration
        self.http = http
        let client = try http.makeClient(http2: true, connectionsPerHost: 8)
        self.client = client
        slots = ProviderSlots(limit: configuration.concurrency)
        tokens = ProviderTokenStore(
            provider: "fcm", credential: "\(configuration.clientEmail).\(configuration.privateKeyID)",
            secret: configuration.keyBytes, renewAfter: 3600 - Self.renewBeforeExpiry,
            clock: clock
        ) { instant in
            try await Self.fetchAccessToken(configuration: configuration, http: http, client: client, at: instant)
        }
    }

    public func shutdown() async {
        try? await client.shutdown()
    }

    /// The OAuth2 JWT-bearer grant at the service account's `token_uri`.
    static func fetchAccessToken(
        configuration: FCMConfiguration, http: ProviderHTTP, client: HTTPClient,
        at instant: Date
    ) async throws -> ProviderToken {
        var request = HTTPClientRequest(url: configuration.tokenURI)
        request.method = .POST
        request.headers.add(name: "content-type", value: "application/x-www-form-urlencoded")
        let form =
            "grant_type=" + formEncode("urn:ietf:params:oauth:grant-type:jwt-bearer")
            + "&assertion=" + formEncode(try configuration.grant(at: instant))
        request.body = .bytes(ByteBuffer(string: form))
        let (head, body) = try await http.exchange(request, on: client)
        if head.status.code >= 500 || head.status.code == 429 || head.status.code == 408 {
            throw TokenEndpointTrouble(status: Int(head.status.code))
        }
        struct Answer: Decodable {
            let access_token: String?
            let expires_in: Int?
            let error: String?
            let error_description: String?
        }
        let answer = try? JSONDecoder().decode(Answer.self, from: body)
        guard head.status.code == 200, let token = answer?.access_token else {
            let why = [answer?.error, answer?.error_description].compactMap { $0 }.joined(separator: ": ")
            throw NudgeError(.configuration, "the FCM token endpoint answered HTTP \(head.status.code)" + (why.isEmpty ? "" : " (\(why))"))
        }
        let lifetime = TimeInterval(max(60, answer?.expires_in ?? 3600))
        return ProviderToken(value: token, issuedAt: instant, expiresAt: instant.addingTimeInterval(lifetime - renewBeforeExpiry))
    }

    /// The token endpoint answered that it could not serve now (5xx, 429, 408): not the account's fault.
    struct TokenEndpointTrouble: Error, CustomStringConvertible {
        let status: Int
        var description: String { "the FCM token endpoint answered HTTP \(status)" }
    }

    static func formEncode(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }

    public func send(_ push: PushRequest, context: SendContext) async -> SendResult {
        for attempt in 1...2 {
            let token: String
            switch await tokens.fetch("get an FCM access token", context: context) {
            case .token(let fetched): token = fetched
            case .refused(let why): return .configuration(why)
            case .unavailable(let why): return .unavailable(why, after: nil)
            }
            let result = await post(push, token: token, context: context)
            // An access token the server no longer takes is replaced once.
            if case .configuration(let why) = result, why.hasPrefix("FCM 401 UNAUTHENTICATED"), attempt == 1,
                await tokens.refuse(token)
            {
                continue
            }
            return result
        }
        return .configuration("FCM refused two access tokens in a row")
    }

    /// A message to no device, validated and not sent: whether FCM answers again, asking nothing
    /// of anyone's phone.
    public func probe(context: SendContext) async -> ProbeAnswer? {
        // A service account refused pauses FCM, as a send would.
        let token: String
        switch await tokens.fetch("get an FCM access token", context: context) {
        case .token(let fetched): token = fetched
        case .refused(let why): return .refused(why)
        case .unavailable(let why): return .unavailable(why)
        }
        let url = "\(configuration.baseURL)/v1/projects/\(configuration.projectID)/messages:send"
        return await http.probe("FCM", on: client, in: slots, reading: Self.probeReading) {
            var request = HTTPClientRequest(url: url)
            request.method = .POST
            request.headers.add(name: "authorization", value: "Bearer \(token)")
            request.headers.add(name: "content-type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: Self.probeBody))
            return request
        }
    }

    /// A probe's answer: the same endpoint and the same reading as a send's, so that a refused
    /// project or key pauses FCM; nil for the usual reading (`ProbeAnswer(_:status:)`).
    static func probeReading(status: Int, body: Data) -> ProbeAnswer? {
        guard status != 200, case .configuration(let why) = classify(status: status, body: body, retryAfter: nil) else { return nil }
        return .refused(why)
    }

    /// The probe's body: a data message to a topic no device subscribes to, validated only.
    static let probeBody = #"{"message":{"data":{"nudge":"probe"},"topic":"nudge-probe"},"validate_only":true}"#

    /// The request for `push` with `keepFor` seconds of its shelf life left as it leaves (its `ttl`).
    func request(for push: PushRequest, token: String, keepFor: TimeInterval) -> HTTPClientRequest {
        var request = HTTPClientRequest(url: "\(configuration.baseURL)/v1/projects/\(configuration.projectID)/messages:send")
        request.method = .POST
        request.headers.add(name: "authorization", value: "Bearer \(token)")
        request.headers.add(name: "content-type", value: "application/json")
        request.body = .bytes(
            ByteBuffer(
                bytes: push.content.fcmRequest(
                    token: push.device.token, collapseKey: Self.collapseKey(push),
                    timeToLive: keepFor)))
        return request
    }

    /// `runClock`: the run's clock, which what is left of the push's shelf life is read from as
    /// it leaves.
    private func post(_ push: PushRequest, token: String, context: SendContext) async -> SendResult {
        let runClock = context.clock
        let exchanged = await http.exchangeUntilHead(on: client, in: slots, unless: context.leaving) {
            self.request(for: push, token: token, keepFor: push.keepFor(at: runClock.now()))
        }
        let head: HTTPResponseHead
        let body: Data
        switch exchanged {
        case .answered(let answerHead, let answerBody):
            (head, body) = (answerHead, answerBody)
        case .failed(let failure):
            return .unavailable(failure.description, after: nil)
        case .kept(let result):
            return result
        case .neverLeft:
            return .notSent("FCM: no stream was free for it before the batch's bound (it never left)", after: 1)
        }
        if head.status.code == 200 {
            struct Sent: Decodable { let name: String }
            guard let sent = try? JSONDecoder().decode(Sent.self, from: body) else {
                return .unavailable("FCM answered 200 without a message name", after: nil)
            }
            return .delivered(providerID: sent.name)
        }
        return Self.classify(
            status: Int(head.status.code), body: body,
            retryAfter: ProviderHTTP.retryAfter(head.headers).map { $0.seconds })
    }

    /// FCM keeps at most four collapse keys per offline device: one a notification group
    /// (`streak`, `leaderboard_change`…), so that a device back online gets the latest of each,
    /// never one key per message.
    static func collapseKey(_ push: PushRequest) -> String { "nudge-" + push.content.group }

    /// What an FCM error means for Nudge (Firebase's "FCM error codes").
    static func classify(status: Int, body: Data, retryAfter: TimeInterval?) -> SendResult {
        struct Answer: Decodable {
            struct Error: Decodable {
                struct Detail: Decodable {
                    struct Violation: Decodable { let field: String? }
                    let type: String?
                    let errorCode: String?
                    let fieldViolations: [Violation]?
                    enum CodingKeys: String, CodingKey {
                        case type = "@type"
                        case errorCode, fieldViolations
                    }
                }
                let message: String?
                let status: String?
                let details: [Detail]?
            }
            let error: Error?
        }
        let error = (try? JSONDecoder().decode(Answer.self, from: body))?.error
        let code = error?.details?.compactMap(\.errorCode).first ?? error?.status ?? "HTTP \(status)"
        let message = error?.message ?? ""
        let text = "FCM \(status) \(code)" + (message.isEmpty ? "" : ": \(message)")
        switch code {
        case "UNREGISTERED":
            return .invalidToken(text, unknownToProvider: false)
        case "SENDER_ID_MISMATCH":
            // Also what every token gets with the wrong project.
            return .invalidToken(text, unknownToProvider: true)
        case "INVALID_ARGUMENT":
            let aboutToken =
                message.lowercased().contains("registration token")
                || (error?.details ?? []).contains { ($0.fieldViolations ?? []).contains { $0.field == "message.token" } }
            if aboutToken { return .invalidToken(text, unknownToProvider: true) }
            // The message itself (too big, a reserved data key): this notification fails.
            return .rejected(text)
        case "QUOTA_EXCEEDED" where message.lowercased().contains("device"):
            // One device's message rate: that device waits.
            return .retry(text, after: max(retryAfter ?? 0, quotaPause))
        case "QUOTA_EXCEEDED", "RESOURCE_EXHAUSTED":
            // The project's quota: every send waits, none spends an attempt.
            return .throttled(text, after: max(retryAfter ?? 0, quotaPause))
        case "UNAVAILABLE", "INTERNAL":
            return .unavailable(text, after: retryAfter)
        case "THIRD_PARTY_AUTH_ERROR", "UNAUTHENTICATED", "PERMISSION_DENIED", "NOT_FOUND":
            // The APNs key in Firebase, the service account, a project that does not exist:
            // configuration, never a reason to prune a token.
            return .configuration(text)
        default:
            if status >= 500 { return .unavailable(text, after: retryAfter) }
            if status == 408 { return .retry(text, after: retryAfter) }
            if status == 429 { return .throttled(text, after: max(retryAfter ?? 0, quotaPause)) }
            if status == 401 || status == 403 { return .configuration(text) }
            return .rejected(text)
        }
    }
}
