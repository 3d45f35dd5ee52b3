import Crypto
import Foundation
import NIOHTTP1
import Synchronization

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A local Twilio: `POST /2010-04-01/Accounts/{AccountSid}/Messages.json` as Twilio's API takes
/// it. It checks HTTP Basic authentication against its account SID and auth token, or its API
/// key's SID and secret (401, code 20003; `authenticatedWith` says which each request used), the form body (`application/x-www-form-urlencoded`): `To` in E.164 (400, 21211),
/// `From` or `MessagingServiceSid` (400, 21603), `Body` present and at most 1,600 characters
/// (400, 21602 / 21617), `StatusCallback` an http(s) URL (400, 21609). Each message it takes
/// gets a SID (`SM` and 32 hex digits) and a 201 with Twilio's JSON. A script can answer
/// otherwise (a 429 with code 20429, a 500, silence). `GET` on the same resource lists the
/// messages it took, newest first, as Twilio's message list does (`To` and `PageSize` filter
/// it; each message with `sid`, `to`, `from`, `body`, `status`, `direction` and `date_created`
/// in RFC 2822); `listing` can answer otherwise (an error, silence). `GET` on the account
/// (`/2010-04-01/Accounts/{AccountSid}.json`, what a probe asks) answers its JSON, or as
/// `account` says.
///
/// `report` posts a status callback for a message to its `StatusCallback`, as Twilio does: a
/// form with `MessageSid`, `MessageStatus`, `ErrorCode`, signed in `X-Twilio-Signature`
/// (Base64 HMAC-SHA1 under the auth token of the URL and the sorted fields), or signed with
/// another token, or not signed at all.
public final class StandInTwilio: Sendable {
    public struct Message: Sendable {
        public let sid: String
        /// The form's fields, decoded.
        public let fields: [String: String]
        /// How many requests with this `To` and `Body` came, this one included.
        public let attempt: Int

        public var to: String? { fields["To"] }
        public var from: String? { fields["From"] }
        public var messagingServiceSID: String? { fields["MessagingServiceSid"] }
        public var body: String? { fields["Body"] }
        public var statusCallback: String? { fields["StatusCallback"] }
        public var validityPeriod: Int? { fields["ValidityPeriod"].flatMap { Int($0) } }
        /// When it came.
        public let receivedAt: Date
    }

    public enum Answer: Sendable {
        case accept
        /// Takes the message (it counts as sent) and never answers: a crash or a time-out after
        /// the request left.
        case acceptSilently
        /// A Twilio error: HTTP status, Twilio's code, message, extra headers.
        case reject(status: Int, code: Int, message: String, headers: [(String, String)] = [])
        /// No answer, nothing sent.
        case hang
    }

    public typealias Script = @Sendable (Message) -> Answer

    public let accountSID: String
    public let authToken: String
    /// An API key of the account (`SK…`) and its secret, which authenticate requests as the auth
    /// token does.
    public let apiKeySID: String
    public let apiKeySecret: String
    private let server: StandInHTTPServer
    /// One more each time a request has been recorded (its answer is then on its way): what a
    /// test waits on.
    public var changes: Changes { server.changes }
    private let state: State

    public var baseURL: String { "http://127.0.0.1:\(server.port)" }
    public var port: Int { server.port }

    /// The messages it took (sent), in order.
    public var sent: [Message] { state.log.withLock { $0.sent } }
    /// Every request to the Messages resource, answered or not.
    public var requests: [Message] { state.log.withLock { $0.requests } }
    /// How many times its message list was asked for.
    public var listings: Int { state.log.withLock { $0.listings } }
    /// The user of each authenticated request's Basic authentication (the account SID, or the
    /// API key's SID), in order.
    public var authenticatedWith: [String] { state.log.withLock { $0.users } }
    /// How many times its message list was read without a number (`PageSize=1`: a probe).
    public var probes: Int { state.log.withLock { $0.probes } }
    /// How many times its account was read.
    public var accountReads: Int { state.log.withLock { $0.accountReads } }

    final class State: Sendable {
        struct Log {
            var sent: [Message] = []
            var requests: [Message] = []
            var attempts: [String: Int] = [:]
            var listings = 0
            var accountReads = 0
            var probes = 0
            var users: [String] = []
        }
        let keys: [String: String]

        init(keys: [String: String]) {
            self.keys = keys
        }

