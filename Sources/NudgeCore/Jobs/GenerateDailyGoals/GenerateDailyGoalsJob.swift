import Foundation
import Logging
import PostgresNIO

/// generate-daily-goals: once a user's local day has begun, that day gets its steps, weight and
/// check-in goals (`GoalRules`); the day before is closed (actual values, completed); the week's
/// goals are created from its Monday and their progress kept up to date as its days close.
///
/// A normal run looks at each user's local yesterday and today; a backfill at the window's days.
/// The decision compares what the rules give with the rows there are and writes only the
/// difference: a goal that exists keeps its target (unless a circle joined or left mid-week
/// changes a weekly one), so a rerun or an overlapping backfill changes nothing.
///
/// It reads only the users whose local midnight has come or whose inputs changed (`DueSource`):
/// the batch's write moves each one's instant to their next midnight, and triggers make a user
/// due at once when a day that has ended in their zone is tracked late, when they join or leave
/// a circle, or when their time zone or sign-up changes. A backfill reads every user.
public struct GenerateDailyGoalsJob: PlainJob {
    public static let jobName = "generate-daily-goals"

    public typealias Source = DueSource

    public let definition: JobDefinition

    public init(definition: JobDefinition) {
        self.definition = definition
    }

    public var source: DueSource { DueSource(job: definition.name, backfillReadsEveryone: true) }

    var dayStart: LocalTime { definition.localTime ?? LocalTime(hour: 0, minute: 0)! }

    /// When the user is next due after a decision at `run.now`: when their next local day begins.
    /// A backfill leaves the instant as it was read.
    func nextDue(for due: DueUser, run: RunContext) -> Date {
        if run.window != nil { return due.dueAt }
        let calendar = due.user.calendar
        return calendar.instant(of: calendar.latestDay(reaching: dayStart, atOrBefore: run.now).adding(days: 1), at: dayStart)
    }

    public struct StoredDailyGoal: Sendable, Equatable {
        public let target: Double?
        public let actual: Double?
        public let completed: Bool
    }

    public struct StoredWeeklyGoal: Sendable, Equatable {
        public let target: Double?
        public let actual: Double?
        public let breakdown: [String: Double]
        public let completed: Bool
        public let circleID: UUID?
    }

    public struct Facts: Sendable {
        public var tracking: [LocalDate: TrackingDay] = [:]
        public var daily: [LocalDate: [String: StoredDailyGoal]] = [:]
        public var weekly: [LocalDate: [String: StoredWeeklyGoal]] = [:]
        public var memberships: [FitCircleMembership] = []

        public init() {}
    }

    public struct DailyGoalWrite: Sendable, Equatable {
        public let date: LocalDate
        public let goal: GoalRules.DailyGoal
        public let target: Double?
        public let actual: Double?
        public let completed: Bool
        public let isNew: Bool
    }

    public struct WeeklyGoalWrite: Sendable, Equatable {
        public let weekStart: LocalDate
        public let goal: GoalRules.WeeklyGoal
        public let target: Double
        public let actual: Double?
        public let breakdown: [String: Double]
        public let completed: Bool
        public let circleID: UUID?
        public let isNew: Bool
    }

    public struct Change: Sendable, Equatable {
        public let daily: [DailyGoalWrite]
        public let weekly: [WeeklyGoalWrite]
        /// The user's instant in the due index as read, and the next one.
        public let dueAt: Date
        public let nextDue: Date
    }

    // MARK: Which days

    struct Days {
        let handled: ClosedRange<LocalDate>
        let signup: LocalDate
        /// The user's last local day that is over.
        let lastEnded: LocalDate

        /// The tracking the decision reads: the two weeks before the first day (the 7 days before
        /// a day, the week before a Monday) through the last day, or through the last day over of
        /// its week, whose progress counts every day that is over, even after a backfill's window.
        var tracking: ClosedRange<LocalDate> {
            handled.lowerBound.adding(days: -14)...max(handled.upperBound, min(handled.upperBound.monday.adding(days: 6), lastEnded))
        }
    }

    /// The local days this run looks at for one user: yesterday and today, or the backfill
    /// window's days up to today; never before sign-up. Nil when there are none.
    func days(for user: UserInTime, run: RunContext) -> Days? {
        let calendar = user.calendar
        let today = calendar.latestDay(reaching: dayStart, atOrBefore: run.now)
        let signup = calendar.localDate(at: user.user.createdAt)
        var first = today.adding(days: -1)
        var last = today
        if let window = run.window {
            first = window.from
            last = min(window.to, today)
        }
        first = max(first, signup)
        guard first <= last else { return nil }
        return Days(handled: first...last, signup: signup, lastEnded: calendar.localDate(at: run.now).adding(days: -1))
    }

