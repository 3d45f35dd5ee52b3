import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// Twilio, the SMS channel of call previews (docs/jobs/dispatch.md, "SMS (Twilio)").
///
/// Wire format: `POST /2010-04-01/Accounts/{AccountSid}/Messages.json` on `api.twilio.com`,
/// HTTP Basic authentication (an API key's SID and secret, or the account SID and its auth
/// token), a form-encoded body
/// (`application/x-www-form-urlencoded`): `To` (E.164), `From` (a Twilio number) or
/// `MessagingServiceSid` (`MG…`), `Body`, `StatusCallback`, the URL Twilio posts the
/// message's statuses to, and `ValidityPeriod` (seconds Twilio may queue it, 1 to 36,000). 201 `{"sid": "SM…", "status": "queued", …}`; an error is `{"code",
/// "message", "more_info", "status"}`: 400 a number or body Twilio refuses (21211 not a valid
/// `To`, 21610 the user replied STOP, 21614 not a mobile), 401/403 the account (20003), 429
/// (20429) too many requests, which Twilio never processed, 5xx Twilio's own trouble.
///
/// Twilio has no idempotency key: a request that may have reached it is never repeated blindly.
/// An answer that says the message was not taken (429, a connection that was never made) is
/// retried; after a time-out or a 5xx once the request left, Twilio is asked (`find`: `GET
/// Messages.json?To=…&PageSize=20`, the newest first, each with its `sid`, `to`, `body`,
/// `direction` and `date_created` in RFC 2822) whether it has the message before it goes again.
/// A probe is `GET …/Messages.json?PageSize=1` (the newest message), which sends nothing.
public struct TwilioConfiguration: Sendable {
    public let accountSID: String
    /// `TWILIO_FROM`: a number in E.164, or a Messaging Service (`MG…`).
    public let from: String
    public let baseURL: String
    /// Where Twilio posts a message's statuses (`nudge serve`'s `/webhooks/twilio`); nil without
    /// `NUDGE_PUBLIC_URL`.
    public let statusCallback: String?
    /// How many requests at once (`TWILIO_CONNECTIONS`, one HTTP/1 connection each): beyond the
    /// account's concurrency limit Twilio answers 429 (20429) and takes nothing.
    public let connections: Int
    /// Whether the jobs send with an API key (`TWILIO_API_KEY_SID`, `TWILIO_API_KEY_SECRET`): the
    /// account's auth token then only signs Twilio's callbacks, in `nudge serve` (docs/serve.md).
    public let usesAPIKey: Bool
    /// HTTP Basic authentication's user and password: the API key's SID and secret, or else the
    /// account's SID and auth token.
    let credentials: (user: String, password: String)

    /// Who the requests authenticate as: the API key's SID, or the account's (never a secret).
    public var credentialID: String { credentials.user }

    /// `Authorization` for each request to Twilio's REST API.
    var authorization: String {
        "Basic " + Data("\(credentials.user):\(credentials.password)".utf8).base64EncodedString()
    }

