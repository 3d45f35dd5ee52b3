import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// Resend, the email API (docs/jobs/dispatch.md, "Email (Resend)").
///
/// Wire format: `POST /emails/batch` on `api.resend.com`, headers `Authorization: Bearer <API
/// key>`, `Content-Type: application/json`, a `User-Agent` (Resend refuses a request without
/// one), `x-batch-validation: permissive` (an email Resend refuses fails alone, the others go) and
/// `Idempotency-Key` (at most 256 characters: the same key with the same body within 24 hours
/// gets the first answer again and sends nothing; with another body, 409
/// `invalid_idempotent_request`). Body: an array of at most 100 emails, each `{"from", "to":
/// [address], "subject", "html", "text", "headers": {"List-Unsubscribe": "<https://…>",
/// "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"}, "tags": [{"name", "value"}]}` (tag
/// names and values: ASCII letters, digits, `_` and `-`). 200 `{"data": [{"id": "…"}…],
/// "errors": [{"index", "message"}…]}`: an id for each email taken, in order, and the refused
/// ones by their index. An error is `{"statusCode", "name", "message"}`: 400/422 a field Resend
/// refuses (`validation_error`, `invalid_from_address`…), 401/403 the key or an unverified
/// domain, 409 the idempotency key (`concurrent_idempotent_requests`: the first request is still
/// at work), 429 the team's rate limit (`retry-after`, `ratelimit-reset` in seconds) or its daily
/// or monthly quota, 5xx Resend's own trouble. A probe is `GET /domains?limit=1` with the same
/// key, which sends nothing: any answer but a 5xx (a key allowed only to send gets 401
/// `restricted_api_key`) says Resend answers.
public struct ResendConfiguration: Sendable {
    public let from: String
    public let baseURL: String
    public let replyTo: String?
    /// The team's request rate (Resend's default: 2 a second), `RESEND_REQUESTS_PER_SECOND`.
    public let requestsPerSecond: Int
    /// How many requests at once (`RESEND_CONNECTIONS`, one HTTP/1 connection each).
    public let connections: Int
    let apiKey: String

    /// Reads `RESEND_API_KEY`, `RESEND_FROM` (`Name <address>` or an address, of a domain verified
    /// with Resend), `RESEND_REPLY_TO`, `RESEND_REQUESTS_PER_SECOND`, `RESEND_CONNECTIONS` and
    /// `RESEND_BASE_URL` (tests).
    /// Nil when neither the key nor the sender is set.
    public init?(environment: Environment) throws(NudgeError) {
        let key = environment["RESEND_API_KEY"]
        let from = environment["RESEND_FROM"]
        if key == nil && from == nil { return nil }
        guard let key, !key.isEmpty else { throw NudgeError(.configuration, "Resend is half configured: RESEND_API_KEY not set") }
        guard let from else { throw NudgeError(.configuration, "Resend is half configured: RESEND_FROM not set") }
        guard Self.isSender(from) else {
            throw NudgeError(.configuration, "RESEND_FROM must be an address or 'Name <address>', not '\(from)'")
        }
        if let replyTo = environment["RESEND_REPLY_TO"], !isDeliverableAddress(replyTo) {
            throw NudgeError(.configuration, "RESEND_REPLY_TO must be an address, not '\(replyTo)'")
        }
        let base = try ProviderHTTP.baseURL(environment, "RESEND_BASE_URL", default: "https://api.resend.com")
        self.apiKey = key
        self.from = from
        self.replyTo = environment["RESEND_REPLY_TO"]
        self.baseURL = base
        self.requestsPerSecond = try environment.integer("RESEND_REQUESTS_PER_SECOND", default: 2, in: 1...1_000)
        self.connections = try environment.integer("RESEND_CONNECTIONS", default: 8, in: 1...100)
    }

    static func isSender(_ text: String) -> Bool {
        if let open = text.lastIndex(of: "<"), text.hasSuffix(">") {
            return isDeliverableAddress(String(text[text.index(after: open)..<text.index(before: text.endIndex)]))
        }
        return isDeliverableAddress(text)
    }
}

/// One email for one address.
public struct EmailRequest: Sendable, Equatable {
    public let to: String
    public let subject: String
    public let html: String
    public let text: String
    /// `List-Unsubscribe`'s address; nil for an email the user may not stop.
    public let unsubscribeURL: String?
    public let tags: [String: String]

