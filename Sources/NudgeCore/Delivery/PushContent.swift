import Foundation

/// What a delivery shows and carries, and its payload for each platform in seed 003 F6's shapes:
/// APNs `{"aps": {"alert": {title, body}, "badge", "sound", "thread-id"}, "data": {…}}`, FCM
/// `{"notification": {title, body}, "data": {…}, "android": {"priority": "high", …}}`, the deep
/// link in `data`. A grouped delivery shows its newest notification, with a line saying how
/// many more it stands for.
public struct PushContent: Sendable, Equatable {
    public let title: String
    public let body: String
    /// The thread the device groups it in.
    public let group: String
    /// String values only: FCM's `data` takes nothing else, and both platforms get the same.
    public let data: [String: String]

    /// The platforms' limit on a payload (APNs: 4096 bytes; FCM: 4096 for `notification` and `data`).
    public static let payloadLimit = 4096

    init(lead: QueuedNotification, newest: QueuedNotification, count: Int, kind: NotificationKind, locale: String) {
        title = newest.title
        if count > 1 {
            let more = count - 1
            body = newest.body + "\n" + (locale == "fr" ? "(+\(more) autre\(more > 1 ? "s" : ""))" : "(+\(more) more)")
        } else {
            body = newest.body
        }
        group = kind.group
        var data: [String: String] = [:]
        for (key, value) in Self.payloadObject(newest.payload) ?? [:] {
            data[key] = value.text
        }
        data["type"] = newest.type
        data["deep_link"] = data["deep_link"] ?? kind.deepLink
        data["notification_id"] = String(lead.deliveryID ?? lead.id)
        if count > 1 { data["grouped"] = String(count) }
        self.data = data
    }

    public init(title: String, body: String, group: String, data: [String: String]) {
        self.title = title
        self.body = body
        self.group = group
        self.data = data
    }

    /// A payload's JSON object, or nil when the text is not one.
    static func payloadObject(_ text: String) -> [String: JSONValue]? {
        guard case .object(let object)? = try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) else { return nil }
        return object
    }

    /// The APNs payload (the request body).
    public func apnsPayload() -> Data {
        let object: [String: Any] = [
            "aps": ["alert": ["title": title, "body": body], "badge": 1, "sound": "default", "thread-id": group],
            "data": data,
        ]
        return (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
    }

    /// The FCM HTTP v1 request body for one token.
    public func fcmRequest(token: String, collapseKey: String, timeToLive: TimeInterval) -> Data {
        let message: [String: Any] = [
            "token": token,
            "notification": ["title": title, "body": body],
            "data": data,
            "android": [
                "priority": "high",
                "collapse_key": collapseKey,
                "ttl": "\(max(0, Int(timeToLive)))s",
                "notification": ["tag": group],
            ],
        ]
        return (try? JSONSerialization.data(withJSONObject: ["message": message], options: [.sortedKeys, .withoutEscapingSlashes]))
            ?? Data()
    }

    /// What FCM counts against its 4 KiB: the notification and the data.
    func fcmPayloadSize() -> Int {
        let counted: [String: Any] = ["notification": ["title": title, "body": body], "data": data]
        return ((try? JSONSerialization.data(withJSONObject: counted, options: [.withoutEscapingSlashes])) ?? Data()).count
    }

    /// Why this content cannot go to `providers`: a payload over its limit.
    func sizeProblem(for providers: Set<PushProvider>) -> String? {
        if providers.contains(.apns), case let size = apnsPayload().count, size > Self.payloadLimit {
            return "its APNs payload is \(size) bytes, over APNs' limit of \(Self.payloadLimit)"
        }
        if providers.contains(.fcm), case let size = fcmPayloadSize(), size > Self.payloadLimit {
            return "its FCM payload is \(size) bytes, over FCM's limit of \(Self.payloadLimit)"
        }
        return nil
    }
}

/// A JSON value, read without losing what it is (a boolean stays one; an integer prints as one).
public enum JSONValue: Sendable, Equatable, Decodable, CustomStringConvertible {
    case null
    case bool(Bool)
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    /// The value as FCM's string-only `data` carries it: a string as itself, anything else as JSON.
    public var text: String {
        if case .string(let string) = self { return string }
        return description
    }

    /// The value as JSON text.
    public var description: String {
        switch self {
        case .null: "null"
        case .bool(let value): value ? "true" : "false"
        case .integer(let value): String(value)
        case .number(let value): value.isFinite ? String(value) : "null"
        case .string(let value):
            String(decoding: (try? JSONEncoder().encode(value)) ?? Data(), as: UTF8.self)
        case .array(let values): "[" + values.map(\.description).joined(separator: ",") + "]"
        case .object(let object):
            "{" + object.keys.sorted().map { key in JSONValue.string(key).description + ":" + object[key]!.description }
                .joined(separator: ",") + "}"
        }
    }
}
