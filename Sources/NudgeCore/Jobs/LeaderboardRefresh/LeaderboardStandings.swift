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

    public init(
        userID: UUID, joinedAt: Date, leftAt: Date?, startingWeight: Decimal?, targetWeight: Decimal?,
        timezone: String?, locale: String
    ) {
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

/// One weigh-in a member submitted (`fitcircle_data_submissions.weight`).
public struct WeighIn: Sendable, Equatable {
    public let day: LocalDate
    public let weight: Decimal
    public let at: Date

    public init(day: LocalDate, weight: Decimal, at: Date) {
        self.day = day
        self.weight = weight
        self.at = at
    }
}

/// What a member submitted that a board reads (`fitcircle_data_submissions`): the steps within its
/// counted days, and, in a weight-loss circle, every weigh-in from the challenge's first day to
/// the board's last (a weight stands until the next weigh-in).
public struct SubmittedTotals: Sendable, Equatable {
    /// The sum of the submitted steps.
    public var steps: Int = 0
    /// When the last submission with steps was made: the one that brought the member to the sum.
    public var stepsAt: Date?
    /// Oldest first (by day, then submission time).
    public var weighIns: [WeighIn] = []

    public init(steps: Int = 0, stepsAt: Date? = nil, weighIns: [WeighIn] = []) {
        self.steps = steps
        self.stepsAt = stepsAt
        self.weighIns = weighIns
    }

    public static let none = SubmittedTotals()

    /// The member's weight as of the end of `day` (their latest weigh-in up to it), and since when
    /// they have stood at it: a re-weigh at the same value keeps the earlier time, so it does not
    /// lose a tie.
    public func weight(through day: LocalDate) -> (weight: Decimal, since: Date)? {
        let upTo = weighIns.filter { $0.day <= day }
        guard let latest = upTo.last else { return nil }
        var since = latest.at
        for weighIn in upTo.reversed() {
            guard weighIn.weight == latest.weight else { break }
            since = min(since, weighIn.at)
        }
        return (latest.weight, since)
    }

    /// The member's latest weigh-in before `day`.
    public func weight(before day: LocalDate) -> Decimal? {
        weighIns.last { $0.day < day }?.weight
    }

    /// Whether the member weighed in on one of `days`: what gives them a place on a weight board
    /// of those days (a weight carried forward from before them is no value of theirs).
    public func weighedIn(within days: ClosedRange<LocalDate>) -> Bool {
        weighIns.contains { days.contains($0.day) }
    }
}

/// A member's place on a board.
public struct Standing: Sendable, Equatable {
    public let userID: UUID
    public let metricType: String
    /// Nil when the member has nothing to rank by (no steps, no weigh-in in the board's days, no usable goal).
    public let value: Decimal?
    /// When the member reached the value: the tie-breaker.
    public let achievedAt: Date?
    /// Nil for a member without a value: they hold no place (the app shows them unranked).
    public let rank: Int?
    /// Places gained since the previous period's final board (+2: up two places); nil when the
    /// member held no place there or holds none here.
    public let rankChange: Int?
}

/// The ranking (docs/jobs/leaderboard-refresh.md, "Ranking"), per board: steps circles by the sum
/// of steps; weight-loss circles by the latest weigh-in up to the board's last day (a weight stands
/// until the next weigh-in): daily boards by the percentage of the goal
/// (`(starting − latest) / (starting − target) × 100`, to two decimals), weekly boards by the
/// percentage of the week's weight goal (`(starting − target) / weeks remaining`, as
/// generate-daily-goals sets it) lost since the last weight before the week, monthly boards by the
/// weight lost since the last weight before the month and all-time boards since the starting
/// weight. Ties go to whoever reached the value first; then, as a last resort, by user id. Members
/// with a value are ranked 1, 2, 3 …, each with their own place; a member without one has no place.
/// A value comes from the board's own days: steps above 0 in them, or a weigh-in in them
/// (docs/jobs/leaderboard-refresh.md, "What counts").
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

    /// A member's value on `board` of `circle` and when they reached it, or why they have none.
    public static func value(
        for member: CircleMember, totals: SubmittedTotals, circle: CircleRow,
        board: Board
    ) -> (value: Decimal?, achievedAt: Date?, gap: Gap?) {
        guard let days = board.countedDays(in: circle) else { return (nil, nil, nil) }
        switch (circle.challenge, board.period) {
        case (.steps, _):
            guard totals.steps > 0 else { return (nil, nil, nil) }
            return (Decimal(totals.steps), totals.stepsAt, nil)
        case (.weightLoss, .daily), (.weightLoss, .weekly):
            guard let start = member.startingWeight, let target = member.targetWeight else { return (nil, nil, .noGoal) }
            guard target < start else { return (nil, nil, .targetNotBelowStart) }
            // No weigh-in in the board's days: a weight carried forward from before them is no
            // place of theirs (it would rank them by how long ago they last weighed in).
            guard totals.weighedIn(within: days), let (weight, since) = totals.weight(through: days.upperBound)
            else { return (nil, nil, nil) }
            if board.period == .daily {
                return (rounded(100 * (start - weight) / (start - target), scale: 2), since, nil)
            }
            // Of the week's goal, (starting − target) ÷ weeks remaining: one division, as the floor's SQL.
            let weeks = Decimal(FitCircleMembership.weeksRemaining(until: circle.endsOn, from: board.start))
            let from = totals.weight(before: days.lowerBound) ?? start
            return (rounded(100 * weeks * (from - weight) / (start - target), scale: 2), since, nil)
        case (.weightLoss, .monthly), (.weightLoss, .allTime):
            let from =
                board.period == .monthly
                ? (totals.weight(before: days.lowerBound) ?? member.startingWeight)
                : member.startingWeight
            // The same on the month's board; on the all-time board, a weigh-in since the challenge began.
            guard let from, totals.weighedIn(within: days), let (weight, since) = totals.weight(through: days.upperBound)
            else { return (nil, nil, nil) }
            return (from - weight, since, nil)
        }
    }

    /// The board's standings for the members on its roster, ranked; `previousRanks` are the places
    /// held on the period before's final board (nil for a board that has none: every change is nil then).
    public static func rank(
        members: [CircleMember], totals: [UUID: SubmittedTotals], circle: CircleRow, board: Board,
        previousRanks: [UUID: Int]?
    ) -> (standings: [Standing], gaps: [(UUID, Gap)]) {
        var gaps: [(UUID, Gap)] = []
        let valued = members.map { member in
            let (value, achievedAt, gap) = self.value(
                for: member, totals: totals[member.userID] ?? .none, circle: circle,
                board: board)
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
        let type = metricType(circle.challenge, board.period)
        var place = 0
        let standings = ordered.map { userID, value, achievedAt in
            guard value != nil else {
                return Standing(userID: userID, metricType: type, value: nil, achievedAt: nil, rank: nil, rankChange: nil)
            }
            place += 1
            let rank = place
            return Standing(
                userID: userID, metricType: type, value: value, achievedAt: achievedAt, rank: rank,
                rankChange: previousRanks?[userID].map { $0 - rank })
        }
        return (standings, gaps)
    }

    /// The places a period's final board gave, to measure `rank_change` against.
    public static func placesHeld(_ standings: [Standing]) -> [UUID: Int] {
        Dictionary(uniqueKeysWithValues: standings.compactMap { standing in standing.rank.map { (standing.userID, $0) } })
    }

    /// PostgreSQL's order of uuids (their bytes), which the hex text keeps.
    static func isBefore(_ lhs: UUID, _ rhs: UUID) -> Bool {
        lhs.uuidString < rhs.uuidString
    }

    /// `value` to `scale` decimals, halves away from zero (PostgreSQL's `round(numeric, int)`).
    static func rounded(_ value: Decimal, scale: Int) -> Decimal {
        // `.plain` rounds a half up: on the magnitude, that is away from zero.
        var magnitude = value < 0 ? -value : value
        var result = Decimal()
        NSDecimalRound(&result, &magnitude, scale, .plain)
        return value < 0 ? -result : result
    }
}
