import Foundation
import Logging
import PostgresNIO

/// A user's place in a FitCircle, with what the goals need of the circle.
public struct FitCircleMembership: Sendable, Equatable {
    public enum Challenge: String, Sendable {
        case steps
        case weightLoss = "weight_loss"
    }

    public let circleID: UUID
    public let challenge: Challenge
    /// The challenge's days (`starts_on`, `ends_on`).
    public let startsOn: LocalDate
    public let endsOn: LocalDate
    /// A steps circle's weekly step goal per member.
    public let stepGoal: Int?
    /// The user's local days of joining and leaving (nil: still a member).
    public let joinedOn: LocalDate
    public let leftOn: LocalDate?
    public let startingWeight: Double?
    public let targetWeight: Double?

    public init(
        circleID: UUID, challenge: Challenge, startsOn: LocalDate, endsOn: LocalDate, stepGoal: Int?,
        joinedOn: LocalDate, leftOn: LocalDate?, startingWeight: Double?, targetWeight: Double?
    ) {
        self.circleID = circleID
        self.challenge = challenge
        self.startsOn = startsOn
        self.endsOn = endsOn
        self.stepGoal = stepGoal
        self.joinedOn = joinedOn
        self.leftOn = leftOn
        self.startingWeight = startingWeight
        self.targetWeight = targetWeight
    }

    /// A member on local day `day`: joined that day or before, not left before it, and the
    /// challenge runs that day. Leaving during a day still counts for that day.
    public func isActive(on day: LocalDate) -> Bool {
        joinedOn <= day && (leftOn.map { day <= $0 } ?? true) && startsOn <= day && day <= endsOn
    }

    /// Whole weeks left in the challenge from `monday`, that week included (at least 1).
    public func weeksRemaining(from monday: LocalDate) -> Int {
        Self.weeksRemaining(until: endsOn, from: monday)
    }

    /// Whole weeks from `monday` to a challenge ending on `endsOn`, that week included (at least 1):
    /// what a week's share of a weight goal is divided by.
    public static func weeksRemaining(until endsOn: LocalDate, from monday: LocalDate) -> Int {
        max(1, (endsOn.days(since: monday) + 1 + 6) / 7)
    }
}

extension FitCircleMembership {
    /// The circles of each of `users` (with the calendar their join and leave days are told in),
    /// in one read: what generate-daily-goals and weekly-digest know of a user's circles.
    static func load(
        for users: [UUID: LocalCalendar], on connection: PostgresConnection,
        logger: Logger
    ) async throws -> [UUID: [FitCircleMembership]] {
        guard !users.isEmpty else { return [:] }
        let rows = try await connection.query(
            """
            select m.user_id, c.id, c.challenge_type, c.starts_on, c.ends_on, c.challenge_step_goal, m.joined_at, m.left_at,
                   m.starting_weight::float8, m.target_weight::float8
              from fitcircle_members m join fitcircles c on c.id = m.fitcircle_id
             where m.user_id = any(\(Array(users.keys)))
            """, logger: logger)
        var memberships: [UUID: [FitCircleMembership]] = [:]
        for try await (userID, circleID, challenge, startsOn, endsOn, stepGoal, joinedAt, leftAt, startingWeight, targetWeight)
            in rows.decode((UUID, UUID, String, LocalDate, LocalDate, Int?, Date, Date?, Double?, Double?).self)
        {
            guard let calendar = users[userID], let challenge = Challenge(rawValue: challenge) else { continue }
            memberships[userID, default: []].append(
                FitCircleMembership(
                    circleID: circleID, challenge: challenge, startsOn: startsOn, endsOn: endsOn, stepGoal: stepGoal,
                    joinedOn: calendar.localDate(at: joinedAt), leftOn: leftAt.map { calendar.localDate(at: $0) },
                    startingWeight: startingWeight, targetWeight: targetWeight))
        }
        return memberships
    }
}
