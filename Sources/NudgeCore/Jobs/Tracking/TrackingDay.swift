import Foundation
import Logging
import PostgresNIO

/// One `daily_tracking` row, as the jobs read it.
public struct TrackingDay: Sendable, Equatable {
    public let date: LocalDate
    public let mood: Int?
    public let energy: Int?
    public let steps: Int?
    public let weight: Double?

    public init(date: LocalDate, mood: Int?, energy: Int?, steps: Int?, weight: Double?) {
        self.date = date
        self.mood = mood
        self.energy = energy
        self.steps = steps
        self.weight = weight
    }

    /// A day counts as checked in when mood and energy are logged (docs/jobs/validate-streaks.md).
    public var isCheckedIn: Bool { mood != nil && energy != nil }

    /// Why the row holds values no person could have logged, or nil when it is plausible.
    public var impossibility: String? {
        if let mood, !(1...5).contains(mood) { return "mood \(mood) is outside 1-5" }
        if let energy, !(1...5).contains(energy) { return "energy \(energy) is outside 1-5" }
        if let steps, !(0...150_000).contains(steps) { return "steps \(steps) is outside 0-150000" }
        if let weight, !(weight > 0 && weight < 1_500) { return "weight \(weight) is outside 0-1500 lb" }
        return nil
    }
}

extension TrackingDay {
    /// Each user's `daily_tracking` rows of the local days in their range, in one read.
    static func load(
        _ ranges: [(user: UUID, days: ClosedRange<LocalDate>)], on connection: PostgresConnection,
        logger: Logger
    ) async throws -> [UUID: [LocalDate: TrackingDay]] {
        guard !ranges.isEmpty else { return [:] }
        let rows = try await connection.prepared(
            """
            select t.user_id, t.date, t.mood, t.energy, t.steps, t.weight::float8
              from unnest(\(ranges.map(\.user)), \(ranges.map(\.days.lowerBound)), \(ranges.map(\.days.upperBound)))
                   as r(user_id, first_day, last_day)
              join daily_tracking t on t.user_id = r.user_id and t.date between r.first_day and r.last_day
            """, logger: logger)
        var tracking: [UUID: [LocalDate: TrackingDay]] = [:]
        for try await (userID, date, mood, energy, steps, weight) in rows.decode((UUID, LocalDate, Int?, Int?, Int?, Double?).self) {
            tracking[userID, default: [:]][date] = TrackingDay(date: date, mood: mood, energy: energy, steps: steps, weight: weight)
        }
        return tracking
    }
}
