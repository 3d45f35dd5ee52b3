import CryptoExtras
import Foundation
import Synchronization

/// A local Firebase Cloud Messaging, with the OAuth2 token endpoint a service account's
/// `token_uri` names. It makes its own service account (an RSA key) and writes the JSON file
/// Google's tools read (`GOOGLE_APPLICATION_CREDENTIALS`), its `token_uri` pointing here.
///
/// `POST /token`: the JWT-bearer grant (`grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`,
/// `assertion` an RS256 JWT from the account's key with `iss` its client email, the
/// firebase.messaging `scope`, `aud` the token URI, integer `iat` and `exp` an hour at most
/// apart), answered with an access token. `POST /v1/projects/<project>/messages:send`: the HTTP
/// v1 API, `authorization: Bearer` an access token it issued, a message with a token (or a
/// topic), a notification, string-only `data` and an `android` block; answered `{"name": …}` or,
/// as the script says, an FCM error with its `FcmError` detail. A request with `"validate_only":
/// true` is validated and sent nowhere, answered `{"name": "projects/…/messages/fake_message_id"}`:
/// it goes to the script too (`Request.validateOnly`), and is counted in `validations`, never in
/// `requests`.
public final class StandInFCM: Sendable {
    public struct Request: Sendable {
        public let deviceToken: String
        public let message: [String: String]
        /// The whole request body.
        public let body: Data
        public let accessToken: String
        public let attempt: Int
        /// A request validated only (`"validate_only": true`): FCM sends it nowhere.
        public let validateOnly: Bool

        public var data: [String: String] {
            guard let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any],
                let message = object["message"] as? [String: Any]
            else { return [:] }
            return (message["data"] as? [String: String]) ?? [:]
        }