        /// The user of `header`'s HTTP Basic authentication, when it names a known user with its
        /// password.
        func user(_ header: String?) -> String? {
            guard let header, header.hasPrefix("Basic "), let data = Data(base64Encoded: String(header.dropFirst(6))),
                let text = String(data: data, encoding: .utf8), let colon = text.firstIndex(of: ":"),
                let password = keys[String(text[..<colon])], password == String(text[text.index(after: colon)...])
            else { return nil }
            return String(text[..<colon])
        }

        /// Whether `header` is HTTP Basic authentication with a known user and its password.
        func authenticates(_ header: String?) -> Bool {
            guard let header, header.hasPrefix("Basic "), let data = Data(base64Encoded: String(header.dropFirst(6))),
                let text = String(data: data, encoding: .utf8), let colon = text.firstIndex(of: ":"),
                let password = keys[String(text[..<colon])], password == String(text[text.index(after: colon)...])
            else { return false }
            log.withLock { $0.users.append(String(text[..<colon])) }
            return true
        }
        let log = Mutex(Log())
    }

    private init(
        accountSID: String, authToken: String, apiKeySID: String, apiKeySecret: String, server: StandInHTTPServer,
        state: State
    ) {
        self.accountSID = accountSID
        self.authToken = authToken
        self.apiKeySID = apiKeySID
        self.apiKeySecret = apiKeySecret
        self.server = server
        self.state = state
    }

    public static func start(
        port: Int = 0,
        accountSID: String = "AC" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased(),
        authToken: String = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased(),
        apiKeySID: String = "SK" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased(),
        apiKeySecret: String = UUID().uuidString.replacingOccurrences(of: "-", with: ""),
        onSent: (@Sendable (Message) -> Void)? = nil, latency: Duration = .zero,
        listing: @escaping @Sendable () -> Answer = { .accept },
        account: @escaping @Sendable () -> Answer = { .accept },
        script: @escaping Script = { _ in .accept }
    ) async throws -> StandInTwilio {
        let state = State(keys: [accountSID: authToken, apiKeySID: apiKeySecret])
        let server = try await StandInHTTPServer.start(port: port) { request in
            if request.method == .GET, request.path == "/2010-04-01/Accounts/\(accountSID).json" {
                return (readAccount(request, accountSID: accountSID, authToken: authToken, state: state, answer: account()), latency)
            }
            if request.method == .GET {
                return (list(request, accountSID: accountSID, authToken: authToken, state: state, answer: listing()), latency)
            }
            return (reply(request, accountSID: accountSID, authToken: authToken, state: state, onSent: onSent, script: script), latency)
        }
        return StandInTwilio(
            accountSID: accountSID, authToken: authToken, apiKeySID: apiKeySID, apiKeySecret: apiKeySecret,
            server: server, state: state)
    }

    public func shutdown() async {
        await server.shutdown()
    }

    private static func error(_ status: Int, _ code: Int, _ message: String, headers: [(String, String)] = []) -> StandInHTTPServer.Reply {
        .respond(
            status: status, headers: headers,
            body: standInJSON([
                "code": code, "message": message, "more_info": "https://www.twilio.com/docs/errors/\(code)", "status": status,
            ]))
    }

