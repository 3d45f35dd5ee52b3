import Foundation
import Synchronization

/// The one place that turns instants into a user's local days and back. Every "today",
/// "midnight", "Monday" or "Sunday 20:00" in Nudge is answered here, with the IANA time zone
/// database (Foundation's `TimeZone`), never with fixed offsets: days of 23 and 25 hours,
/// Lord Howe's 30-minute shift, quarter-hour offsets and the ±14 h zones all come out right.
public struct LocalCalendar: Sendable {
    public enum Failure: Error, Equatable, CustomStringConvertible {
        case unknownTimeZone(String)
        case implausibleSignUp

        public var description: String {
            switch self {
            case .unknownTimeZone(let name): "unknown time zone '\(name)'"
            case .implausibleSignUp:
                "users.created_at is not a sign-up time (it is 'infinity', '-infinity' or outside 1970-2200)"
            }
        }
    }

    public let timeZone: TimeZone
    /// The offsets asked so far (`offset(at:)`), shared by the copies of this calendar.
    private let offsets = SharedOffsets()

    /// A user with no time zone is in UTC; an unknown name is an error for that user (docs/design.md).
    public init(identifier: String?) throws(Failure) {
        guard let identifier, !identifier.isEmpty else {
            self.timeZone = TimeZone(identifier: "UTC")!
            return
        }
        // Foundation also accepts offsets it makes up ("GMT+5"): only names of the IANA time zone
        // database are a user's zone, aliases without a slash included ("GMT", "CET", "EST5EDT",
        // "Japan", "Zulu"), and only those Foundation's own zone data can compute.
        guard Self.isTimeZoneDatabaseName(identifier), let zone = TimeZone(identifier: identifier)
        else { throw .unknownTimeZone(identifier) }
        self.timeZone = zone
    }

    /// Where the system keeps the IANA time zone database, one file per name.
    static let systemZoneInfo = "/usr/share/zoneinfo"

    /// Whether `name` is a name the IANA time zone database knows: one of Foundation's canonical
    /// names, or an entry of the system's zoneinfo (where the aliases are).
    static func isTimeZoneDatabaseName(_ name: String) -> Bool {
        if knownNames.contains(name) { return true }
        guard !name.hasPrefix("/"), !name.split(separator: "/").contains(where: { $0 == ".." || $0 == "." }),
            name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "/_-+".contains($0)) })
        else { return false }
        var isFolder: ObjCBool = false
        return FileManager.default.fileExists(atPath: systemZoneInfo + "/" + name, isDirectory: &isFolder) && !isFolder.boolValue
    }

    private static let knownNames = Set(TimeZone.knownTimeZoneIdentifiers).union(["UTC"])

    public var identifier: String { timeZone.identifier }

    /// The local day it is in this zone at `instant`.
    public func localDate(at instant: Date) -> LocalDate {
        let seconds = Int(instant.timeIntervalSince1970.rounded(.down)) + offset(at: instant.timeIntervalSince1970)
        return LocalDate(daysSinceEpoch: Self.floorDivide(seconds, 86_400))
    }

    /// The local wall-clock time at `instant`, to the minute.
    public func localTime(at instant: Date) -> LocalTime {
        let seconds = Int(instant.timeIntervalSince1970.rounded(.down)) + offset(at: instant.timeIntervalSince1970)
        let ofDay = seconds - Self.floorDivide(seconds, 86_400) * 86_400
        return LocalTime(hour: ofDay / 3600, minute: (ofDay % 3600) / 60)!
    }

    /// The instant at which the wall clock of this zone shows `time` on `date`. A time that the
    /// clocks skip (spring forward) is moved forward by the length of the gap, as the clocks
    /// themselves are; a time that happens twice (fall back) is its first occurrence.
    public func instant(of date: LocalDate, at time: LocalTime) -> Date {
        let wall = date.daysSinceEpoch * 86_400 + time.secondsSinceMidnight
        // The offsets in force around this wall time: at most one change within a day either side.
        let before = offset(at: TimeInterval(wall - 86_400))
        let after = offset(at: TimeInterval(wall + 86_400))
        let valid = [before, after]
            .map { wall - $0 }
            .filter { offset(at: TimeInterval($0)) == wall - $0 }
        if let earliest = valid.min() {
            return Date(timeIntervalSince1970: TimeInterval(earliest))
        }
        return Date(timeIntervalSince1970: TimeInterval(wall - before))
    }

    /// When local day `date` begins.
    public func start(of date: LocalDate) -> Date {
        instant(of: date, at: LocalTime(hour: 0, minute: 0)!)
    }

    /// When local day `date` ends: the start of the next day.
    public func end(of date: LocalDate) -> Date {
        start(of: date.adding(days: 1))
    }

    /// How long local day `date` lasts: 24 h, or 23 / 25 h (23.5 / 24.5 on Lord Howe) on the days
    /// the clocks change.
    public func length(of date: LocalDate) -> TimeInterval {
        end(of: date).timeIntervalSince(start(of: date))
    }

    /// The latest local day whose `time` has been reached at `instant`: the day a job that acts
    /// daily at `time` is due for. Today if `time` has passed, yesterday otherwise.
    public func latestDay(reaching time: LocalTime, atOrBefore instant: Date) -> LocalDate {
        let today = localDate(at: instant)
        return self.instant(of: today, at: time) <= instant ? today : today.adding(days: -1)
    }

    /// Whether it is `weekday` (ISO, Monday 1) at or after `time` on that local day, at `instant`.
    public func isWeekday(_ weekday: Int, atOrAfter time: LocalTime, at instant: Date) -> Bool {
        let today = localDate(at: instant)
        return today.isoWeekday == weekday && self.instant(of: today, at: time) <= instant
    }

    /// The zone's offset from UTC at an instant. A run asks the same few (its own instant, each
    /// day's 00:00 and moments) for every user of a zone, and Foundation's answer takes a lock
    /// and ICU's arithmetic: the answers are kept, by the second (offsets change on whole seconds).
    private func offset(at secondsSinceEpoch: TimeInterval) -> Int {
        let second = Int(secondsSinceEpoch.rounded(.down))
        if let known = offsets.offset(at: second) { return known }
        let offset = timeZone.secondsFromGMT(for: Date(timeIntervalSince1970: TimeInterval(second)))
        offsets.keep(offset, at: second)
        return offset
    }

    private static func floorDivide(_ value: Int, _ divisor: Int) -> Int {
        let quotient = value / divisor
        return (value % divisor != 0 && (value < 0) != (divisor < 0)) ? quotient - 1 : quotient
    }
}