    /// Reads `TWILIO_ACCOUNT_SID`, `TWILIO_API_KEY_SID` and `TWILIO_API_KEY_SECRET` (or, without a
    /// key, `TWILIO_AUTH_TOKEN`), `TWILIO_FROM`, `TWILIO_CONNECTIONS`, `TWILIO_BASE_URL` (tests)
    /// and `NUDGE_PUBLIC_URL` (for the status callbacks). Nil when none of them is set.
    public init?(environment: Environment) throws(NudgeError) {
        let sid = environment["TWILIO_ACCOUNT_SID"]
        let token = environment["TWILIO_AUTH_TOKEN"]
        let from = environment["TWILIO_FROM"]
        let keySID = environment["TWILIO_API_KEY_SID"].flatMap { $0.isEmpty ? nil : $0 }
        let keySecret = environment["TWILIO_API_KEY_SECRET"].flatMap { $0.isEmpty ? nil : $0 }
        if sid == nil && token == nil && from == nil && keySID == nil && keySecret == nil { return nil }
        guard let sid, sid.hasPrefix("AC"), sid.count == 34 else {
            throw NudgeError(.configuration, "TWILIO_ACCOUNT_SID must be the account's SID (AC and 32 characters)")
        }
        switch (keySID, keySecret) {
        case (let key?, let secret?):
            guard key.hasPrefix("SK"), key.count == 34 else {
                throw NudgeError(.configuration, "TWILIO_API_KEY_SID must be an API key's SID (SK and 32 characters)")
            }
            credentials = (key, secret)
            usesAPIKey = true
        case (nil, nil):
            guard let token, !token.isEmpty else {
                throw NudgeError(
                    .configuration,
                    """
                    Twilio is half configured: set TWILIO_API_KEY_SID and TWILIO_API_KEY_SECRET (an API key for sending), \
                    or TWILIO_AUTH_TOKEN
                    """)
            }
            credentials = (sid, token)
            usesAPIKey = false
        default:
            throw NudgeError(.configuration, "Twilio is half configured: TWILIO_API_KEY_SID and TWILIO_API_KEY_SECRET go together")
        }
        guard let from, from.hasPrefix("MG") || PhoneNumber(from)?.e164 == from else {
            throw NudgeError(.configuration, "TWILIO_FROM must be a number in E.164 (+15551234567) or a Messaging Service SID (MG…)")
        }
        let base = try ProviderHTTP.baseURL(environment, "TWILIO_BASE_URL", default: "https://api.twilio.com")
        self.accountSID = sid
        self.from = from
        self.baseURL = base
        self.connections = try environment.integer("TWILIO_CONNECTIONS", default: 20, in: 1...100)
        self.statusCallback = try environment["NUDGE_PUBLIC_URL"].map { url throws(NudgeError) in
            try PublicURL(url).url + TwilioWebhook.path
        }
    }
}

/// One SMS for one number.
public struct SMSRequest: Sendable, Equatable {
    public let to: PhoneNumber
    public let body: String
    /// The outbox row: the status callback names it, so that the statuses of a message whose
    /// SID Nudge never learnt (the answer was lost) still find its log.
    public let outboxID: Int64
    /// Until when Twilio may keep trying to deliver it; past that the SMS is not delivered at
    /// all ("calling in 5 min" hours late misleads). Nil: as long as Twilio keeps any.
    public let validUntil: Date?

    public init(to: PhoneNumber, body: String, outboxID: Int64, validUntil: Date? = nil) {
        self.to = to
        self.body = body
        self.outboxID = outboxID
        self.validUntil = validUntil
    }

    /// Twilio's `ValidityPeriod` for a request leaving at `now`: the seconds left until
    /// `validUntil`, 1 to 36,000.
    public func validFor(at now: Date) -> Int {
        guard let validUntil else { return 36_000 }
        return Int(min(36_000, DispatchRules.keepFor(until: validUntil, at: now)))
    }
}

public final class TwilioClient: Sendable {
    let configuration: TwilioConfiguration
    private let http: ProviderHTTP
    private let client: HTTPClient
    private let slots: ProviderSlots

    public init(configuration: TwilioConfiguration, http: ProviderHTTP) throws(NudgeError) {
        self.configuration = configuration
        self.http = http
        client = try http.makeClient(http2: false, connectionsPerHost: configuration.connections)
        slots = ProviderSlots(limit: configuration.connections)
    }

    public func shutdown() async {
        try? await client.shutdown()
    }

    /// The status callback's address for one row.
    func statusCallback(for request: SMSRequest) -> String? {
        configuration.statusCallback.map { "\($0)?outbox=\(request.outboxID)" }
    }

    /// The request's form fields as it leaves at `now`, in the order they are sent.
    func fields(for request: SMSRequest, at now: Date) -> [(String, String)] {
        var fields = [("To", request.to.e164)]
        fields.append(configuration.from.hasPrefix("MG") ? ("MessagingServiceSid", configuration.from) : ("From", configuration.from))
        fields.append(("Body", request.body))
        if let callback = statusCallback(for: request) { fields.append(("StatusCallback", callback)) }
        fields.append(("ValidityPeriod", String(request.validFor(at: now))))
        return fields
    }