    public init(to: String, subject: String, html: String, text: String, unsubscribeURL: String?, tags: [String: String]) {
        self.to = to
        self.subject = subject
        self.html = html
        self.text = text
        self.unsubscribeURL = unsubscribeURL
        self.tags = tags
    }
}

public final class ResendClient: Sendable {
    let configuration: ResendConfiguration
    private let http: ProviderHTTP
    private let client: HTTPClient
    /// This process's own pace, for a client used without a database; a run paces through the
    /// database (`sharedPace`).
    private let localPace: LocalPace
    private let slots: ProviderSlots

    /// How long a send may wait for its turn under the rate limit; longer, and the email waits
    /// in the outbox instead (without spending an attempt).
    static let longestWaitForTurn: Duration = .seconds(2)
    /// How much more unevenly late than their slots two requests may reach Resend: the slots of
    /// `RESEND_REQUESTS_PER_SECOND` + 1 requests span 1.05 s, so that they never make one more
    /// than the rate in a second of Resend's.
    static let arrivalAllowance: Duration = .milliseconds(50)
    /// How long the daily or monthly quota holds every email when Resend does not say.
    static let quotaPause: TimeInterval = 3600
    static let userAgent = "nudge/1.0 (+https://github.com/nudge)"
    /// The longest wait an answer may ask for.
    static let maxWait: TimeInterval = 24 * 3600

    public init(configuration: ResendConfiguration, http: ProviderHTTP) throws(NudgeError) {
        self.configuration = configuration
        self.http = http
        client = try http.makeClient(http2: false, connectionsPerHost: configuration.connections)
        localPace = LocalPace(interval: Self.paceInterval(requestsPerSecond: configuration.requestsPerSecond))
        slots = ProviderSlots(limit: configuration.connections)
    }

    /// The time between two of Resend's slots at `requestsPerSecond`.
    static func paceInterval(requestsPerSecond: Int) -> Duration {
        PaceSpacing.interval(limit: requestsPerSecond, per: .seconds(1), allowance: arrivalAllowance)
    }

    /// The pace every dispatcher shares through `database` (its row `resend` of `provider_pace`):
    /// `RESEND_REQUESTS_PER_SECOND` is the team's rate, whatever the number of processes sending.
    public func sharedPace(_ database: Database, logger: Logger) -> SharedPace {
        SharedPace(provider: "resend", interval: localPace.interval, database: database, logger: logger)
    }

    public func shutdown() async {
        try? await client.shutdown()
    }

    /// The request's JSON body.
    func body(for email: EmailRequest) -> Data {
        var object: [String: Any] = [
            "from": configuration.from,
            "to": [email.to],
            "subject": email.subject,
            "html": email.html,
            "text": email.text,
            "tags": email.tags.sorted { $0.key < $1.key }.map { ["name": Self.tagText($0.key), "value": Self.tagText($0.value)] },
        ]
        if let unsubscribe = email.unsubscribeURL {
            object["headers"] = ["List-Unsubscribe": "<\(unsubscribe)>", "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"]
        }
        if let replyTo = configuration.replyTo { object["reply_to"] = replyTo }
        return (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
    }

    /// A tag's name or value as Resend takes it: ASCII letters, digits, `_` and `-`, 256 at most.
    static func tagText(_ text: String) -> String {
        String(
            text.unicodeScalars.map { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || $0 == "_" || $0 == "-") ? Character($0) : "_" }
                .prefix(256))
    }

    /// The most emails one batch request carries.
    public static let batchLimit = 100
    /// How long after a batch request left it may be sent again under its key: Resend keeps a key
    /// for 24 hours, less an hour's margin.
    public static let keyLifetime: TimeInterval = 23 * 3600

    /// The Idempotency-Key of a new batch of outbox rows: its rows and a nonce of its own, so
    /// that no other batch (of another database, or of the same rows sent again after an answer
    /// that proved nothing was sent) ever has it. Its rows keep it: after a crash they go again
    /// under it.
    public static func batchKey(rows: [Int64], nonce: UUID = UUID()) -> String {
        "nudge-batch-" + Digest.sha256Hex(rows.sorted().map(String.init).joined(separator: ",") + "/" + nonce.uuidString).prefix(32)
    }