/// A calendar's kept offsets, by the second since 1970.
private final class SharedOffsets: Sendable {
    /// How many offsets it keeps before it starts again: the few a run asks for every user of a
    /// zone come back at once, and the instants of users' own messages, each asked once, do not
    /// hold memory (a few kilobytes a zone).
    static let kept = 512
    private let table = Mutex<[Int: Int]>([:])

    func offset(at second: Int) -> Int? { table.withLock { $0[second] } }

    func keep(_ offset: Int, at second: Int) {
        table.withLock { known in
            if known.count >= Self.kept { known.removeAll() }
            known[second] = offset
        }
    }
}

/// Calendars by zone name, built once per run: a run meets a few hundred zones and a million users.
/// Shared by the run's batches (a source places its items with it), so it locks.
public final class CalendarCache: Sendable {
    /// The sign-up instants a user can have: `users.created_at` outside them (`'infinity'`, a year
    /// 20000) is a row no job can place in time.
    static let plausibleInstants = Date(timeIntervalSince1970: 0)...Date(timeIntervalSince1970: 7_258_118_400)   // 1970 to 2200

    /// The user with the calendar of their zone; fails for an unknown zone or an impossible sign-up.
    public func place(_ user: UserRow) throws(LocalCalendar.Failure) -> UserInTime {
        guard Self.plausibleInstants.contains(user.createdAt) else { throw .implausibleSignUp }
        return UserInTime(user: user, calendar: try calendar(for: user.timezone))
    }

    /// The user as delivering to them needs them: no sign-up time, and, for a call preview, no
    /// zone (the user asked for the call): in an unknown zone, UTC's calendar, with why.
    public func placeForDelivery(_ user: UserRow) throws(LocalCalendar.Failure) -> (user: UserInTime, zoneProblem: String?) {
        do {
            return (UserInTime(user: user, calendar: try calendar(for: user.timezone)), nil)
        } catch {
            return (UserInTime(user: user, calendar: try calendar(for: nil)), "the user's \(error)")
        }
    }

    private let calendars = Mutex<[String: Result<LocalCalendar, LocalCalendar.Failure>]>([:])

    public init() {}

    public func calendar(for identifier: String?) throws(LocalCalendar.Failure) -> LocalCalendar {
        let key = identifier ?? ""
        if let cached = calendars.withLock({ $0[key] }) { return try cached.get() }
        let result = Result { () throws(LocalCalendar.Failure) in try LocalCalendar(identifier: identifier) }
        calendars.withLock { $0[key] = result }
        return try result.get()
    }
}