    /// Sends `sms` once a connection is free for it. `leaving` runs then, just before the
    /// request is written: it records that the SMS is leaving (Twilio has no idempotency key), or
    /// answers why it must not (nil: it goes). A request that never got a connection before its
    /// task was cancelled did not leave, and says so. `clock`: the run's, which what is left of
    /// the SMS's shelf life is read from as it leaves.
    public func send(
        _ sms: SMSRequest, clock: any RunClock = SystemClock(),
        leaving: @Sendable () async -> SendResult? = { nil }
    ) async -> SendResult {
        let sent = await slots.run { () async -> SendResult in
            if let refusal = await leaving() { return refusal }
            // The batch's bound came meanwhile: it does not leave (its mark goes with this answer).
            if Task.isCancelled { return .notSent(Self.boundBeforeLeaving, after: 1) }
            // Once it leaves, only its own time-out ends it: a batch's bound that cut it on the
            // wire would leave its outcome unknown (most of them delivered). A task of its own
            // does not inherit the batch's cancellation.
            let exchange = Task { await self.exchange(sms, at: clock.now()) }
            return await exchange.value
        }
        return sent ?? .notSent("Twilio: no connection was free for it before the batch's bound (it never left)", after: 1)
    }

    private func exchange(_ sms: SMSRequest, at now: Date) async -> SendResult {
        var request = HTTPClientRequest(url: "\(configuration.baseURL)/2010-04-01/Accounts/\(configuration.accountSID)/Messages.json")
        request.method = .POST
        request.headers.add(name: "authorization", value: configuration.authorization)
        request.headers.add(name: "content-type", value: "application/x-www-form-urlencoded")
        request.headers.add(name: "user-agent", value: ResendClient.userAgent)
        request.body = .bytes(ByteBuffer(string: FormEncoding.encode(fields(for: sms, at: now))))
        do {
            let (head, answer) = try await http.exchange(request, on: client)
            return Self.classify(status: Int(head.status.code), headers: head.headers, body: answer)
        } catch {
            let why = ProviderHTTP.describe(error)
            if Self.neverLeft(error) { return .unavailable("Twilio: \(why)" + Self.neverLeftNote, after: nil) }
            return .unavailable("Twilio: \(why)" + Self.askedBeforeAgain, after: nil)
        }
    }

    /// What an SMS whose request left without a clear answer waits for.
    static let askedBeforeAgain = "; the SMS may have been sent: Twilio is asked before it goes again"
    /// How an answer says its request never reached Twilio (no connection was made).
    public static let neverLeftNote = " (the request never left)"
    /// The batch's bound came after the request was marked as leaving, before it left.
    public static let boundBeforeLeaving = "Twilio: the batch's bound came before it left"

    /// How long after a request left Twilio's message list is taken to show it: until then, a
    /// list without it may only be late (the request itself may take the HTTP time-out).
    public static let listShowsAfter: TimeInterval = 180
    /// How long after Twilio answered a request with an error its list is taken to show it.
    public static let listShowsAfterAnAnswer: TimeInterval = 15

    /// Whether Twilio answered the request without saying whether it took it (a 5xx, a 200
    /// without a SID), as opposed to giving no answer at all.
    public static func answeredUnclearly(_ result: SendResult) -> Bool {
        guard case .unavailable(let why, _) = result else { return false }
        return why.hasPrefix("Twilio 5") || why.hasPrefix("Twilio answered")
    }

    /// What Twilio's message list says of an SMS whose request left at `leftAt` without a
    /// clear answer.
    public enum Found: Sendable, Equatable {
        /// Twilio has it: its SID.
        case sent(String)
        /// Twilio has no such message: the request never reached it.
        case absent
        /// Twilio did not say (an error, no answer): why, and its answer as a send's (a 5xx or
        /// none: unavailable; 429: throttled; 401, 403, 404: configuration).
        case unanswered(String, SendResult)
        /// It was not asked: no connection was free before the batch's bound.
        case notAsked(String)
    }

    /// A read that sends nothing (`GET …/Messages.json?PageSize=1`, the newest message): whether
    /// Twilio answers again. The message list, not the account: a Standard API key may read the
    /// one and not the other.
    public func probe() async -> ProbeAnswer {
        let url = "\(configuration.baseURL)/2010-04-01/Accounts/\(configuration.accountSID)/Messages.json?PageSize=1"
        let authorization = configuration.authorization
        return await http.probe("Twilio", on: client, in: slots, reading: Self.probeReading) {
            var request = HTTPClientRequest(url: url)
            request.method = .GET
            request.headers.add(name: "authorization", value: authorization)
            request.headers.add(name: "user-agent", value: ResendClient.userAgent)
            return request
        }
    }