    // MARK: Job

    /// Tracking (a prepared statement, two on its first use on a connection), daily goals, weekly
    /// goals, memberships.
    public var readStatements: Int { 5 }

    public func loadFacts(for due: [DueUser], run: RunContext, on connection: PostgresConnection) async throws -> [UUID: Facts] {
        var ranges: [(id: UUID, days: Days)] = []
        var calendars: [UUID: LocalCalendar] = [:]
        for user in due.filter({ $0.problem == nil }).map(\.user) {
            guard let days = days(for: user, run: run) else { continue }
            ranges.append((user.user.id, days))
            calendars[user.user.id] = user.calendar
        }
        guard !ranges.isEmpty else { return [:] }
        var facts: [UUID: Facts] = [:]
        let ids = ranges.map(\.id)
        let firsts = ranges.map(\.days.handled.lowerBound)
        let lasts = ranges.map(\.days.handled.upperBound)
        let logger = run.logger

        for (userID, days) in try await TrackingDay.load(ranges.map { ($0.id, $0.days.tracking) }, on: connection, logger: logger) {
            facts[userID, default: Facts()].tracking = days
        }

        let daily = try await connection.query(
            """
            select g.user_id, g.date, g.goal_type, g.target_value::float8, g.actual_value::float8, g.completed
              from unnest(\(ids), \(firsts), \(lasts)) as r(user_id, first_day, last_day)
              join daily_goals g on g.user_id = r.user_id and g.date between r.first_day and r.last_day
            """, logger: logger)
        for try await (userID, date, goal, target, actual, completed) in daily.decode((UUID, LocalDate, String, Double?, Double?, Bool).self) {
            facts[userID, default: Facts()].daily[date, default: [:]][goal] = StoredDailyGoal(target: target, actual: actual, completed: completed)
        }

        let weekly = try await connection.query(
            """
            select g.user_id, g.week_start, g.goal_type, g.target_value::float8, g.actual_value::float8,
                   g.daily_breakdown::text, g.completed, g.fitcircle_id
              from unnest(\(ids), \(firsts), \(lasts)) as r(user_id, first_day, last_day)
              join weekly_goals g on g.user_id = r.user_id and g.week_start between r.first_day - 6 and r.last_day
            """, logger: logger)
        for try await (userID, weekStart, goal, target, actual, breakdown, completed, circleID)
            in weekly.decode((UUID, LocalDate, String, Double?, Double?, String, Bool, UUID?).self)
        {
            facts[userID, default: Facts()].weekly[weekStart, default: [:]][goal] = StoredWeeklyGoal(
                target: target, actual: actual, breakdown: Self.parseBreakdown(breakdown), completed: completed, circleID: circleID)
        }

        for (userID, memberships) in try await FitCircleMembership.load(for: calendars, on: connection, logger: logger) {
            facts[userID, default: Facts()].memberships = memberships
        }
        return facts
    }