    /// Sends up to `batchLimit` emails in one request (`POST /emails/batch`, permissive
    /// validation: an email Resend refuses fails alone) under `key`; each email's answer, in
    /// order. Resend sends nothing twice for one key and body within 24 hours: a request sent
    /// again, after a time-out or a crash, carries the same key and the same emails. The request
    /// takes its turn under `pace` (a run's: `sharedPace`; without one, this process's own) and
    /// does not leave when its turn is more than `longestWaitForTurn` away. `leaving` runs once the
    /// request has its turn and a connection, just before it is written: it records the batch's
    /// rows as having left, or answers why it must not go (Resend found down meanwhile, the claim
    /// on the rows ended); nothing leaves then. The wait for its turn is slept on `waitClock`
    /// (the run's).
    public func sendBatch(
        _ emails: [EmailRequest], key: String, pace: (any ProviderPace)? = nil, waitClock: any WaitClock = SystemWaitClock(),
        leaving: @Sendable () async -> SendResult? = { nil }
    ) async -> [SendResult] {
        guard !emails.isEmpty else { return [] }
        let turn: Duration?
        do {
            turn = try await (pace ?? localPace).reserve(within: Self.longestWaitForTurn)
        } catch {
            let held = SendResult.notSent("Resend: \(describe(error))", after: 1)
            return emails.map { _ in held }
        }
        guard let turn else {
            let held = SendResult.notSent("Resend's rate limit (\(configuration.requestsPerSecond) a second) is used up for now", after: 1)
            return emails.map { _ in held }
        }
        if turn > .zero { try? await waitClock.sleep(for: turn) }
        var request = HTTPClientRequest(url: "\(configuration.baseURL)/emails/batch")
        request.method = .POST
        request.headers.add(name: "authorization", value: "Bearer \(configuration.apiKey)")
        request.headers.add(name: "content-type", value: "application/json")
        request.headers.add(name: "user-agent", value: Self.userAgent)
        request.headers.add(name: "idempotency-key", value: key)
        request.headers.add(name: "x-batch-validation", value: "permissive")
        let bodies = emails.map { String(decoding: body(for: $0), as: UTF8.self) }
        request.body = .bytes(ByteBuffer(string: "[" + bodies.joined(separator: ",") + "]"))
        let http = self.http
        let client = self.client
        let count = emails.count
        let answered = await slots.run { () async -> [SendResult] in
            if let refusal = await leaving() { return Array(repeating: refusal, count: count) }
            do {
                let (head, answer) = try await http.exchangeUntilHead(request, on: client)
                return Self.classifyBatch(status: Int(head.status.code), headers: head.headers, body: answer, count: count)
            } catch {
                // The key makes another attempt safe, whether or not this one arrived.
                return Array(repeating: .unavailable("Resend: \(ProviderHTTP.describe(error))", after: nil), count: count)
            }
        }
        return answered
            ?? Array(
                repeating: .notSent(
                    "Resend: no connection was free for it before the batch's bound (it never left)",
                    after: 1), count: count)
    }

    /// A read that sends nothing (`GET /domains?limit=1`): whether Resend answers again. It takes
    /// its turn under `pace` like any of the team's requests, waiting for it on `waitClock`.
    public func probe(pace: (any ProviderPace)? = nil, waitClock: any WaitClock = SystemWaitClock()) async -> ProbeAnswer {
        do {
            guard let turn = try await (pace ?? localPace).reserve(within: Self.longestWaitForTurn) else {
                return .notAsked("Resend's rate limit (\(configuration.requestsPerSecond) a second) is used up for now")
            }
            if turn > .zero { try? await waitClock.sleep(for: turn) }
        } catch {
            return .notAsked("Resend: \(describe(error))")
        }
        let url = "\(configuration.baseURL)/domains?limit=1"
        let key = configuration.apiKey
        return await http.probe("Resend", on: client, in: slots, reading: Self.probeReading) {
            var request = HTTPClientRequest(url: url)
            request.method = .GET
            request.headers.add(name: "authorization", value: "Bearer \(key)")
            request.headers.add(name: "user-agent", value: Self.userAgent)
            return request
        }
    }