    private static func reply(
        _ request: StandInHTTPServer.Request, accountSID: String, authToken: String, state: State,
        onSent: (@Sendable (Message) -> Void)?, script: Script
    ) -> StandInHTTPServer.Reply {
        let path = "/2010-04-01/Accounts/\(accountSID)/Messages.json"
        guard request.path == path else { return error(404, 20404, "The requested resource \(request.path) was not found") }
        guard request.method == .POST else { return error(405, 20004, "Method not allowed") }
        guard state.authenticates(request.headers["authorization"]) else { return error(401, 20003, "Authenticate") }
        guard request.headers["content-type"]?.hasPrefix("application/x-www-form-urlencoded") == true,
            let fields = form(String(decoding: request.body, as: UTF8.self))
        else {
            return error(400, 20001, "The request body is not a form")
        }
        guard let to = fields["To"], to.range(of: #"^\+[1-9][0-9]{6,14}$"#, options: .regularExpression) != nil else {
            return error(400, 21211, "Invalid 'To' Phone Number: \(fields["To"] ?? "")")
        }
        guard fields["From"] != nil || fields["MessagingServiceSid"] != nil else {
            return error(400, 21603, "A 'From' phone number is required.")
        }
        guard let body = fields["Body"], !body.isEmpty else { return error(400, 21602, "Message body is required.") }
        guard body.count <= 1600 else { return error(400, 21617, "The concatenated message body exceeds the 1600 character limit.") }
        if let callback = fields["StatusCallback"] {
            guard let url = URL(string: callback), ["http", "https"].contains(url.scheme ?? ""), url.host != nil else {
                return error(400, 21609, "Invalid StatusCallback URL")
            }
        }
        let counter = to + "\n" + body
        let attempt = state.log.withLock { log -> Int in
            log.attempts[counter, default: 0] += 1
            return log.attempts[counter]!
        }
        let hex = (UUID().uuidString + UUID().uuidString).replacingOccurrences(of: "-", with: "").lowercased().prefix(32)
        let message = Message(sid: "SM" + hex, fields: fields, attempt: attempt, receivedAt: Date())
        state.log.withLock { $0.requests.append(message) }
        func take() {
            state.log.withLock { $0.sent.append(message) }
            onSent?(message)
        }
        switch script(message) {
        case .accept:
            take()
            var answer: [String: Any] = [
                "sid": message.sid, "account_sid": accountSID, "to": to, "body": body, "status": "queued",
                "direction": "outbound-api", "api_version": "2010-04-01", "error_code": NSNull(), "error_message": NSNull(),
                "uri": "/2010-04-01/Accounts/\(accountSID)/Messages/\(message.sid).json",
            ]
            answer["from"] = fields["From"] ?? NSNull()
            answer["messaging_service_sid"] = fields["MessagingServiceSid"] ?? NSNull()
            return .respond(status: 201, headers: [], body: standInJSON(answer))
        case .acceptSilently:
            take()
            return .silence
        case .reject(let status, let code, let text, let headers):
            return error(status, code, text, headers: headers)
        case .hang:
            return .silence
        }
    }

    /// `GET` the account: its JSON, after its credentials are checked.
    private static func readAccount(
        _ request: StandInHTTPServer.Request, accountSID: String, authToken: String, state: State,
        answer: Answer
    ) -> StandInHTTPServer.Reply {
        // As Twilio's: a Standard API key may not read the account resource.
        guard let user = state.user(request.headers["authorization"]), !user.hasPrefix("SK") else {
            return error(401, 20003, "Authenticate")
        }
        state.log.withLock {
            $0.accountReads += 1
            $0.users.append(user)
        }
        switch answer {
        case .reject(let status, let code, let text, let headers): return error(status, code, text, headers: headers)
        case .hang, .acceptSilently: return .silence
        case .accept: break
        }
        return .respond(
            status: 200, headers: [],
            body: standInJSON([
                "sid": accountSID, "owner_account_sid": accountSID, "friendly_name": "FitCircle", "status": "active", "type": "Full",
                "date_created": "Thu, 01 Jan 2026 00:00:00 +0000", "uri": "/2010-04-01/Accounts/\(accountSID).json",
            ]))
    }

    /// `GET Messages.json`: the messages taken, newest first, filtered by `To`, at most `PageSize` (50).
    private static func list(
        _ request: StandInHTTPServer.Request, accountSID: String, authToken: String, state: State,
        answer: Answer
    ) -> StandInHTTPServer.Reply {
        let parts = request.path.split(separator: "?", maxSplits: 1)
        guard parts.first.map(String.init) == "/2010-04-01/Accounts/\(accountSID)/Messages.json" else {
            return error(404, 20404, "The requested resource \(request.path) was not found")
        }
        guard state.authenticates(request.headers["authorization"]) else { return error(401, 20003, "Authenticate") }
        state.log.withLock { log in
            log.listings += 1
            if !request.path.contains("To=") { log.probes += 1 }
        }
        switch answer {
        case .reject(let status, let code, let text, let headers): return error(status, code, text, headers: headers)
        case .hang, .acceptSilently: return .silence
        case .accept: break
        }
        let query = parts.count > 1 ? form(String(parts[1])) ?? [:] : [:]
        let size = min(max(query["PageSize"].flatMap { Int($0) } ?? 50, 1), 1000)
        let stamp = DateFormatter()
        stamp.locale = Locale(identifier: "en_US_POSIX")
        stamp.timeZone = TimeZone(identifier: "UTC")
        stamp.dateFormat = "EEE, dd MMM yyyy HH:mm:ss Z"
        let messages = state.log.withLock { $0.sent }.reversed().filter { query["To"] == nil || $0.to == query["To"] }.prefix(size)
        let listed: [[String: Any]] = messages.map { message in
            [
                "sid": message.sid, "account_sid": accountSID, "to": message.to ?? "", "from": message.from ?? NSNull(),
                "body": message.body ?? "", "status": "sent", "direction": "outbound-api",
                "date_created": stamp.string(from: message.receivedAt), "date_sent": stamp.string(from: message.receivedAt),
            ]
        }
        return .respond(
            status: 200, headers: [],
            body: standInJSON([
                "messages": listed, "page": 0, "page_size": size, "next_page_uri": NSNull(),
                "uri": "/2010-04-01/Accounts/\(accountSID)/Messages.json",
            ]))
    }

