import Foundation

/// A member of a circle as the boards need them.
public struct CircleMember: Sendable, Equatable {
    public let userID: UUID
    public let joinedAt: Date
    public let leftAt: Date?
    public let startingWeight: Decimal?
    public let targetWeight: Decimal?
    /// The member's own zone and locale, for the movement notification.
    public let timezone: String?
    public let locale: String

    public init(userID: UUID, joinedAt: Date, leftAt: Date?, startingWeight: Decimal?, targetWeight: Decimal?,
                timezone: String?, locale: String) {
        self.userID = userID
        self.joinedAt = joinedAt
        self.leftAt = leftAt
        self.startingWeight = startingWeight
        self.targetWeight = targetWeight
        self.timezone = timezone
        self.locale = locale
    }

    /// On the roster at `instant`: joined by then and not left yet.
    public func isOnRoster(at instant: Date) -> Bool {
        joinedAt <= instant && (leftAt.map { $0 > instant } ?? true)
    }
}

/// What a member submitted within a board's counted days (`fitcircle_data_submissions`).
public struct SubmittedTotals: Sendable, Equatable {
    /// The sum of the submitted steps.
    public var steps: Int = 0
    /// When the last submission with steps was made: the one that brought the member to the sum.
    public var stepsAt: Date?
    /// The latest submitted weight (by day, then submission time), and when it was submitted.
    public var weight: Decimal?
    public var weightAt: Date?
    /// The latest weight submitted before the board's first day, within the challenge (a monthly
    /// weight-loss board: what this month's loss is measured from).
    public var weightBefore: Decimal?

    public init(steps: Int = 0, stepsAt: Date? = nil, weight: Decimal? = nil, weightAt: Date? = nil, weightBefore: Decimal? = nil) {
        self.steps = steps
        self.stepsAt = stepsAt
        self.weight = weight
        self.weightAt = weightAt
        self.weightBefore = weightBefore
    }

    public static let none = SubmittedTotals()
}

/// A member's place on a board.
public struct Standing: Sendable, Equatable {
    public let userID: UUID
    public let metricType: String
    /// Nil when the member has nothing to rank by (no weigh-in in the period, no usable goal).
    public let value: Decimal?
    /// When the member reached the value: the tie-breaker.
    public let achievedAt: Date?
    public let rank: Int
    /// Places gained since the previous period's final board (+2: up two places); nil when the
    /// member held no place there with a value (`placesHeld`).
    public let rankChange: Int?
}

/// Seed 003 Feature 3's ranking logic, per board: steps circles by the sum of steps; weight-loss
/// circles by the percentage of the goal on daily and weekly boards
/// (`(starting − latest) / (starting − target) × 100`, to two decimals) and by the weight lost on
/// monthly (since the last weight before the month) and all-time boards (since the starting
/// weight). Ties go to whoever reached the value first; then, as a last resort, by user id.
/// Ranks are 1, 2, 3 … and unique: every member has their own place.
public enum LeaderboardStandings {
    /// Why a member has no value on a board, when it is not just "nothing submitted".
    public enum Gap: Sendable, Equatable, CustomStringConvertible {
        case noGoal
        case targetNotBelowStart

        public var description: String {
            switch self {
            case .noGoal: "has no starting or target weight, so no percentage of goal"
            case .targetNotBelowStart: "has a target weight that is not below the starting weight, so no percentage of goal"
            }
        }
    }

    public static func metricType(_ challenge: FitCircleMembership.Challenge, _ period: LeaderboardPeriod) -> String {
        switch (challenge, period) {
        case (.steps, _): "steps"
        case (.weightLoss, .daily), (.weightLoss, .weekly): "weight_loss_pct"
        case (.weightLoss, .monthly), (.weightLoss, .allTime): "weight_lost"
        }
    }

    /// A member's value on a board and when they reached it, or why they have none.
    public static func value(for member: CircleMember, totals: SubmittedTotals, challenge: FitCircleMembership.Challenge,
                             period: LeaderboardPeriod) -> (value: Decimal?, achievedAt: Date?, gap: Gap?) {
        switch (challenge, period) {
        case (.steps, _):
            return (Decimal(totals.steps), totals.steps > 0 ? totals.stepsAt : nil, nil)
        case (.weightLoss, .daily), (.weightLoss, .weekly):
            guard let start = member.startingWeight, let target = member.targetWeight else { return (nil, nil, .noGoal) }
            guard target < start else { return (nil, nil, .targetNotBelowStart) }
            guard let weight = totals.weight else { return (nil, nil, nil) }
            return (rounded(100 * (start - weight) / (start - target), scale: 2), totals.weightAt, nil)
        case (.weightLoss, .monthly), (.weightLoss, .allTime):
            let from = period == .monthly ? (totals.weightBefore ?? member.startingWeight) : member.startingWeight
            guard let from, let weight = totals.weight else { return (nil, nil, nil) }
            return (from - weight, totals.weightAt, nil)
        }
    }

    /// The board's standings for the members on its roster, ranked; `previousRanks` are the final
    /// ranks of the period before (nil for a board that has none: every change is nil then).
    public static func rank(members: [CircleMember], totals: [UUID: SubmittedTotals], challenge: FitCircleMembership.Challenge,
                            period: LeaderboardPeriod, previousRanks: [UUID: Int]?) -> (standings: [Standing], gaps: [(UUID, Gap)]) {
        var gaps: [(UUID, Gap)] = []
        let valued = members.map { member in
            let (value, achievedAt, gap) = self.value(for: member, totals: totals[member.userID] ?? .none, challenge: challenge,
                                                      period: period)
            if let gap { gaps.append((member.userID, gap)) }
            return (member.userID, value, achievedAt)
        }
        let ordered = valued.sorted { lhs, rhs in
            if lhs.1 != rhs.1 {
                guard let left = lhs.1 else { return false }
                guard let right = rhs.1 else { return true }
                return left > right
            }
            if lhs.2 != rhs.2 {
                guard let left = lhs.2 else { return false }
                guard let right = rhs.2 else { return true }
                return left < right
            }
            return isBefore(lhs.0, rhs.0)
        }
        let type = metricType(challenge, period)
        let standings = ordered.enumerated().map { index, entry in
            let rank = index + 1
            return Standing(userID: entry.0, metricType: type, value: entry.1, achievedAt: entry.2, rank: rank,
                            rankChange: previousRanks?[entry.0].map { $0 - rank })
        }
        return (standings, gaps)
    }

    /// The places a period's final board gave to measure `rank_change` against: those of the
    /// members who had a value there. A member with nothing (no steps, no weigh-in) holds a place
    /// only by the order of the ids, which is no place to move from: their change is null.
    public static func placesHeld(_ standings: [Standing]) -> [UUID: Int] {
        Dictionary(uniqueKeysWithValues: standings.filter { $0.achievedAt != nil }.map { ($0.userID, $0.rank) })
    }

    /// PostgreSQL's order of uuids (their bytes), which the hex text keeps.
    static func isBefore(_ lhs: UUID, _ rhs: UUID) -> Bool {
        lhs.uuidString < rhs.uuidString
    }

    /// `value` to `scale` decimals, halves away from zero (PostgreSQL's `round(numeric, int)`).
    static func rounded(_ value: Decimal, scale: Int) -> Decimal {
        // `.plain` rounds a half up: on the magnitude, that is away from zero.
        var magnitude = value < 0 ? -value : value, result = Decimal()
        NSDecimalRound(&result, &magnitude, scale, .plain)
        return value < 0 ? -result : result
    }
}
