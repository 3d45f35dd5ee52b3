import Foundation
import PostgresNIO

/// A FitCircle as leaderboard-refresh pages it: what its boards need of the circle itself.
public struct CircleRow: Sendable, Equatable {
    public let id: UUID
    public let name: String
    public let challenge: FitCircleMembership.Challenge
    /// The circle's zone: its leaderboard day (`fitcircles.timezone`).
    public let timezone: String
    /// The challenge's days: only submissions dated within them count.
    public let startsOn: LocalDate
    public let endsOn: LocalDate

    public init(
        id: UUID, name: String, challenge: FitCircleMembership.Challenge, timezone: String,
        startsOn: LocalDate, endsOn: LocalDate
    ) {
        self.id = id
        self.name = name
        self.challenge = challenge
        self.timezone = timezone
        self.startsOn = startsOn
        self.endsOn = endsOn
    }
}

/// A circle with the calendar of its zone.
public struct CircleInTime: Sendable {
    public let circle: CircleRow
    public let calendar: LocalCalendar

    public init(circle: CircleRow, calendar: LocalCalendar) {
        self.circle = circle
        self.calendar = calendar
    }
}

/// The FitCircles in id order, each placed in its zone: what leaderboard-refresh pages. Only the
/// circles whose boards can be due are read: begun, and not ended more than `settledAfterDays`
/// ago (every board of a circle is final a day after its last day; the rest is the week a run
/// catches up on after an outage); in a backfill, those whose days meet the window. `--user`
/// keeps the circles the user is a member of; `--shard` splits circles by their id. A circle
/// whose zone, challenge or dates cannot be used fails alone, with the reason.
public struct CircleSource: WorkSource {
    public typealias Item = CircleInTime

    /// How long after its last day a circle can still have a board due: its final refreshes, and
    /// a week's catch-up after an outage (`LeaderboardCadence.catchUp`).
    static let settledAfterDays = 8

    public init() {}

    public var noun: String { "circle" }

    private func conditions(_ request: PageRequest) -> SQLFragment {
        // Dates in UTC, a day wider than any zone on either side.
        let today = LocalDate(daysSinceEpoch: Int((request.now.timeIntervalSince1970 / 86_400).rounded(.down)))
        let (from, to) =
            request.window.map { ($0.from, min($0.to, today)) }
            ?? (today.adding(days: -Self.settledAfterDays), today)
        let members: SQLFragment =
            request.users.isEmpty
            ? "true"
            : """
            exists (select 1 from fitcircle_members m where m.fitcircle_id = c.id and m.user_id = any(\(request.users)::uuid[]))
            """
        return """
            c.starts_on <= \(to.adding(days: 1)) and c.ends_on >= \(from.adding(days: -1))
            and \(request.inShard("c.id")) and \(members)
            """
    }

    public func page(
        _ request: PageRequest, calendars: CalendarCache,
        on connection: PostgresConnection
    ) async throws -> [Paged<CircleInTime>] {
        let query: SQLFragment = """
            select c.id, c.name, c.challenge_type, c.timezone,
                   case when isfinite(c.starts_on) then c.starts_on end, case when isfinite(c.ends_on) then c.ends_on end
              from fitcircles c
             where \(request.notPaused) and c.id > \(request.keysetStart) and \(conditions(request))
             order by c.id
             limit \(request.limit)
            """
        let rows = try await connection.query(try query.query(), logger: request.logger)
        var page: [Paged<CircleInTime>] = []
        page.reserveCapacity(request.limit)
        for try await (id, name, challenge, timezone, startsOn, endsOn)
            in rows.decode((UUID, String, String, String, LocalDate?, LocalDate?).self)
        {
            do {
                guard let kind = FitCircleMembership.Challenge(rawValue: challenge) else {
                    throw NudgeError(.configuration, "unknown challenge_type '\(challenge)'")
                }
                guard let startsOn, let endsOn else {
                    throw NudgeError(.configuration, "starts_on or ends_on is not a day ('infinity')")
                }
                let calendar = try calendars.calendar(for: timezone)
                page.append(
                    .item(
                        id,
                        CircleInTime(
                            circle: CircleRow(id: id, name: name, challenge: kind, timezone: timezone, startsOn: startsOn, endsOn: endsOn),
                            calendar: calendar)))
            } catch {
                page.append(.unusable(id, error is LocalCalendar.Failure ? "the circle's \(error)" : "\(error)"))
            }
        }
        return page
    }

    public func count(_ request: PageRequest, on connection: PostgresConnection) async throws -> Int? {
        let query: SQLFragment = "select count(*) from fitcircles c where \(conditions(request))"
        return try await request.count(query, on: connection)
    }
}
