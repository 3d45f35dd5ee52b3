import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Synchronization

/// Resend, the email API (seed 003 Feature 7).
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
/// or monthly quota, 5xx Resend's own trouble.
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
        let key = environment["RESEND_API_KEY"], from = environment["RESEND_FROM"]
        if key == nil && from == nil { return nil }
        guard let key, !key.isEmpty else { throw NudgeError(.configuration, "Resend is half configured: RESEND_API_KEY not set") }
        guard let from else { throw NudgeError(.configuration, "Resend is half configured: RESEND_FROM not set") }
        guard Self.isSender(from) else {
            throw NudgeError(.configuration, "RESEND_FROM must be an address or 'Name <address>', not '\(from)'")
        }
        if let replyTo = environment["RESEND_REPLY_TO"], !isDeliverableAddress(replyTo) {
            throw NudgeError(.configuration, "RESEND_REPLY_TO must be an address, not '\(replyTo)'")
        }
        var base = environment["RESEND_BASE_URL"] ?? "https://api.resend.com"
        while base.hasSuffix("/") { base.removeLast() }
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
    private let pace: SendPace
    private let slots: ProviderSlots

    /// How long a send may wait for its turn under the rate limit; longer, and the email waits
    /// in the outbox instead (without spending an attempt).
    static let longestWaitForTurn: Duration = .seconds(2)
    /// How long the daily or monthly quota holds every email when Resend does not say.
    static let quotaPause: TimeInterval = 3600
    static let userAgent = "nudge/1.0 (+https://github.com/nudge)"
    /// The longest wait an answer may ask for.
    static let maxWait: TimeInterval = 24 * 3600

    public init(configuration: ResendConfiguration, http: ProviderHTTP) throws(NudgeError) {
        self.configuration = configuration
        self.http = http
        client = try http.makeClient(http2: false, connectionsPerHost: configuration.connections)
        pace = SendPace(perSecond: configuration.requestsPerSecond)
        slots = ProviderSlots(limit: configuration.connections)
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
        String(text.unicodeScalars.map { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || $0 == "_" || $0 == "-") ? Character($0) : "_" }
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
    /// again, after a time-out or a crash, carries the same key and the same emails. `leaving`
    /// runs once the request has its turn and a connection, just before it is written: it records
    /// the batch's rows as having left, or answers false when it must not go (the claim on them
    /// ended); nothing leaves then.
    public func sendBatch(_ emails: [EmailRequest], key: String, leaving: @Sendable () async -> Bool = { true }) async -> [SendResult] {
        guard !emails.isEmpty else { return [] }
        if let wait = pace.reserve(within: Self.longestWaitForTurn) {
            if wait > .zero { try? await Task.sleep(for: wait) }
        } else {
            let held = SendResult.notSent("Resend's rate limit (\(configuration.requestsPerSecond) a second) is used up for now", after: 1)
            return emails.map { _ in held }
        }
        var request = HTTPClientRequest(url: "\(configuration.baseURL)/emails/batch")
        request.method = .POST
        request.headers.add(name: "authorization", value: "Bearer \(configuration.apiKey)")
        request.headers.add(name: "content-type", value: "application/json")
        request.headers.add(name: "user-agent", value: Self.userAgent)
        request.headers.add(name: "idempotency-key", value: key)
        request.headers.add(name: "x-batch-validation", value: "permissive")
        let bodies = emails.map { String(decoding: body(for: $0), as: UTF8.self) }
        request.body = .bytes(ByteBuffer(string: "[" + bodies.joined(separator: ",") + "]"))
        let http = self.http, client = self.client, count = emails.count
        let answered = await slots.run { () async -> [SendResult] in
            guard await leaving() else {
                return Array(repeating: .notSent("the claim on its rows ended before their batch left", after: 1), count: count)
            }
            do {
                let (head, answer) = try await http.exchangeUntilHead(request, on: client)
                return Self.classifyBatch(status: Int(head.status.code), headers: head.headers, body: answer, count: count)
            } catch {
                // The key makes another attempt safe, whether or not this one arrived.
                return Array(repeating: .unavailable("Resend: \(ProviderHTTP.describe(error))", after: nil), count: count)
            }
        }
        return answered ?? Array(repeating: .notSent("Resend: no connection was free for it before the batch's bound (it never left)",
                                                     after: 1), count: count)
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
            return Array(repeating: .unavailable("Resend answered 200 with \(ids.count) ids for \(count - refused.count) emails",
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
        let retryAfter = (ProviderHTTP.retryAfter(headers).map(\.seconds)
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

/// Spaces requests evenly at a rate per second, shared by every task of a run: each takes the
/// next free slot, or none when that slot is further away than it may wait.
final class SendPace: Sendable {
    private let interval: Duration
    private let next = Mutex(ContinuousClock.now)

    init(perSecond: Int) {
        interval = .seconds(1) / max(1, perSecond)
    }

    /// How long to wait for a slot, which is then taken; nil (nothing taken) when the wait
    /// would be longer than `limit`.
    func reserve(within limit: Duration) -> Duration? {
        next.withLock { next in
            let now = ContinuousClock.now
            let slot = max(next, now)
            let wait = now.duration(to: slot)
            guard wait <= limit else { return nil }
            next = slot + interval
            return wait
        }
    }
}
