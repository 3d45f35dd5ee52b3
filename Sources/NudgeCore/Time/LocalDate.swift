import Foundation

/// A calendar day with no time zone attached: a user's local day, a leaderboard day, a backfill
/// date. Stored as the number of days since 1970-01-01, so that arithmetic and comparison are
/// integer operations and the value crosses the database boundary as a plain `date`.
/// A value written as text in JSON and on the command line ("2026-03-14", "00:05").
public protocol TextCodable: Codable, CustomStringConvertible {
    static var textFormat: String { get }
    init?(text: String)
}

extension TextCodable {
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let value = Self(text: text) else {
            throw DecodingError.dataCorrupted(
                .init(
                    codingPath: decoder.codingPath,
                    debugDescription: "'\(text)' is not \(Self.textFormat)"))
        }
        self = value
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

public struct LocalDate: Hashable, Comparable, Sendable, TextCodable {
    public let daysSinceEpoch: Int

    public init(daysSinceEpoch: Int) {
        self.daysSinceEpoch = daysSinceEpoch
    }

    /// `nil` when the fields do not name a real day of the proleptic Gregorian calendar.
    public init?(year: Int, month: Int, day: Int) {
        guard (1...12).contains(month), day >= 1, day <= Self.daysIn(month: month, year: year) else {
            return nil
        }
        // Days from civil, after Howard Hinnant's algorithm.
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        self.daysSinceEpoch = era * 146_097 + dayOfEra - 719_468
    }

    /// Parses `YYYY-MM-DD`; `nil` for anything else, including impossible days such as 2026-02-30.
    public init?(iso8601 text: String) {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0].count == 4, parts[1].count == 2, parts[2].count == 2,
            parts.allSatisfy({ $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) }),
            let year = Int(parts[0]), let month = Int(parts[1]), let day = Int(parts[2])
        else { return nil }
        self.init(year: year, month: month, day: day)
    }

    public var components: (year: Int, month: Int, day: Int) {
        let z = daysSinceEpoch + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    /// ISO weekday: Monday is 1, Sunday is 7.
    public var isoWeekday: Int {
        let remainder = (daysSinceEpoch + 3) % 7   // 1970-01-01 was a Thursday
        return (remainder < 0 ? remainder + 7 : remainder) + 1
    }

    /// The Monday of this day's ISO week.
    public var monday: LocalDate { adding(days: 1 - isoWeekday) }

    public func adding(days: Int) -> LocalDate {
        LocalDate(daysSinceEpoch: daysSinceEpoch + days)
    }

    public func days(since other: LocalDate) -> Int {
        daysSinceEpoch - other.daysSinceEpoch
    }

    public var description: String {
        let (year, month, day) = components
        let yearText = String(year)
        return String(repeating: "0", count: max(0, 4 - yearText.count)) + yearText
            + (month < 10 ? "-0" : "-") + String(month)
            + (day < 10 ? "-0" : "-") + String(day)
    }

    public static func < (lhs: LocalDate, rhs: LocalDate) -> Bool {
        lhs.daysSinceEpoch < rhs.daysSinceEpoch
    }

    public static var textFormat: String { "a YYYY-MM-DD date" }

    public init?(text: String) {
        self.init(iso8601: text)
    }

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }
}

/// A wall-clock time of day, to the minute: "00:05", "09:00", "20:00".
public struct LocalTime: Hashable, Comparable, Sendable, TextCodable {
    public let hour: Int
    public let minute: Int

    public init?(hour: Int, minute: Int) {
        guard (0...23).contains(hour), (0...59).contains(minute) else { return nil }
        self.hour = hour
        self.minute = minute
    }

    /// Parses `HH:MM`.
    public init?(_ text: String) {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, parts.allSatisfy({ $0.count == 2 && $0.allSatisfy(\.isNumber) }),
            let hour = Int(parts[0]), let minute = Int(parts[1])
        else { return nil }
        self.init(hour: hour, minute: minute)
    }

    /// The time `minutes` after midnight, on the clock's circle (1,440 is midnight again, -15 is 23:45).
    public init(minutes: Int) {
        let wrapped = (minutes % 1440 + 1440) % 1440
        hour = wrapped / 60
        minute = wrapped % 60
    }

    public var secondsSinceMidnight: Int { hour * 3600 + minute * 60 }

    /// Minutes since midnight.
    public var minutes: Int { hour * 60 + minute }

    public var description: String {
        (hour < 10 ? "0" : "") + String(hour) + (minute < 10 ? ":0" : ":") + String(minute)
    }

    public static func < (lhs: LocalTime, rhs: LocalTime) -> Bool {
        lhs.secondsSinceMidnight < rhs.secondsSinceMidnight
    }

    public static var textFormat: String { "an HH:MM time" }

    public init?(text: String) {
        self.init(text)
    }
}

extension LocalDate {
    private static let englishMonths = [
        "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
        "November", "December",
    ]
    private static let frenchMonths = [
        "janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août", "septembre", "octobre",
        "novembre", "décembre",
    ]

    /// The date's month by its name, for copy: "November", or "novembre" in French.
    public func monthName(french: Bool) -> String {
        (french ? Self.frenchMonths : Self.englishMonths)[components.month - 1]
    }
}
