import Crypto
import Foundation
import FoundationNetworking
import NIOHTTP1
import Synchronization

/// A local Resend: `POST /emails` and `POST /emails/batch` as Resend's API takes them. It checks `Authorization: Bearer`
/// against its API key (403 `invalid_api_key`), asks for a `User-Agent` (as Resend does: 403
/// without one), and validates the body: `from`, `to`, `subject`, `html` or `text`
/// (422 `missing_required_field`), tags of ASCII letters, digits, `_` and `-` (422
/// `validation_error`). `Idempotency-Key` works as Resend's does: the same key with the same
/// body gets the first answer again and sends nothing; with another body, 409
/// `invalid_idempotent_request`. Each email it takes gets an id (`{"id": …}`); a script can
/// answer otherwise (a 429 with `retry-after`, a 500, a 422, silence). `GET /domains` lists the
/// team's one domain, the sender's (`{"object": "list", "has_more": false, "data": [{"id",
/// "name", "status": "verified", …}]}`), or answers as `reading` says: what a probe asks.
public final class StandInResend: Sendable {
    public struct Email: Sendable {
        public let id: String
        /// The request body, parsed.
        public let fields: [String: any Sendable]
        public let body: Data
        public let idempotencyKey: String?
        public let userAgent: String?
        /// How many requests with this idempotency key (or body, without one) came, this one included.
        public let attempt: Int

        public var from: String? { fields["from"] as? String }
        public var to: [String] { (fields["to"] as? [String]) ?? ((fields["to"] as? String).map { [$0] } ?? []) }
        public var subject: String? { fields["subject"] as? String }
        public var html: String? { fields["html"] as? String }
        public var text: String? { fields["text"] as? String }
        public var headers: [String: String] { (fields["headers"] as? [String: String]) ?? [:] }
        public var tags: [String: String] {
            var tags: [String: String] = [:]
            for tag in (fields["tags"] as? [[String: String]]) ?? [] {
                if let name = tag["name"], let value = tag["value"] { tags[name] = value }
            }
            return tags
        }
    }

    public enum Answer: Sendable {
        case accept
        /// Takes the email (it counts as sent) and never answers: a crash or a time-out after
        /// the request left.
        case acceptSilently
        /// A Resend error: status, name, message, extra headers (`retry-after`, `ratelimit-reset`).
        case reject(status: Int, name: String, message: String, headers: [(String, String)] = [])
        /// No answer, nothing sent.
        case hang
    }

    public typealias Script = @Sendable (Email) -> Answer

    public let apiKey: String
    private let server: StandInHTTPServer
    /// One more each time a request has been recorded (its answer is then on its way): what a
    /// test waits on.
    public var changes: Changes { server.changes }
    private let state: State

    public var baseURL: String { "http://127.0.0.1:\(server.port)" }
    public var port: Int { server.port }

    /// The emails it took (sent), in order.
    public var sent: [Email] { state.log.withLock { $0.sent } }
    /// Every email of every request to `POST /emails` or `POST /emails/batch`, answered or not.
    public var requests: [Email] { state.log.withLock { $0.requests } }
    /// How many HTTP requests came (a batch is one).
    public var requestCount: Int { state.log.withLock { $0.httpRequests } }
    /// When each of those requests had arrived whole, on this process's clock (in the order they
    /// were answered: sort them for the order they came in).
    public var arrivals: [ContinuousClock.Instant] { state.log.withLock { $0.arrivals } }
    /// How many times its domains were read (`GET /domains`), answered or not.
    public var reads: Int { state.log.withLock { $0.reads } }

    final class State: Sendable {
        struct Log {
            var sent: [Email] = []
            var requests: [Email] = []
            var attempts: [String: Int] = [:]
            var httpRequests = 0
            var reads = 0
            var arrivals: [ContinuousClock.Instant] = []
            /// Per idempotency key: the body and the answer given.
            var keys: [String: (body: Data, answer: Data)] = [:]
        }
        let log = Mutex(Log())
    }