    /// A probe's answer: a key allowed only to send is refused the read (401
    /// `restricted_api_key`), which is an answer; any other 401 or 403 refuses the key itself.
    /// Nil for the usual reading (`ProbeAnswer(_:status:)`).
    static func probeReading(status: Int, body: Data) -> ProbeAnswer? {
        guard status == 401 || status == 403 else { return nil }
        struct Refusal: Decodable { let name: String? }
        let name = (try? JSONDecoder().decode(Refusal.self, from: body))?.name ?? "HTTP \(status)"
        return name == "restricted_api_key" ? .answered("Resend answered \(status) \(name)") : .refused("Resend \(status) \(name)")
    }

    /// A batch's answer, email by email: on 200, `{"data": [{"id"}…], "errors": [{"index",
    /// "message"}…]}`, the ids going, in order, to the emails no error names; otherwise the
    /// request's one answer for every email.
    static func classifyBatch(status: Int, headers: HTTPHeaders, body: Data, count: Int) -> [SendResult] {
        guard status == 200 else {
            let answer = classify(status: status, headers: headers, body: body)
            return Array(repeating: answer, count: count)
        }
        struct Answer: Decodable {
            struct Sent: Decodable { let id: String? }
            struct Refused: Decodable {
                let index: Int
                let message: String?
            }
            let data: [Sent]?
            let errors: [Refused]?
        }
        let answer = try? JSONDecoder().decode(Answer.self, from: body)
        var refused: [Int: String] = [:]
        for error in answer?.errors ?? [] where (0..<count).contains(error.index) {
            refused[error.index] = "Resend refused it in its batch: \(error.message ?? "no reason given")"
        }
        let ids = (answer?.data ?? []).compactMap(\.id)
        guard ids.count + refused.count == count else {
            // Not every email is accounted for: the batch goes again as it was, under its key,
            // and Resend answers it again without sending anything twice.
            return Array(
                repeating: .unavailable(
                    "Resend answered 200 with \(ids.count) ids for \(count - refused.count) emails",
                    after: nil), count: count)
        }
        var taken = 0
        return (0..<count).map { index in
            if let why = refused[index] { return .rejected(why) }
            defer { taken += 1 }
            return .delivered(providerID: ids[taken])
        }
    }

    /// What Resend's answer means for Nudge (Resend's "Errors" reference).
    static func classify(status: Int, headers: HTTPHeaders, body: Data) -> SendResult {
        struct Answer: Decodable {
            let id: String?
            let name: String?
            let message: String?
        }
        let answer = try? JSONDecoder().decode(Answer.self, from: body)
        if status == 200 {
            guard let id = answer?.id, !id.isEmpty else { return .unavailable("Resend answered 200 without an email id", after: nil) }
            return .delivered(providerID: id)
        }
        let name = answer?.name ?? "HTTP \(status)"
        let text = "Resend \(status) \(name)" + ((answer?.message).map { ": \($0)" } ?? "")
        // A wait Resend asks for, within reason: a header that is not a finite number of seconds
        // is ignored, and no wait is longer than a day.
        let retryAfter =
            (ProviderHTTP.retryAfter(headers).map(\.seconds)
            ?? headers.first(name: "ratelimit-reset").flatMap { Double($0.trimmingCharacters(in: .whitespaces)) })
            .flatMap { $0.isFinite && $0 >= 0 ? min($0, maxWait) : nil }
        switch (status, name) {
        case (429, "daily_quota_exceeded"), (429, "monthly_quota_exceeded"):
            return .throttled(text, after: max(retryAfter ?? 0, quotaPause))
        case (429, _):
            // The team's rate: every email waits that long, none spends an attempt.
            return .throttled(text, after: max(retryAfter ?? 1, 0.5))
        case (409, "concurrent_idempotent_requests"):
            // The first request with this key is still at work: wait for it without spending an attempt.
            return .notSent(text, after: max(retryAfter ?? 0, 5))
        case (409, "invalid_idempotent_request"):
            // The key went before with other emails (a batch that lost some of its rows since):
            // what Resend did with them is unknown, and none is sent again.
            return .rejected(TwilioClient.unknownOutcomePrefix + text)
        case (422, "invalid_from_address"), (422, "invalid_access"), (422, "invalid_region"):
            // Nudge's configuration, not this email: Resend is paused and the emails wait.
            return .configuration(text)
        case (401, _), (403, _), (404, _), (405, _):
            // The key, an unverified domain or sender, a wrong RESEND_BASE_URL: configuration.
            return .configuration(text)
        case (408, _):
            return .retry(text, after: retryAfter)
        case (let code, _) where code >= 500:
            return .unavailable(text, after: retryAfter)
        default:
            // 400, 409 (the key used for another email), 422, 451: this email fails, with Resend's words.
            return .rejected(text)
        }
    }
}