    /// A form body's fields (the last of a repeated name wins); nil when it is not one.
    static func form(_ body: String) -> [String: String]? {
        var fields: [String: String] = [:]
        for pair in body.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = parts[0].replacingOccurrences(of: "+", with: " ").removingPercentEncoding,
                let value = (parts.count > 1 ? String(parts[1]) : "").replacingOccurrences(of: "+", with: " ").removingPercentEncoding
            else { return nil }
            fields[name] = value
        }
        return fields
    }

    /// How a status callback is signed.
    public enum Signing: Sendable {
        case genuine
        /// Signed with another auth token.
        case forged
        case unsigned
    }

    /// Posts `status` for `message` to its `StatusCallback`, as Twilio would; returns the HTTP
    /// status the receiver answered with.
    public func report(_ message: Message, status: String, errorCode: String? = nil, signing: Signing = .genuine) async throws -> Int {
        guard let callback = message.statusCallback, let url = URL(string: callback) else {
            throw StandInError("the message has no StatusCallback")
        }
        var fields = [
            ("AccountSid", accountSID), ("MessageSid", message.sid), ("SmsSid", message.sid),
            ("MessageStatus", status), ("SmsStatus", status), ("To", message.to ?? ""), ("ApiVersion", "2010-04-01"),
        ]
        if let from = message.from { fields.append(("From", from)) }
        if let errorCode { fields.append(("ErrorCode", errorCode)) }
        return try await post(fields, to: url, signing: signing)
    }

    /// Relays a reply `body` from the number `from` to `url`, as Twilio posts an incoming message
    /// to the number's "A message comes in" webhook (with Advanced Opt-Out, `OptOutType` says
    /// what the reply did: STOP, START, HELP); returns the HTTP status the receiver answered with.
    public func relay(reply body: String, from: String, to url: String, optOutType: String? = nil) async throws -> Int {
        guard let target = URL(string: url) else { throw StandInError("not a URL: \(url)") }
        let hex = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        var fields = [
            ("AccountSid", accountSID), ("MessageSid", "SM" + hex), ("SmsSid", "SM" + hex), ("SmsMessageSid", "SM" + hex),
            ("SmsStatus", "received"), ("From", from), ("To", "+15005550006"), ("Body", body), ("NumMedia", "0"),
            ("NumSegments", "1"), ("ApiVersion", "2010-04-01"),
        ]
        if let optOutType { fields.append(("OptOutType", optOutType)) }
        return try await post(fields, to: target, signing: .genuine)
    }

    /// Posts a form to `url` as Twilio does, signed as `signing` says.
    private func post(_ fields: [(String, String)], to url: URL, signing: Signing) async throws -> Int {
        let callback = url.absoluteString
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        request.setValue("TwilioProxy/1.1", forHTTPHeaderField: "User-Agent")
        switch signing {
        case .genuine:
            request.setValue(Self.signature(url: callback, fields: fields, authToken: authToken), forHTTPHeaderField: "X-Twilio-Signature")
        case .forged:
            request.setValue(Self.signature(url: callback, fields: fields, authToken: "not-" + authToken), forHTTPHeaderField: "X-Twilio-Signature")
        case .unsigned:
            break
        }
        let allowed = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~"))
        request.httpBody = Data(
            fields.map { name, value in
                name + "=" + (value.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")
            }.joined(separator: "&").utf8)
        request.timeoutInterval = 10
        let (_, response) = try await URLSession.shared.data(for: request)
        return (response as? HTTPURLResponse)?.statusCode ?? 0
    }

    /// Twilio's request signature: Base64 of HMAC-SHA1, under the auth token, of the URL followed
    /// by each field's name and value, sorted by name.
    static func signature(url: String, fields: [(String, String)], authToken: String) -> String {
        let signed = fields.sorted { ($0.0, $0.1) < ($1.0, $1.1) }.reduce(url) { $0 + $1.0 + $1.1 }
        return Data(HMAC<Insecure.SHA1>.authenticationCode(for: Data(signed.utf8), using: SymmetricKey(data: Data(authToken.utf8))))
            .base64EncodedString()
    }
}

struct StandInError: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) {
        self.description = description
    }
}
