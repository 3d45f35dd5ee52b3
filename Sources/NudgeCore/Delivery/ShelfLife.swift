import Foundation

/// How long after its `deliver_after` each notification is still worth sending (`shelfLife` in
/// `jobs/dispatch.json`). A row past it, whether it waited for a provider, a retry or the end of
/// quiet hours, is not sent: it ends `suppressed` (`expired`) and counts towards no cap. The push
/// providers are told the same bound (`apns-expiration`, FCM's `ttl`), so that a device offline
/// until then does not get it later either.
///
/// Keys are a `notification_type`, or `type:channel` for one channel of it (`weekly_digest:email`);
/// `*` and `*:email` (and `*:sms`) hold for the types not named. Values:
/// - a duration: `10m`, `3h`, `48h`, `90s`;
/// - `end of local day`: the end of the user's local day the row fell due in;
/// - `end of period, at most 2h`: for a leaderboard move, the end of its board's period (the
///   payload's `period`: `daily`, `weekly`, `monthly`) in the user's time, and never longer than
///   the duration.
public struct ShelfLife: Sendable, Equatable, Codable {
    public enum Rule: Sendable, Equatable, CustomStringConvertible {
        case duration(TimeInterval)
        case endOfLocalDay
        case endOfPeriod(atMost: TimeInterval)

        public var description: String {
            switch self {
            case .duration(let seconds): ShelfLife.text(seconds)
            case .endOfLocalDay: "end of local day"
            case .endOfPeriod(let limit): "end of period, at most \(ShelfLife.text(limit))"
            }
        }
    }

    public let rules: [String: Rule]

    /// What dispatch uses when `jobs/dispatch.json` names no shelf lives: a day for a push, two
    /// for an email, and ten minutes for a call's preview, which is worthless once the call began.
    public static let fallback = ShelfLife(rules: [
        "*": .duration(24 * 3600), "*:email": .duration(48 * 3600), "*:sms": .duration(600),
        "preview_push": .duration(600), "preview_sms": .duration(600), "fallback_sms": .duration(600),
    ])

    public init(rules: [String: Rule]) {
        self.rules = rules
    }

    /// The rule for a row of `type` on `channel`.
    public func rule(type: String, channel: DeliveryChannel) -> Rule {
        rules["\(type):\(channel.rawValue)"] ?? rules[type] ?? rules["*:\(channel.rawValue)"] ?? rules["*"] ?? .duration(24 * 3600)
    }

    /// The instant after which `row` is no longer sent.
    public func expiry(of row: QueuedNotification, calendar: LocalCalendar) -> Date {
        switch rule(type: row.type, channel: row.channel) {
        case .duration(let seconds):
            return row.deliverAfter.addingTimeInterval(seconds)
        case .endOfLocalDay:
            return calendar.end(of: calendar.localDate(at: row.deliverAfter))
        case .endOfPeriod(let limit):
            let day = calendar.localDate(at: row.deliverAfter)
            let last: LocalDate
            switch row.payloadObject?["period"]?.text {
            case "daily"?:
                last = day
            case "weekly"?:
                last = day.monday.adding(days: 6)
            case "monthly"?:
                let (year, month, _) = day.components
                let next = month == 12 ? LocalDate(year: year + 1, month: 1, day: 1)! : LocalDate(year: year, month: month + 1, day: 1)!
                last = next.adding(days: -1)
            default:
                return row.deliverAfter.addingTimeInterval(limit)
            }
            return min(calendar.end(of: last), row.deliverAfter.addingTimeInterval(limit))
        }
    }

    // MARK: The file's form

    public init(from decoder: any Decoder) throws {
        let texts = try decoder.singleValueContainer().decode([String: String].self)
        var rules: [String: Rule] = [:]
        for (key, text) in texts {
            guard let rule = Self.parse(text) else {
                throw DecodingError.dataCorrupted(
                    .init(
                        codingPath: decoder.codingPath,
                        debugDescription: """
                            shelfLife "\(key)": "\(text)" is not a shelf life (a duration such as 10m, 3h, 48h; \
                            "end of local day"; or "end of period, at most 2h")
                            """))
            }
            rules[key] = rule
        }
        self.rules = rules
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rules.mapValues(\.description))
    }

    static func parse(_ text: String) -> Rule? {
        let text = text.trimmingCharacters(in: .whitespaces).lowercased()
        if text == "end of local day" { return .endOfLocalDay }
        let periodPrefix = "end of period, at most "
        if text.hasPrefix(periodPrefix) {
            return duration(String(text.dropFirst(periodPrefix.count))).map { .endOfPeriod(atMost: $0) }
        }
        return duration(text).map { .duration($0) }
    }

    /// `90s`, `10m`, `3h`, `2d`: a whole number and its unit, more than nothing.
    static func duration(_ text: String) -> TimeInterval? {
        guard let unit = text.last, let number = Int(text.dropLast()), number > 0 else { return nil }
        switch unit {
        case "s": return TimeInterval(number)
        case "m": return TimeInterval(number) * 60
        case "h": return TimeInterval(number) * 3600
        case "d": return TimeInterval(number) * 86_400
        default: return nil
        }
    }

    static func text(_ seconds: TimeInterval) -> String {
        let whole = Int(seconds)
        if whole % 86_400 == 0 { return "\(whole / 86_400)d" }
        if whole % 3600 == 0 { return "\(whole / 3600)h" }
        if whole % 60 == 0 { return "\(whole / 60)m" }
        return "\(whole)s"
    }
}