    /// A probe's answer: 401 or 403 refuses the credentials; nil for the usual reading
    /// (`ProbeAnswer(_:status:)`).
    static func probeReading(status: Int, body: Data) -> ProbeAnswer? {
        status == 401 || status == 403 ? .refused("Twilio \(status): the account refused its credentials") : nil
    }

    /// Asks Twilio for the newest messages to the SMS's number and looks for one with its body
    /// created since `leftAt` (less two minutes for the clocks' difference). `leftAt` is when
    /// Nudge recorded the request as leaving, so a message found was made by that request or a
    /// later one; none means Twilio never took it.
    public func find(_ sms: SMSRequest, leftAt: Date) async -> Found {
        let to = FormEncoding.escape(sms.to.e164)
        var request = HTTPClientRequest(url: "\(configuration.baseURL)/2010-04-01/Accounts/\(configuration.accountSID)/Messages.json?To=\(to)&PageSize=20")
        request.method = .GET
        request.headers.add(name: "authorization", value: configuration.authorization)
        request.headers.add(name: "user-agent", value: ResendClient.userAgent)
        let http = self.http
        let client = self.client
        let answered = await slots.run { () async -> Found in
            do {
                let (head, body) = try await http.exchange(request, on: client)
                guard head.status.code == 200 else {
                    let answer = Self.classify(status: Int(head.status.code), headers: head.headers, body: body)
                    return .unanswered("Twilio answered \(head.status.code) to the list of messages", answer)
                }
                return Self.find(sms, since: leftAt.addingTimeInterval(-120), in: body)
            } catch {
                let why = "Twilio's list of messages: \(ProviderHTTP.describe(error))"
                return .unanswered(why, .unavailable(why, after: nil))
            }
        }
        return answered ?? .notAsked("Twilio: no connection was free to ask for its list of messages before the batch's bound")
    }

    /// The message of `sms` created since `since` in a page of Twilio's message list.
    static func find(_ sms: SMSRequest, since: Date, in body: Data) -> Found {
        struct Page: Decodable {
            struct Message: Decodable {
                let sid: String?
                let to: String?
                let body: String?
                let direction: String?
                let date_created: String?
            }
            let messages: [Message]?
        }
        guard let page = try? JSONDecoder().decode(Page.self, from: body), let messages = page.messages else {
            let why = "Twilio's list of messages was not one"
            return .unanswered(why, .unavailable(why, after: nil))
        }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss Z"
        for message in messages {
            guard let sid = message.sid, message.to == sms.to.e164, message.body == sms.body,
                message.direction?.hasPrefix("outbound") ?? false,
                let created = message.date_created.flatMap(formatter.date(from:)), created >= since
            else { continue }
            return .sent(sid)
        }
        return .absent
    }

    static let unknownOutcomePrefix = "outcome unknown: "

    /// Whether Twilio refused the SMS because its number replied STOP (error 21610).
    public static func isOptOut(_ result: SendResult) -> Bool {
        guard case .rejected(let why) = result else { return false }
        return why.hasPrefix("Twilio 400 21610")
    }

    static func unknownOutcome(_ why: String) -> String {
        unknownOutcomePrefix + "\(why); the SMS may have been sent, and is not sent again (Twilio has no idempotency key)"
    }

    /// Whether an exchange failed before its request could reach Twilio: no connection was made.
    static func neverLeft(_ error: any Error) -> Bool {
        if let error = error as? HTTPClientError, error == .connectTimeout { return true }
        if error is NIOConnectionError { return true }
        if let error = error as? ChannelError, case .connectTimeout = error { return true }
        if let error = error as? IOError, [ECONNREFUSED, ENETUNREACH, EHOSTUNREACH].contains(error.errnoCode) { return true }
        return false
    }