    private init(apiKey: String, server: StandInHTTPServer, state: State) {
        self.apiKey = apiKey
        self.server = server
        self.state = state
    }

    public static func start(
        port: Int = 0, apiKey: String = "re_standin_\(UUID().uuidString.prefix(8))",
        onSent: (@Sendable (Email) -> Void)? = nil,
        reading: @escaping @Sendable () -> Answer = { .accept },
        script: @escaping Script = { _ in .accept }
    ) async throws -> StandInResend {
        let state = State()
        let server = try await StandInHTTPServer.start(port: port) { request in
            if request.method == .GET, request.path.split(separator: "?").first == "/domains" {
                return (domains(request, apiKey: apiKey, state: state, answer: reading()), .zero)
            }
            return (reply(request, apiKey: apiKey, state: state, onSent: onSent, script: script), .zero)
        }
        return StandInResend(apiKey: apiKey, server: server, state: state)
    }

    public func shutdown() async {
        await server.shutdown()
    }

    private static func error(_ status: Int, _ name: String, _ message: String, headers: [(String, String)] = []) -> StandInHTTPServer.Reply {
        .respond(status: status, headers: headers, body: standInJSON(["statusCode": status, "name": name, "message": message]))
    }

    /// `GET /domains`: the team's domains (one), after the key and the `User-Agent` are checked.
    private static func domains(
        _ request: StandInHTTPServer.Request, apiKey: String, state: State,
        answer: Answer
    ) -> StandInHTTPServer.Reply {
        guard let authorization = request.headers["authorization"] else {
            return error(401, "missing_api_key", "Missing API key in the authorization header.")
        }
        guard authorization == "Bearer \(apiKey)" else { return error(403, "invalid_api_key", "API key is invalid.") }
        guard let agent = request.headers["user-agent"], !agent.isEmpty else {
            return error(403, "validation_error", "The request is missing a User-Agent header.")
        }
        state.log.withLock { $0.reads += 1 }
        switch answer {
        case .reject(let status, let name, let message, let headers): return error(status, name, message, headers: headers)
        case .hang, .acceptSilently: return .silence
        case .accept: break
        }
        return .respond(
            status: 200, headers: [],
            body: standInJSON([
                "object": "list", "has_more": false,
                "data": [
                    [
                        "id": "d91cd9bd-1176-453e-8fc1-35364d380206", "name": "fitcircle.example", "status": "verified",
                        "created_at": "2026-01-01 00:00:00.000000+00", "region": "us-east-1",
                    ]
                ],
            ]))
    }

    private static func reply(
        _ request: StandInHTTPServer.Request, apiKey: String, state: State,
        onSent: (@Sendable (Email) -> Void)?, script: Script
    ) -> StandInHTTPServer.Reply {
        guard request.path == "/emails" || request.path == "/emails/batch" else {
            return error(404, "not_found", "The requested endpoint does not exist.")
        }
        guard request.method == .POST else { return error(405, "method_not_allowed", "Method is not allowed for the requested path.") }
        guard let authorization = request.headers["authorization"] else {
            return error(401, "missing_api_key", "Missing API key in the authorization header.")
        }
        guard authorization == "Bearer \(apiKey)" else { return error(403, "invalid_api_key", "API key is invalid.") }
        guard let agent = request.headers["user-agent"], !agent.isEmpty else {
            return error(403, "validation_error", "The request is missing a User-Agent header.")
        }
        state.log.withLock { log in
            log.httpRequests += 1
            log.arrivals.append(request.receivedAt)
        }
        let key = request.headers["idempotency-key"]
        if let key, key.isEmpty || key.count > 256 {
            return error(400, "invalid_idempotency_key", "The key must be between 1-256 chars.")
        }
        if request.path == "/emails/batch" {
            return batch(request, key: key, agent: agent, state: state, onSent: onSent, script: script)
        }
        guard let object = try? JSONSerialization.jsonObject(with: request.body) as? [String: Any] else {
            return error(422, "validation_error", "The request body is not a JSON object.")
        }
        if let (status, name, message) = problem(object) { return error(status, name, message) }
        let earlier = seen(key, body: request.body, state: state)
        let attempt = count(key ?? String(decoding: request.body, as: UTF8.self), state: state)
        let id = UUID().uuidString.lowercased()
        let email = Email(id: id, fields: fields(object), body: request.body, idempotencyKey: key, userAgent: agent, attempt: attempt)
        state.log.withLock { $0.requests.append(email) }
        if let earlier { return earlier }
        let answer = standInJSON(["id": id])
        func take() {
            state.log.withLock { log in
                log.sent.append(email)
                if let key { log.keys[key] = (request.body, answer) }
            }
            onSent?(email)
        }
        switch script(email) {
        case .accept:
            take()
            return .respond(status: 200, headers: [], body: answer)
        case .acceptSilently:
            take()
            return .silence
        case .reject(let status, let name, let message, let headers):
            return error(status, name, message, headers: headers)
        case .hang:
            return .silence
        }
    }

