import Foundation

/// What a delivery shows and carries, and its payload for each platform (docs/jobs/dispatch.md,
/// "Every active device"):
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
    /// Whether it must reach the user now (a call's preview): APNs' `interruption-level:
    /// time-sensitive`, which iOS shows through a Focus and the scheduled summary (when the app
    /// has the Time Sensitive Notifications capability). FCM's are all high priority.
    public let timeSensitive: Bool
    /// The APNs payload, written once for every device and retry.
    public private(set) var apnsBody = Data()

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
        timeSensitive = kind.isTimeCritical
        var data: [String: String] = [:]
        for (key, value) in newest.payloadObject ?? [:] {
            data[key] = value.text
        }
        data["type"] = newest.type
        data["deep_link"] = data["deep_link"] ?? kind.deepLink
        data["notification_id"] = String(lead.deliveryID ?? lead.id)
        if count > 1 { data["grouped"] = String(count) }
        self.data = data
        apnsBody = apnsPayload()
    }

    public init(title: String, body: String, group: String, data: [String: String], timeSensitive: Bool = false) {
        self.title = title
        self.body = body
        self.group = group
        self.data = data
        self.timeSensitive = timeSensitive
        apnsBody = apnsPayload()
    }

    /// A payload's JSON object, or nil when the text is not one.
    static func payloadObject(_ text: String) -> [String: JSONValue]? {
        guard case .object(let object)? = JSONValue.parse(text) else { return nil }
        return object
    }

    /// The APNs payload (the request body).
    public func apnsPayload() -> Data {
        var json = JSONText()
        json.object {
            $0.field("aps") {
                $0.object {
                    $0.field("alert") {
                        $0.object {
                            $0.field("body", body)
                            $0.field("title", title)
                        }
                    }
                    $0.field("badge") { $0.raw("1") }
                    if timeSensitive { $0.field("interruption-level", "time-sensitive") }
                    $0.field("sound", "default")
                    $0.field("thread-id", group)
                }
            }
            $0.field("data") { $0.object(data) }
        }
        return json.data
    }

    /// The FCM HTTP v1 request body for one token.
    public func fcmRequest(token: String, collapseKey: String, timeToLive: TimeInterval) -> Data {
        var json = JSONText()
        json.object {
            $0.field("message") {
                $0.object {
                    $0.field("android") {
                        $0.object {
                            $0.field("collapse_key", collapseKey)
                            $0.field("notification") { $0.object { $0.field("tag", group) } }
                            $0.field("priority", "high")
                            $0.field("ttl", "\(max(0, Int(timeToLive)))s")
                        }
                    }
                    $0.field("data") { $0.object(data) }
                    $0.field("notification") {
                        $0.object {
                            $0.field("body", body)
                            $0.field("title", title)
                        }
                    }
                    $0.field("token", token)
                }
            }
        }
        return json.data
    }

    /// What FCM counts against its 4 KiB: the notification and the data.
    func fcmPayloadSize() -> Int {
        var json = JSONText()
        json.object {
            $0.field("data") { $0.object(data) }
            $0.field("notification") {
                $0.object {
                    $0.field("body", body)
                    $0.field("title", title)
                }
            }
        }
        return json.bytes.count
    }

    /// Why this content cannot go to `providers`: a payload over its limit.
    func sizeProblem(for providers: Set<DeliveryProvider>) -> String? {
        if providers.contains(.apns), case let size = apnsBody.count, size > Self.payloadLimit {
            return "its APNs payload is \(size) bytes, over APNs' limit of \(Self.payloadLimit)"
        }
        if providers.contains(.fcm), case let size = fcmPayloadSize(), size > Self.payloadLimit {
            return "its FCM payload is \(size) bytes, over FCM's limit of \(Self.payloadLimit)"
        }
        return nil
    }
}

/// JSON written straight into bytes: what a dispatcher sends tens of thousands of times a minute,
/// without Foundation's JSONSerialization (slow on Linux, and sorting keys through ICU). Keys
/// come out in the order they are written.
struct JSONText {
    private(set) var bytes: [UInt8] = []
    private var needsComma = false

    var data: Data { Data(bytes) }

    mutating func object(_ fields: (inout JSONText) -> Void) {
        bytes.append(UInt8(ascii: "{"))
        needsComma = false
        fields(&self)
        bytes.append(UInt8(ascii: "}"))
        needsComma = true
    }

    /// An object of strings, keys sorted.
    mutating func object(_ strings: [String: String]) {
        object { json in
            for key in strings.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) { json.field(key, strings[key]!) }
        }
    }

    mutating func field(_ name: String, _ value: (inout JSONText) -> Void) {
        if needsComma { bytes.append(UInt8(ascii: ",")) }
        string(name)
        bytes.append(UInt8(ascii: ":"))
        needsComma = false
        value(&self)
        needsComma = true
    }

    mutating func field(_ name: String, _ value: String) {
        field(name) { $0.string(value) }
    }

    mutating func raw(_ text: String) {
        bytes.append(contentsOf: text.utf8)
    }

    mutating func string(_ text: String) {
        bytes.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x0A: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: [
                    UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"),
                    hex[Int(byte >> 4)], hex[Int(byte & 0x0f)],
                ])
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }
}