    /// What Twilio's answer means for Nudge (Twilio's "API responses" and error dictionary).
    static func classify(status: Int, headers: HTTPHeaders, body: Data) -> SendResult {
        struct Answer: Decodable {
            let sid: String?
            let code: Int?
            let message: String?
        }
        let answer = try? JSONDecoder().decode(Answer.self, from: body)
        if status == 200 || status == 201 {
            guard let sid = answer?.sid, !sid.isEmpty else {
                return .unavailable("Twilio answered \(status) without a message SID" + askedBeforeAgain, after: nil)
            }
            return .delivered(providerID: sid)
        }
        let code = answer?.code
        // Twilio's message may quote the number: never logged whole.
        let text = "Twilio \(status)" + (code.map { " \($0)" } ?? "") + ((answer?.message).map { ": \(PhoneNumber.scrub($0))" } ?? "")
        let retryAfter = ProviderHTTP.retryAfter(headers).map(\.seconds).flatMap { $0.isFinite ? min($0, 3600) : nil }
        switch (status, code) {
        case (429, _), (_, 20429?):
            // Too many requests: Twilio processed nothing, so the SMS waits and goes again.
            return .throttled(text, after: max(retryAfter ?? 1, 0.5))
        case (401, _), (403, _), (404, _), (_, 20003?), (_, 20404?):
            // The account, the token or TWILIO_BASE_URL: configuration. Twilio is paused, SMS wait.
            return .configuration(text)
        case (400, 21606?), (400, 21212?), (400, 21659?):
            // TWILIO_FROM is not a number of this account that can send SMS.
            return .configuration(text)
        case (let code, _) where code >= 500:
            // Twilio's own trouble: the SMS waits (no attempt spent), and Twilio is asked
            // whether it took it before it goes again.
            return .unavailable(text + askedBeforeAgain, after: retryAfter)
        default:
            // A number Twilio refuses (21211, 21610 STOP, 21614), a body it refuses: this SMS fails.
            return .rejected(text)
        }
    }
}

/// `application/x-www-form-urlencoded`: every byte but the unreserved ones percent-encoded.
enum FormEncoding {
    static func encode(_ fields: [(String, String)]) -> String {
        fields.map { escape($0.0) + "=" + escape($0.1) }.joined(separator: "&")
    }

    static func escape(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.append(Character(Unicode.Scalar(byte)))
            default:
                out += String(format: "%%%02X", byte)
            }
        }
        return out
    }

    /// A form body's fields; nil when it is not a form (a bad escape, not UTF-8).
    static func decode(_ body: String) -> [(String, String)]? {
        var fields: [(String, String)] = []
        for pair in body.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = unescape(String(parts[0])), let value = unescape(parts.count > 1 ? String(parts[1]) : "") else {
                return nil
            }
            fields.append((name, value))
        }
        return fields
    }

    static func unescape(_ text: String) -> String? {
        text.replacingOccurrences(of: "+", with: " ").removingPercentEncoding
    }
}

/// Twilio's status callbacks (`POST /webhooks/twilio` on `nudge serve`): a form with
/// `MessageSid`, `MessageStatus` (`queued`, `sent`, `delivered`, `undelivered`, `failed`…) and,
/// for a failure, `ErrorCode`; signed in `X-Twilio-Signature`: the Base64 HMAC-SHA1, under the
/// auth token, of the full URL Twilio posted to followed by each field's name and value, sorted
/// by name.
public enum TwilioWebhook {
    public static let path = "/webhooks/twilio"

    public static func signature(url: String, fields: [(String, String)], authToken: String) -> String {
        let mac = HMAC<Insecure.SHA1>.authenticationCode(
            for: subject(url: url, fields: fields),
            using: SymmetricKey(data: Data(authToken.utf8)))
        return Data(mac).base64EncodedString()
    }

    /// Whether `signature` is Twilio's for this request (compared in constant time).
    public static func isGenuine(signature: String?, url: String, fields: [(String, String)], authToken: String) -> Bool {
        guard let signature, let given = Data(base64Encoded: signature), given.count == Insecure.SHA1.byteCount else { return false }
        return HMAC<Insecure.SHA1>.isValidAuthenticationCode(
            given, authenticating: subject(url: url, fields: fields),
            using: SymmetricKey(data: Data(authToken.utf8)))
    }

    /// What is signed: the URL, then each field's name and value, sorted by name.
    private static func subject(url: String, fields: [(String, String)]) -> Data {
        var subject = url
        for (name, value) in fields.sorted(by: { ($0.0, $0.1) < ($1.0, $1.1) }) {
            subject += name + value
        }
        return Data(subject.utf8)
    }

    /// What a status means for the SMS's `notification_logs` row: `delivered`, `failed`, or
    /// nothing to record (a status on the way).
    public static func logStatus(_ status: String) -> String? {
        switch status {
        case "delivered", "read": "delivered"
        case "undelivered", "failed", "canceled": "failed"
        default: nil
        }
    }
}