// MARK: - Webhooks

/// The secret Resend signs its webhooks with (`RESEND_WEBHOOK_SECRET`, the webhook's "signing
/// secret": `whsec_` and a base64 key).
public struct ResendWebhookSecret: Sendable {
    let key: SymmetricKey

    public init(_ text: String) throws(NudgeError) {
        let encoded = text.hasPrefix("whsec_") ? String(text.dropFirst(6)) : text
        guard let key = Data(base64Encoded: encoded), key.count >= 16 else {
            throw NudgeError(.configuration, "RESEND_WEBHOOK_SECRET must be the webhook's signing secret (whsec_ and a base64 key)")
        }
        self.key = SymmetricKey(data: key)
    }

    /// Reads `RESEND_WEBHOOK_SECRET`; nil when it is not set.
    public static func from(_ environment: Environment) throws(NudgeError) -> ResendWebhookSecret? {
        guard let text = environment["RESEND_WEBHOOK_SECRET"], !text.isEmpty else { return nil }
        return try ResendWebhookSecret(text)
    }
}

/// Resend's webhooks, as Svix delivers them for Resend.
///
/// Wire format: `POST` with the event as a JSON body, `{"type": "email.bounced", "created_at":
/// "2024-11-22T23:41:12.126Z", "data": {"email_id": "…", "created_at": "…", "from": "…", "to":
/// ["address"], "subject": "…", …}}`; `email.bounced` adds `"bounce": {"type": "Permanent" |
/// "Transient" | "Undetermined", "subType": "General" | "NoEmail" | "Suppressed" | "MailboxFull" |
/// …, "message": "…"}`, `email.clicked` adds `"click": {"link", "timestamp", "ipAddress",
/// "userAgent"}`. The email types: `email.sent`, `email.scheduled`, `email.delivered`,
/// `email.delivery_delayed`, `email.complained`, `email.bounced`, `email.opened`,
/// `email.clicked`, `email.failed`, `email.suppressed`, `email.received`; other families
/// (`contact.*`, `domain.*`) exist. Headers: `svix-id` (the message's id, the same on every
/// retry), `svix-timestamp` (the attempt's Unix seconds) and `svix-signature` (space-separated
/// `v1,<base64>` entries, several while a secret rotates; other versions are skipped). The
/// signature is HMAC-SHA256, under the secret's base64-decoded key, of `id.timestamp.body` (the
/// raw body), in standard base64. A timestamp more than 5 minutes from now, either way, is refused.
/// Any 2xx within 15 s is success; anything else is retried (5 s, 5 min, 30 min, 2 h, 5 h, 10 h,
/// 10 h), under the same `svix-id`, with a fresh timestamp and signature.
public enum ResendWebhook {
    public static let path = "/webhooks/resend"
    /// How far a signature's timestamp may be from now.
    public static let tolerance: TimeInterval = 300
    /// The largest event body read.
    public static let largestBody = 256 * 1024

    public enum Refusal: Error, Equatable, CustomStringConvertible {
        case missingHeaders
        case badTimestamp
        case tooOld
        case tooNew
        case noMatchingSignature

        public var description: String {
            switch self {
            case .missingHeaders: "svix-id, svix-timestamp or svix-signature is missing"
            case .badTimestamp: "svix-timestamp is not a number of seconds"
            case .tooOld: "svix-timestamp is more than 5 minutes old"
            case .tooNew: "svix-timestamp is more than 5 minutes ahead"
            case .noMatchingSignature: "no svix-signature matches RESEND_WEBHOOK_SECRET"
            }
        }
    }