/// A JSON value, read without losing what it is (a boolean stays one; an integer prints as one).
public enum JSONValue: Sendable, Equatable, CustomStringConvertible {
    case null
    case bool(Bool)
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

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
            {
                var json = JSONText()
                json.string(value)
                return String(decoding: json.bytes, as: UTF8.self)
            }()
        case .array(let values): "[" + values.map(\.description).joined(separator: ",") + "]"
        case .object(let object):
            "{"
                + object.keys.sorted().map { key in JSONValue.string(key).description + ":" + object[key]!.description }
                .joined(separator: ",") + "}"
        }
    }
}

extension JSONValue {
    /// Parses JSON text (RFC 8259), or nil when it is not JSON: a small reader for the payloads a
    /// dispatcher reads tens of thousands of times a minute, where Foundation's decoders are slow.
    public static func parse(_ text: String) -> JSONValue? {
        var reader = JSONReader(bytes: Array(text.utf8))
        guard let value = reader.value() else { return nil }
        reader.skipSpace()
        return reader.atEnd ? value : nil
    }
}

private struct JSONReader {
    let bytes: [UInt8]
    var index = 0
    var depth = 0

    var atEnd: Bool { index == bytes.count }

    mutating func skipSpace() {
        while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
    }

    mutating func value() -> JSONValue? {
        skipSpace()
        guard index < bytes.count, depth < 64 else { return nil }
        switch bytes[index] {
        case UInt8(ascii: "{"): return object()
        case UInt8(ascii: "["): return array()
        case UInt8(ascii: "\""): return string().map(JSONValue.string)
        case UInt8(ascii: "t"): return literal("true", .bool(true))
        case UInt8(ascii: "f"): return literal("false", .bool(false))
        case UInt8(ascii: "n"): return literal("null", .null)
        default: return number()
        }
    }

    private mutating func literal(_ word: String, _ value: JSONValue) -> JSONValue? {
        let expected = Array(word.utf8)
        guard bytes.count - index >= expected.count, Array(bytes[index..<index + expected.count]) == expected else { return nil }
        index += expected.count
        return value
    }

    private mutating func object() -> JSONValue? {
        index += 1
        depth += 1
        defer { depth -= 1 }
        var object: [String: JSONValue] = [:]
        skipSpace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object(object)
        }
        while true {
            skipSpace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\""), let key = string() else { return nil }
            skipSpace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { return nil }
            index += 1
            guard let value = value() else { return nil }
            object[key] = value
            skipSpace()
            guard index < bytes.count else { return nil }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            if bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(object)
            }
            return nil
        }
    }

    private mutating func array() -> JSONValue? {
        index += 1
        depth += 1
        defer { depth -= 1 }
        var array: [JSONValue] = []
        skipSpace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(array)
        }
        while true {
            guard let value = value() else { return nil }
            array.append(value)
            skipSpace()
            guard index < bytes.count else { return nil }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            if bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(array)
            }
            return nil
        }
    }

    private mutating func string() -> String? {
        index += 1
        var scalars = String.UnicodeScalarView()
        var plain: [UInt8] = []
        func flush() {
            if !plain.isEmpty {
                scalars.append(contentsOf: String(decoding: plain, as: UTF8.self).unicodeScalars)
                plain.removeAll(keepingCapacity: true)
            }
        }
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                flush()
                return String(scalars)
            case UInt8(ascii: "\\"):
                guard index < bytes.count else { return nil }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""): plain.append(UInt8(ascii: "\""))
                case UInt8(ascii: "\\"): plain.append(UInt8(ascii: "\\"))
                case UInt8(ascii: "/"): plain.append(UInt8(ascii: "/"))
                case UInt8(ascii: "b"): plain.append(0x08)
                case UInt8(ascii: "f"): plain.append(0x0C)
                case UInt8(ascii: "n"): plain.append(0x0A)
                case UInt8(ascii: "r"): plain.append(0x0D)
                case UInt8(ascii: "t"): plain.append(0x09)
                case UInt8(ascii: "u"):
                    guard var code = hex4() else { return nil }
                    if (0xD800...0xDBFF).contains(code) {
                        guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u")
                        else { return nil }
                        index += 2
                        guard let low = hex4(), (0xDC00...0xDFFF).contains(low) else { return nil }
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let scalar = Unicode.Scalar(code) else { return nil }
                    flush()
                    scalars.append(scalar)
                default: return nil
                }
            case 0..<0x20:
                return nil
            default:
                plain.append(byte)
            }
        }
        return nil
    }

    private mutating func hex4() -> UInt32? {
        guard bytes.count - index >= 4 else { return nil }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            index += 1
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: return nil
            }
            value = value * 16 + digit
        }
        return value
    }

    private mutating func number() -> JSONValue? {
        let start = index
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
        var integral = true
        while index < bytes.count {
            let byte = bytes[index]
            if (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) {
                index += 1
            } else if [UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E"), UInt8(ascii: "+"), UInt8(ascii: "-")].contains(byte) {
                integral = false
                index += 1
            } else {
                break
            }
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        guard !text.isEmpty, text != "-" else { return nil }
        if integral, let value = Int64(text) { return .integer(value) }
        guard let value = Double(text), value.isFinite else { return nil }
        return .number(value)
    }
}