        /// `android.collapse_key`.
        public var collapseKey: String? {
            guard let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any],
                let message = object["message"] as? [String: Any], let android = message["android"] as? [String: Any]
            else { return nil }
            return android["collapse_key"] as? String
        }
    }

    public enum Answer: Sendable {
        case accept
        /// An FCM error: the HTTP status, the `FcmError` code (`UNREGISTERED`) or the status
        /// (`INVALID_ARGUMENT`), a message, and a `retry-after`.
        case reject(status: Int, code: String, message: String = "", retryAfter: String? = nil)
        /// No answer for longer than any client waits.
        case hang
        /// A 200's head and the start of its body, then nothing more.
        case stallAfterHead
    }

    public typealias Script = @Sendable (Request) -> Answer

    public let projectID: String
    public let clientEmail: String
    private let server: StandInHTTPServer
    /// One more each time a request has been recorded (its answer is then on its way): what a
    /// test waits on.
    public var changes: Changes { server.changes }
    private let state: State
    private let privateKeyPEM: String

    public var baseURL: String { "http://127.0.0.1:\(server.port)" }
    public var tokenURI: String { baseURL + "/token" }

    public var requests: [Request] { state.log.withLock { $0.requests } }
    public var requestCount: Int { state.log.withLock { $0.count } }
    /// How many requests to validate only came (answered or not).
    public var validations: Int { state.log.withLock { $0.validations } }
    /// The access tokens the token endpoint issued, in order.
    public var issuedTokens: [String] { state.log.withLock { $0.issued } }

    final class State: Sendable {
        struct Log {
            var requests: [Request] = []
            var count = 0
            var validations = 0
            var attempts: [String: Int] = [:]
            var issued: [String] = []
        }
        let log = Mutex(Log())
    }

    private init(projectID: String, clientEmail: String, server: StandInHTTPServer, state: State, privateKeyPEM: String) {
        self.projectID = projectID
        self.clientEmail = clientEmail
        self.server = server
        self.state = state
        self.privateKeyPEM = privateKeyPEM
    }

    public static func start(
        port: Int = 0, projectID: String = "nudge-standin", record: Bool = true,
        script: @escaping Script = { _ in .accept }
    ) async throws -> StandInFCM {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let publicKey = key.publicKey
        let clientEmail = "dispatch@\(projectID).iam.gserviceaccount.com"
        let state = State()
        let portBox = Mutex(0)
        let server = try await StandInHTTPServer.start(port: port) { request in
            let tokenURI = "http://127.0.0.1:\(portBox.withLock { $0 })/token"
            if request.path == "/token" {
                return (tokenReply(request, publicKey: publicKey, clientEmail: clientEmail, tokenURI: tokenURI, state: state), .zero)
            }
            let sendPath = "/v1/projects/\(projectID)/messages:send"
            guard request.path == sendPath else {
                return (error(404, status: "NOT_FOUND", message: "Requested entity was not found."), .zero)
            }
            return sendReply(request, projectID: projectID, state: state, record: record, script: script)
        }
        portBox.withLock { $0 = server.port }
        return StandInFCM(
            projectID: projectID, clientEmail: clientEmail, server: server, state: state,
            privateKeyPEM: key.pkcs8PEMRepresentation)
    }

    public func shutdown() async {
        await server.shutdown()
    }

    /// The service-account JSON, as Google's console issues it.
    public func serviceAccountJSON() -> Data {
        standInJSON([
            "type": "service_account", "project_id": projectID, "private_key_id": "standin-key-1",
            "private_key": privateKeyPEM, "client_email": clientEmail, "client_id": "100000000000000000000",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth", "token_uri": tokenURI,
        ])
    }

    public func writeServiceAccount(to path: String) throws {
        try serviceAccountJSON().write(to: URL(fileURLWithPath: path))
    }

    private static func error(
        _ status: Int, status text: String, code: String? = nil, message: String,
        retryAfter: String? = nil
    ) -> StandInHTTPServer.Reply {
        var error: [String: Any] = ["code": status, "message": message, "status": text]
        if let code {
            error["details"] = [["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code]]
        }
        return .respond(status: status, headers: retryAfter.map { [("retry-after", $0)] } ?? [], body: standInJSON(["error": error]))
    }

    private static func tokenReply(
        _ request: StandInHTTPServer.Request, publicKey: _RSA.Signing.PublicKey, clientEmail: String,
        tokenURI: String, state: State
    ) -> StandInHTTPServer.Reply {
        let form = Dictionary(
            String(decoding: request.body, as: UTF8.self).split(separator: "&").compactMap { pair -> (String, String)? in
                let parts = pair.split(separator: "=", maxSplits: 1).map { String($0).removingPercentEncoding ?? String($0) }
                return parts.count == 2 ? (parts[0], parts[1]) : nil
            }, uniquingKeysWith: { first, _ in first })
        func refuse(_ why: String) -> StandInHTTPServer.Reply {
            .respond(status: 400, headers: [], body: standInJSON(["error": "invalid_grant", "error_description": why]))
        }
        guard form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer", let assertion = form["assertion"] else {
            return refuse("Invalid grant_type or missing assertion")
        }
        let parts = assertion.split(separator: ".", omittingEmptySubsequences: false)
        struct Header: Decodable { let alg: String }
        struct Claims: Decodable {
            let iss: String
            let scope: String
            let aud: String
            let iat: Int
            let exp: Int
        }
        guard parts.count == 3, let headerData = StandInAPNs.base64URL(parts[0]), let claimsData = StandInAPNs.base64URL(parts[1]),
            let signatureData = StandInAPNs.base64URL(parts[2]),
            let header = try? JSONDecoder().decode(Header.self, from: headerData), header.alg == "RS256",
            publicKey.isValidSignature(
                _RSA.Signing.RSASignature(rawRepresentation: signatureData),
                for: Data("\(parts[0]).\(parts[1])".utf8), padding: .insecurePKCS1v1_5)
        else { return refuse("Invalid JWT Signature.") }
        guard let claims = try? JSONDecoder().decode(Claims.self, from: claimsData) else { return refuse("Invalid JWT claims") }
        guard claims.iss == clientEmail else { return refuse("Invalid issuer") }
        guard claims.aud == tokenURI else { return refuse("Invalid audience") }
        guard claims.scope.split(separator: " ").contains("https://www.googleapis.com/auth/firebase.messaging") else {
            return refuse("Invalid scope")
        }
        guard claims.exp > claims.iat, claims.exp - claims.iat <= 3600 else { return refuse("Invalid JWT: exp too far from iat") }
        let token = state.log.withLock { log -> String in
            let token = "ya29.standin-\(log.issued.count + 1)-\(UUID().uuidString.prefix(8))"
            log.issued.append(token)
            return token
        }
        return .respond(
            status: 200, headers: [],
            body: standInJSON(["access_token": token, "expires_in": 3599, "token_type": "Bearer"]))
    }

    private static func sendReply(
        _ request: StandInHTTPServer.Request, projectID: String, state: State, record: Bool,
        script: Script
    ) -> (reply: StandInHTTPServer.Reply, latency: Duration) {
        guard let authorization = request.headers["authorization"], authorization.hasPrefix("Bearer "),
            state.log.withLock({ $0.issued.contains(String(authorization.dropFirst("Bearer ".count))) })
        else {
            return (
                error(
                    401, status: "UNAUTHENTICATED",
                    message: "Request had invalid authentication credentials. Expected OAuth 2 access token."), .zero
            )
        }
        guard let object = try? JSONSerialization.jsonObject(with: request.body) as? [String: Any],
            let message = object["message"] as? [String: Any]
        else {
            return (error(400, status: "INVALID_ARGUMENT", message: "Invalid JSON payload received."), .zero)
        }
        let validateOnly = (object["validate_only"] ?? object["validateOnly"]) as? Bool ?? false
        let topic = (message["topic"] as? String).flatMap { $0.isEmpty ? nil : $0 }
        guard let token = (message["token"] as? String).flatMap({ $0.isEmpty ? nil : $0 }) ?? topic.map({ _ in "" }) else {
            return (error(400, status: "INVALID_ARGUMENT", message: "Recipient of the message is not set."), .zero)
        }
        if let data = message["data"] {
            guard let strings = data as? [String: Any], strings.values.allSatisfy({ $0 is String }) else {
                return (error(400, status: "INVALID_ARGUMENT", message: "Invalid value at 'message.data' (TYPE_STRING)"), .zero)
            }
        }
        if let android = message["android"] as? [String: Any], let priority = android["priority"] as? String,
            !["high", "normal", "HIGH", "NORMAL"].contains(priority)
        {
            return (error(400, status: "INVALID_ARGUMENT", message: "Invalid value at 'message.android.priority'"), .zero)
        }
        let counted = standInJSON(["notification": message["notification"] ?? [:], "data": message["data"] ?? [:]])
        guard counted.count <= 4096 else {
            return (error(400, status: "INVALID_ARGUMENT", code: "INVALID_ARGUMENT", message: "Message is too big"), .zero)
        }
        let notification = (message["notification"] as? [String: String]) ?? [:]
        let accessToken = String(authorization.dropFirst("Bearer ".count))
        if validateOnly {
            state.log.withLock { $0.validations += 1 }
            let entry = Request(
                deviceToken: token, message: notification, body: request.body, accessToken: accessToken,
                attempt: 1, validateOnly: true)
            return answer(script(entry), name: "projects/\(projectID)/messages/fake_message_id")
        }
        let entry: Request = state.log.withLock { log in
            log.count += 1
            log.attempts[token, default: 0] += 1
            return Request(
                deviceToken: token, message: notification, body: request.body,
                accessToken: accessToken, attempt: log.attempts[token]!, validateOnly: false)
        }
        if record { state.log.withLock { $0.requests.append(entry) } }
        return answer(script(entry), name: "projects/\(projectID)/messages/0:\(Int(Date().timeIntervalSince1970 * 1000))%\(UUID().uuidString.prefix(8))")
    }

    /// A script's answer as FCM gives it: taken, with the message's `name`, or an error.
    private static func answer(_ answer: Answer, name: String) -> (reply: StandInHTTPServer.Reply, latency: Duration) {
        switch answer {
        case .accept:
            return (.respond(status: 200, headers: [], body: standInJSON(["name": name])), .zero)
        case .reject(let status, let code, let text, let retryAfter):
            let fcmCodes: Set<String> = [
                "UNREGISTERED", "SENDER_ID_MISMATCH", "QUOTA_EXCEEDED", "UNAVAILABLE", "INTERNAL",
                "THIRD_PARTY_AUTH_ERROR", "INVALID_ARGUMENT",
            ]
            let statusText =
                switch status {
                case 400: "INVALID_ARGUMENT"
                case 401: "UNAUTHENTICATED"
                case 403: "PERMISSION_DENIED"
                case 404: "NOT_FOUND"
                case 429: "RESOURCE_EXHAUSTED"
                case 503: "UNAVAILABLE"
                default: "INTERNAL"
                }
            return (
                error(
                    status, status: statusText, code: fcmCodes.contains(code) ? code : nil,
                    message: text.isEmpty ? "stand-in answered \(code)" : text, retryAfter: retryAfter), .zero
            )
        case .hang:
            return (.silence, .zero)
        case .stallAfterHead:
            return (.stallAfterHead, .zero)
        }
    }
}