    /// A key seen before: the first answer again for the same body (nothing sent), 409 for
    /// another body. Nil for a new key.
    private static func seen(_ key: String?, body: Data, state: State) -> StandInHTTPServer.Reply? {
        state.log.withLock { log -> StandInHTTPServer.Reply? in
            guard let key, let seen = log.keys[key] else { return nil }
            return seen.body == body
                ? .respond(status: 200, headers: [], body: seen.answer)
                : error(409, "invalid_idempotent_request", "Same idempotency key used with a different request payload.")
        }
    }

    private static func count(_ counter: String, state: State) -> Int {
        state.log.withLock { log -> Int in
            log.attempts[counter, default: 0] += 1
            return log.attempts[counter]!
        }
    }

    /// `POST /emails/batch`: an array of 1 to 100 emails. Strict validation (the default)
    /// refuses the whole batch for one invalid email; `x-batch-validation: permissive` takes the
    /// valid ones and names the others in `errors` by index. The script answers per email: a 422
    /// refuses that email alone; any other refusal, silence or a hang answers for the whole
    /// request (the first one met).
    private static func batch(
        _ request: StandInHTTPServer.Request, key: String?, agent: String, state: State,
        onSent: (@Sendable (Email) -> Void)?, script: Script
    ) -> StandInHTTPServer.Reply {
        guard let list = try? JSONSerialization.jsonObject(with: request.body) as? [[String: Any]] else {
            return error(422, "validation_error", "The request body must be an array of emails.")
        }
        guard (1...100).contains(list.count) else { return error(422, "validation_error", "A batch holds 1 to 100 emails.") }
        let permissive = request.headers["x-batch-validation"] == "permissive"
        let earlier = seen(key, body: request.body, state: state)
        let attempt = count(key ?? String(decoding: request.body, as: UTF8.self), state: state)
        var refused: [Int: String] = [:]
        var emails: [(index: Int, email: Email)] = []
        for (index, object) in list.enumerated() {
            if let (status, name, message) = problem(object) {
                guard permissive else { return error(status, name, message) }
                refused[index] = message
                continue
            }
            let body = (try? JSONSerialization.data(withJSONObject: object)) ?? Data()
            emails.append(
                (
                    index,
                    Email(
                        id: UUID().uuidString.lowercased(), fields: fields(object), body: body, idempotencyKey: key,
                        userAgent: agent, attempt: attempt)
                ))
        }
        state.log.withLock { $0.requests += emails.map(\.email) }
        if let earlier { return earlier }
        var silent = false
        for (index, email) in emails {
            switch script(email) {
            case .accept:
                break
            case .acceptSilently:
                silent = true
            case .reject(422, _, let message, _) where permissive:
                refused[index] = message
            case .reject(let status, let name, let message, let headers):
                return error(status, name, message, headers: headers)
            case .hang:
                return .silence
            }
        }
        let taken = emails.filter { refused[$0.index] == nil }.map(\.email)
        let answer = standInJSON([
            "data": taken.map { ["id": $0.id] },
            "errors": refused.keys.sorted().map { ["index": $0, "message": refused[$0]!] as [String: Any] },
        ])
        state.log.withLock { log in
            log.sent += taken
            if let key { log.keys[key] = (request.body, answer) }
        }
        for email in taken { onSent?(email) }
        return silent ? .silence : .respond(status: 200, headers: [], body: answer)
    }