    public func decide(for due: DueUser, facts: Facts?, run: RunContext) throws -> Decision<Change> {
        let user = try due.placed()
        let next = nextDue(for: due, run: run)
        /// Nothing to write: the user waits for their next midnight.
        func waiting(_ why: String) -> Decision<Change> {
            .later(
                PlannedChange(
                    itemID: user.user.id, change: Change(daily: [], weekly: [], dueAt: due.dueAt, nextDue: next),
                    work: [], notifications: [], tally: [:]), why)
        }
        guard let days = days(for: user, run: run) else {
            return waiting("no local day in scope since sign-up")
        }
        let facts = facts ?? Facts()
        var daily: [DailyGoalWrite] = []
        var work: [WorkMark] = []
        var tally: [String: Int] = [:]

        for number in days.handled.lowerBound.daysSinceEpoch...days.handled.upperBound.daysSinceEpoch {
            let day = LocalDate(daysSinceEpoch: number)
            let stored = facts.daily[day] ?? [:]
            let isOver = day <= days.lastEnded
            let targets = GoalRules.dailyTargets(
                on: day, signedUpOn: days.signup, tracking: facts.tracking,
                memberships: facts.memberships)
            var created = false
            for goal in GoalRules.DailyGoal.allCases {
                if let existing = stored[goal.rawValue] {
                    guard isOver else { continue }
                    let result = GoalRules.close(goal, target: existing.target, on: day, tracking: facts.tracking)
                    if !Self.same(result.actual, existing.actual) || result.completed != existing.completed {
                        daily.append(
                            DailyGoalWrite(
                                date: day, goal: goal, target: existing.target, actual: result.actual,
                                completed: result.completed, isNew: false))
                        tally["daily_closed", default: 0] += 1
                    }
                } else if let target = targets.target(goal) {
                    let result = isOver ? GoalRules.close(goal, target: target, on: day, tracking: facts.tracking) : nil
                    daily.append(
                        DailyGoalWrite(
                            date: day, goal: goal, target: target, actual: result?.actual,
                            completed: result?.completed ?? false, isNew: true))
                    created = true
                }
            }
            if created {
                work.append(
                    WorkMark(
                        localDay: day, outcome: targets.basis.rawValue,
                        detail: targets.reasons.isEmpty ? nil : targets.reasons.joined(separator: "; ")))
                tally["goals:\(targets.basis.rawValue)", default: 0] += 1
            }
        }

        var weekly: [WeeklyGoalWrite] = []
        let mondays = Set(
            (days.handled.lowerBound.daysSinceEpoch...days.handled.upperBound.daysSinceEpoch)
                .map { LocalDate(daysSinceEpoch: $0).monday })
        for monday in mondays.sorted() where monday >= days.signup {
            // A week's circles are those of its last day, or of today in the current week: the same
            // whichever of its days a run handles, so a backfill never undoes a recalculation.
            let asOf = min(monday.adding(days: 6), days.lastEnded.adding(days: 1))
            let stored = facts.weekly[monday] ?? [:]
            let targets = GoalRules.weeklyTargets(
                monday: monday, asOf: asOf, signedUpOn: days.signup,
                tracking: facts.tracking, memberships: facts.memberships)
            for goal in GoalRules.WeeklyGoal.allCases {
                let desired = targets[goal]!
                let existing = stored[goal.rawValue]
                // A target stays as set, unless the user joined or left the circle it comes from.
                let target = existing.flatMap { $0.circleID == desired.circleID ? $0.target : nil } ?? desired.target
                let progress = GoalRules.weeklyProgress(
                    goal, target: target, monday: monday, signedUpOn: days.signup,
                    lastEnded: days.lastEnded, tracking: facts.tracking)
                let write = WeeklyGoalWrite(
                    weekStart: monday, goal: goal, target: target, actual: progress.actual,
                    breakdown: progress.breakdown, completed: progress.completed,
                    circleID: desired.circleID, isNew: existing == nil)
                if let existing {
                    if Self.same(existing.target, target) && Self.same(existing.actual, progress.actual)
                        && existing.breakdown == progress.breakdown && existing.completed == progress.completed
                        && existing.circleID == desired.circleID
                    {
                        continue
                    }
                    tally[existing.circleID == desired.circleID ? "weekly_updated" : "weekly_recalculated", default: 0] += 1
                } else {
                    tally["weekly_created", default: 0] += 1
                }
                weekly.append(write)
            }
        }

        guard !daily.isEmpty || !weekly.isEmpty else {
            return waiting("goals of \(days.handled.lowerBound)...\(days.handled.upperBound) are up to date")
        }
        return .act(
            PlannedChange(
                itemID: user.user.id, change: Change(daily: daily, weekly: weekly, dueAt: due.dueAt, nextDue: next),
                work: work, notifications: [], tally: tally))
    }