    /// The `v1` signature of a message, as `svix-signature` carries it.
    public static func signature(id: String, timestamp: String, body: [UInt8], secret: ResendWebhookSecret) -> String {
        "v1,"
            + Data(HMAC<SHA256>.authenticationCode(for: signed(id: id, timestamp: timestamp, body: body), using: secret.key))
            .base64EncodedString()
    }

    /// Checks a delivery's headers against its raw body: its timestamp within the tolerance of
    /// `now`, and one of its `v1` signatures the secret's (compared in constant time).
    public static func verify(
        id: String?, timestamp: String?, signatures: String?, body: [UInt8], secret: ResendWebhookSecret,
        now: Date
    ) throws(Refusal) {
        guard let id, !id.isEmpty, let timestamp, let signatures else { throw .missingHeaders }
        guard let seconds = Int64(timestamp) else { throw .badTimestamp }
        let age = now.timeIntervalSince1970 - TimeInterval(seconds)
        if age > tolerance { throw .tooOld }
        if age < -tolerance { throw .tooNew }
        let content = signed(id: id, timestamp: timestamp, body: body)
        for entry in signatures.split(separator: " ") {
            let parts = entry.split(separator: ",", maxSplits: 1)
            guard parts.count == 2, parts[0] == "v1", let given = Data(base64Encoded: String(parts[1])),
                given.count == SHA256.byteCount
            else { continue }
            if HMAC<SHA256>.isValidAuthenticationCode(given, authenticating: content, using: secret.key) { return }
        }
        throw .noMatchingSignature
    }

    private static func signed(id: String, timestamp: String, body: [UInt8]) -> Data {
        var content = Data("\(id).\(timestamp).".utf8)
        content.append(contentsOf: body)
        return content
    }

    /// What Nudge reads of an event.
    public struct Event: Sendable, Equatable {
        /// `email.delivered`, `email.bounced`…
        public let type: String
        /// The id Resend answered the send with (`notification_logs.provider_id`); nil for an
        /// event of another family.
        public let emailID: String?
        /// When it happened (`created_at`), nil when the body does not say.
        public let occurredAt: Date?
        /// The first recipient, lowercased.
        public let to: String?
        public let bounceType: String?
        public let bounceSubType: String?
        public let bounceMessage: String?

        /// A hard bounce: the address does not take mail.
        public var isHardBounce: Bool { type == "email.bounced" && bounceType == "Permanent" }
    }

    /// The event in a body, or nil when the body is not one (not JSON, no `type`).
    public static func parse(_ body: [UInt8]) -> Event? {
        guard case .object(let event)? = JSONValue.parse(String(decoding: body, as: UTF8.self)),
            case .string(let type)? = event["type"]
        else { return nil }
        func string(_ value: JSONValue?) -> String? {
            if case .string(let text)? = value, !text.isEmpty { return text }
            return nil
        }
        var data: [String: JSONValue] = [:]
        if case .object(let object)? = event["data"] { data = object }
        var bounce: [String: JSONValue] = [:]
        if case .object(let object)? = data["bounce"] { bounce = object }
        var to: String?
        if case .array(let addresses)? = data["to"] { to = string(addresses.first) } else { to = string(data["to"]) }
        return Event(
            type: type, emailID: type.hasPrefix("email.") ? string(data["email_id"]) : nil,
            occurredAt: string(event["created_at"]).flatMap(timestamp),
            to: to.map { $0.trimmingCharacters(in: .whitespaces).lowercased() },
            bounceType: string(bounce["type"]), bounceSubType: string(bounce["subType"]),
            bounceMessage: string(bounce["message"]))
    }

    /// An ISO 8601 instant as Resend writes them (`2024-11-22T23:41:12.126Z`,
    /// `2024-11-22T23:41:11.894719+00:00`): the fraction is read to the microsecond.
    static func timestamp(_ text: String) -> Date? {
        var whole = text
        var fraction = 0.0
        if let dot = text.firstIndex(of: "."), let end = text[dot...].firstIndex(where: { !$0.isNumber && $0 != "." }) {
            fraction = Double("0" + text[dot..<end]) ?? 0
            whole = String(text[..<dot] + text[end...])
        }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: whole).map { $0.addingTimeInterval(fraction) }
    }
}