    /// What Resend refuses in one email: its status, name and message; nil when it takes it.
    private static func problem(_ object: [String: Any]) -> (Int, String, String)? {
        let missing = ["from", "to", "subject"].filter { object[$0] == nil }
        if !missing.isEmpty { return (422, "missing_required_field", "Missing `\(missing.joined(separator: "`, `"))` field.") }
        if object["html"] == nil && object["text"] == nil {
            return (422, "missing_required_field", "Missing `html` or `text` field.")
        }
        let allowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
        for tag in (object["tags"] as? [[String: String]]) ?? [] {
            for text in [tag["name"] ?? "", tag["value"] ?? ""] where text.isEmpty || text.unicodeScalars.contains(where: { !allowed.contains($0) }) {
                return (422, "validation_error", "Tags should only contain ASCII letters, numbers, underscores, or dashes.")
            }
        }
        return nil
    }

    /// An email's fields, as the tests read them.
    private static func fields(_ object: [String: Any]) -> [String: any Sendable] {
        var fields: [String: any Sendable] = [:]
        for (name, value) in object {
            switch value {
            case let text as String: fields[name] = text
            case let list as [String]: fields[name] = list
            case let headers as [String: String]: fields[name] = headers
            case let tags as [[String: String]]: fields[name] = tags
            default: fields[name] = "\(value)"
            }
        }
        return fields
    }
}

// MARK: - Webhooks

extension StandInResend {
    /// Posts `type` (`email.delivered`, `email.opened`, `email.bounced`…) for `email` to `url`, as
    /// Resend's webhooks come (through Svix): the event as JSON, `svix-id`, `svix-timestamp` and
    /// `svix-signature` (`v1,` and the base64 HMAC-SHA256 of `id.timestamp.body` under the key
    /// `secret` holds after `whsec_`). Returns the HTTP status the receiver answered with.
    public func notify(
        _ email: Email, type: String, to url: URL, secret: String, bounce: (type: String, subType: String)? = nil,
        at instant: Date = Date()
    ) async throws -> Int {
        let stamp = ISO8601DateFormatter()
        stamp.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        var data: [String: Any] = [
            "email_id": email.id, "created_at": stamp.string(from: instant), "from": email.from ?? "",
            "to": email.to, "subject": email.subject ?? "",
        ]
        if let bounce {
            data["bounce"] = [
                "type": bounce.type, "subType": bounce.subType,
                "message": "The recipient's mail server rejected the email: the mailbox does not exist.",
            ]
        }
        let body = try JSONSerialization.data(
            withJSONObject: ["type": type, "created_at": stamp.string(from: instant), "data": data],
            options: [.sortedKeys])
        let id = "msg_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let timestamp = String(Int(Date().timeIntervalSince1970))
        guard let key = Data(base64Encoded: String(secret.dropFirst("whsec_".count))) else { throw StandInError("not a webhook secret") }
        var signed = Data("\(id).\(timestamp).".utf8)
        signed.append(body)
        let signature = Data(HMAC<SHA256>.authenticationCode(for: signed, using: SymmetricKey(data: key))).base64EncodedString()
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.setValue("Svix-Webhooks/1.0", forHTTPHeaderField: "User-Agent")
        request.setValue(id, forHTTPHeaderField: "svix-id")
        request.setValue(timestamp, forHTTPHeaderField: "svix-timestamp")
        request.setValue("v1,\(signature)", forHTTPHeaderField: "svix-signature")
        request.httpBody = body
        request.timeoutInterval = 10
        let (_, response) = try await URLSession.shared.data(for: request)
        return (response as? HTTPURLResponse)?.statusCode ?? 0
    }

    /// A new webhook signing secret, as Resend shows one.
    public static func makeWebhookSecret() -> String {
        "whsec_" + Data((0..<24).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
    }
}