    public func writes(for changes: [PlannedChange<Change>], run: RunContext) -> BatchWrites {
        var writes = DueSource.moveWrites(
            job: definition.name, users: changes.map(\.itemID),
            expected: changes.map(\.change.dueAt), next: changes.map(\.change.nextDue))
        let daily = changes.flatMap { change in change.change.daily.map { (change.itemID, $0) } }
        let newDaily = daily.filter(\.1.isNew)
        let closedDaily = daily.filter { !$0.1.isNew }
        if !newDaily.isEmpty {
            writes.step(
                "new_daily_goals",
                """
                insert into daily_goals (user_id, date, goal_type, target_value, actual_value, completed, created_at)
                select user_id, date, goal_type, nullif(target, '')::numeric, nullif(actual, '')::numeric, completed, \(run.now)
                  from unnest(\(newDaily.map(\.0)), \(newDaily.map(\.1.date)), \(newDaily.map(\.1.goal.rawValue)),
                              \(newDaily.map { Self.text($0.1.target) }), \(newDaily.map { Self.text($0.1.actual) }),
                              \(newDaily.map(\.1.completed)))
                       as g(user_id, date, goal_type, target, actual, completed)
                on conflict (user_id, date, goal_type) do nothing
                """)
        }
        if !closedDaily.isEmpty {
            writes.step(
                "closed_daily_goals",
                """
                update daily_goals g set actual_value = nullif(c.actual, '')::numeric, completed = c.completed
                  from unnest(\(closedDaily.map(\.0)), \(closedDaily.map(\.1.date)), \(closedDaily.map(\.1.goal.rawValue)),
                              \(closedDaily.map { Self.text($0.1.actual) }), \(closedDaily.map(\.1.completed)))
                       as c(user_id, date, goal_type, actual, completed)
                 where g.user_id = c.user_id and g.date = c.date and g.goal_type = c.goal_type
                """)
        }
        let weekly = changes.flatMap { change in change.change.weekly.map { (change.itemID, $0) } }
        let newWeekly = weekly.filter(\.1.isNew)
        let changedWeekly = weekly.filter { !$0.1.isNew }
        if !newWeekly.isEmpty {
            writes.step(
                "new_weekly_goals",
                """
                insert into weekly_goals (user_id, week_start, goal_type, target_value, actual_value, daily_breakdown,
                                          completed, fitcircle_id, created_at)
                select user_id, week_start, goal_type, target::numeric, nullif(actual, '')::numeric, breakdown::jsonb, completed,
                       nullif(circle, '')::uuid, \(run.now)
                  from unnest(\(newWeekly.map(\.0)), \(newWeekly.map(\.1.weekStart)), \(newWeekly.map(\.1.goal.rawValue)),
                              \(newWeekly.map { Self.text($0.1.target) }), \(newWeekly.map { Self.text($0.1.actual) }),
                              \(newWeekly.map { Self.json($0.1.breakdown) }), \(newWeekly.map(\.1.completed)),
                              \(newWeekly.map { $0.1.circleID?.uuidString ?? "" }))
                       as g(user_id, week_start, goal_type, target, actual, breakdown, completed, circle)
                on conflict (user_id, week_start, goal_type) do nothing
                """)
        }
        if !changedWeekly.isEmpty {
            writes.step(
                "updated_weekly_goals",
                """
                update weekly_goals g
                   set target_value = c.target::numeric, actual_value = nullif(c.actual, '')::numeric,
                       daily_breakdown = c.breakdown::jsonb, completed = c.completed, fitcircle_id = nullif(c.circle, '')::uuid
                  from unnest(\(changedWeekly.map(\.0)), \(changedWeekly.map(\.1.weekStart)), \(changedWeekly.map(\.1.goal.rawValue)),
                              \(changedWeekly.map { Self.text($0.1.target) }), \(changedWeekly.map { Self.text($0.1.actual) }),
                              \(changedWeekly.map { Self.json($0.1.breakdown) }), \(changedWeekly.map(\.1.completed)),
                              \(changedWeekly.map { $0.1.circleID?.uuidString ?? "" }))
                       as c(user_id, week_start, goal_type, target, actual, breakdown, completed, circle)
                 where g.user_id = c.user_id and g.week_start = c.week_start and g.goal_type = c.goal_type
                """)
        }
        return writes
    }

    // MARK: Values

    /// A number as the text PostgreSQL reads back as the same numeric ("" for none).
    static func text(_ value: Double?) -> String {
        guard let value else { return "" }
        return value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : "\(value)"
    }

    /// `{"Mon": 8500, "Tue": 0}` in weekday order.
    static func json(_ breakdown: [String: Double]) -> String {
        let entries = GoalRules.dayNames.compactMap { name in breakdown[name].map { "\"\(name)\": \(text($0))" } }
        return "{" + entries.joined(separator: ", ") + "}"
    }

    static func parseBreakdown(_ text: String) -> [String: Double] {
        guard let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else { return [:] }
        return object.compactMapValues { ($0 as? NSNumber)?.doubleValue }
    }

    static func same(_ a: Double?, _ b: Double?) -> Bool {
        switch (a, b) {
        case (nil, nil): true
        case (let a?, let b?): abs(a - b) < 1e-9
        default: false
        }
    }
}
