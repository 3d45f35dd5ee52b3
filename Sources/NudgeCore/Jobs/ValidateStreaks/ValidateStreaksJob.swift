import Foundation
import Logging
import PostgresNIO

/// validate-streaks: at 00:05 local (the definition's `localTime`) it settles, for each user, the
/// local days that have ended and are not settled yet, in order, by `StreakRules`. A user's
/// `user_streaks.settled_through` says how far it has got; each day's effects and the new mark
/// are written in one transaction, so a rerun, a second cron line or a backfill settles nothing twice.
///
/// It reads only the users whose 00:05 has come (`DueSource`): the batch's write moves each one's
/// instant to the end of their first day left unsettled, and triggers make a user due at once
/// when their time zone or sign-up changes or their streak row is deleted or set back. A backfill
/// reads every user.
public struct ValidateStreaksJob: PlainJob {
    public static let jobName = "validate-streaks"

    public typealias Source = DueSource

    public let definition: JobDefinition

    /// When the "freeze used" and "streak at risk" notifications go out, on the day after the miss.
    static let notifyAt = LocalTime(hour: 9, minute: 0)!

    public init(definition: JobDefinition) {
        self.definition = definition
    }

    public var source: DueSource { DueSource(job: definition.name, backfillReadsEveryone: true) }

    public struct StoredStreak: Sendable, Equatable {
        public let state: StreakState
        public let settledThrough: LocalDate?
    }

    public struct Facts: Sendable {
        public let streak: StoredStreak?
        public let badges: Set<String>
        public let tracking: [LocalDate: TrackingDay]
    }

    /// One user's decision: the days settled, if any, and when they are next due.
    public struct Change: Sendable, Equatable {
        public let settlement: Settlement?
        /// The user's instant in the due index as read, and the next one: the end of the first
        /// day left unsettled, at 00:05.
        public let dueAt: Date
        public let nextDue: Date
    }

    /// The streak after the days settled.
    public struct Settlement: Sendable, Equatable {
        /// `settled_through` as read, checked again when writing (nil also for a new row).
        public let expectedSettledThrough: LocalDate?
        public let state: StreakState
        public let settledThrough: LocalDate
        public let streakDays: [LocalDate: Int]
        public let badges: [StreakBadge: Date]
    }

    // MARK: Which days are due

    /// The streak rows, then the tracking of the days due: prepared statements, each two on its
    /// first use on a connection.
    public var readStatements: Int { 4 }

    /// How many days back the first settlement of a user starts (`catchUpDays`).
    var catchUpDays: Int { definition.catchUpDays ?? 7 }

    /// The local days to settle for one user now, or nil when none is due. Throws when a backfill
    /// window starts after days that are not settled yet: a streak is a fold over every day.
    ///
    /// A user Nudge has never settled (no streak row, or one the app wrote without
    /// `settled_through`) starts at most `catchUpDays` before the last day due, or, in a backfill,
    /// at the window's first day: the days before are taken as they stand (the row's streak, or
    /// none), with no badge or notification for them.
    func daysToSettle(for user: UserInTime, streak: StoredStreak?, run: RunContext) throws(NudgeError) -> ClosedRange<LocalDate>? {
        try pending(for: user, streak: streak, run: run).days
    }

    /// The first local day not settled yet, and the days to settle now (`daysToSettle`).
    func pending(
        for user: UserInTime, streak: StoredStreak?,
        run: RunContext
    ) throws(NudgeError) -> (first: LocalDate, days: ClosedRange<LocalDate>?) {
        let calendar = user.calendar
        let trigger = definition.localTime ?? LocalTime(hour: 0, minute: 0)!
        let lastEnded = calendar.latestDay(reaching: trigger, atOrBefore: run.now).adding(days: -1)
        var last = lastEnded
        if let window = run.window { last = min(last, window.to) }
        let first =
            streak?.settledThrough.map { $0.adding(days: 1) }
            ?? max(
                streak?.state.lastCheckinDate.map { $0.adding(days: 1) } ?? calendar.localDate(at: user.user.createdAt),
                run.window?.from ?? last.adding(days: 1 - catchUpDays))
        if let window = run.window {
            if first < window.from && window.from <= last {
                throw NudgeError(
                    .configuration,
                    """
                    days \(first) to \(window.from.adding(days: -1)) are not settled yet; backfill from \(first)
                    """)
            }
            if first < window.from { return (first, nil) }
        }
        return (first, first <= last ? first...last : nil)
    }

    /// When a user whose first day not settled is `first` is next due: when that day has ended
    /// and the trigger time (00:05) of the day after has come.
    func nextDue(_ user: UserInTime, firstUnsettled first: LocalDate) -> Date {
        user.calendar.instant(of: first.adding(days: 1), at: definition.localTime ?? LocalTime(hour: 0, minute: 0)!)
    }

    // MARK: Job

    public func loadFacts(for due: [DueUser], run: RunContext, on connection: PostgresConnection) async throws -> [UUID: Facts] {
        let users = due.filter { $0.problem == nil }.map(\.user)
        guard !users.isEmpty else { return [:] }
        let ids = users.map(\.user.id)
        let rows = try await connection.prepared(
            """
            select u.id, s.user_id is not null, s.current_streak, s.longest_streak, s.last_checkin_date,
                   s.freeze_used_this_week, s.week_start_date, s.settled_through, s.missed_days,
                   coalesce((select array_agg(b.badge) from user_badges b where b.user_id = u.id), '{}')
              from unnest(\(ids)) as u(id)
              left join user_streaks s on s.user_id = u.id
            """, logger: run.logger)
        var streaks: [UUID: StoredStreak] = [:]
        var badges: [UUID: Set<String>] = [:]
        for try await (id, exists, current, longest, lastCheckin, freezeUsed, weekStart, settled, missed, earned)
            in rows.decode((UUID, Bool, Int?, Int?, LocalDate?, Bool?, LocalDate?, LocalDate?, Int?, [String]).self)
        {
            badges[id] = Set(earned)
            guard exists else { continue }
            streaks[id] = StoredStreak(
                state: StreakState(
                    currentStreak: current ?? 0, longestStreak: longest ?? 0, lastCheckinDate: lastCheckin,
                    freezeUsedThisWeek: freezeUsed ?? false, weekStartDate: weekStart,
                    missedDays: missed ?? 0),
                settledThrough: settled)
        }

        // One read of the tracking rows of every day each user has due.
        var ranges: [(UUID, LocalDate, LocalDate)] = []
        for user in users {
            if let days = try? daysToSettle(for: user, streak: streaks[user.user.id], run: run) {
                ranges.append((user.user.id, days.lowerBound, days.upperBound))
            }
        }
        let tracking = try await TrackingDay.load(ranges.map { ($0.0, $0.1...$0.2) }, on: connection, logger: run.logger)
        return Dictionary(
            uniqueKeysWithValues: users.map { user in
                let id = user.user.id
                return (id, Facts(streak: streaks[id], badges: badges[id] ?? [], tracking: tracking[id] ?? [:]))
            })
    }

    public func decide(for due: DueUser, facts: Facts?, run: RunContext) throws -> Decision<Change> {
        let user = try due.placed()
        let stored = facts?.streak
        if let stored, let problem = StreakRules.inconsistency(in: stored.state, settledThrough: stored.settledThrough) {
            throw NudgeError(.configuration, "user_streaks row is inconsistent: \(problem)")
        }
        let pending = try pending(for: user, streak: stored, run: run)
        guard let days = pending.days else {
            // Nothing to settle yet: the user is next due when their first day left has ended.
            let next = nextDue(user, firstUnsettled: pending.first)
            let why = stored?.settledThrough.map { "settled through \($0)" } ?? "no day has ended since sign-up"
            return .later(
                PlannedChange(
                    itemID: user.user.id, change: Change(settlement: nil, dueAt: due.dueAt, nextDue: next),
                    work: [], notifications: [], tally: [:]), why)
        }
        let tracking = facts?.tracking ?? [:]
        var state = stored?.state ?? .fresh
        var earned = facts?.badges ?? []
        var work: [WorkMark] = []
        var notifications: [OutboxMessage] = []
        var streakDays: [LocalDate: Int] = [:]
        var badges: [StreakBadge: Date] = [:]
        var tally: [String: Int] = [:]
        let calendar = user.calendar
        for dayNumber in days.lowerBound.daysSinceEpoch...days.upperBound.daysSinceEpoch {
            let day = LocalDate(daysSinceEpoch: dayNumber)
            let row = tracking[day]
            if let problem = row?.impossibility {
                throw NudgeError(.configuration, "daily_tracking \(day): \(problem)")
            }
            let outcome: DayOutcome
            (state, outcome) = StreakRules.settle(state, day: day, checkedIn: row?.isCheckedIn ?? false)
            work.append(WorkMark(localDay: day, outcome: outcome.rawValue))
            tally[outcome.rawValue, default: 0] += 1
            let nextDay = day.adding(days: 1)
            if outcome == .checkedIn {
                streakDays[day] = state.currentStreak
                if let badge = StreakBadge.earned(at: state.currentStreak), !earned.contains(badge.rawValue) {
                    earned.insert(badge.rawValue)
                    badges[badge] = calendar.instant(of: nextDay, at: definition.localTime ?? LocalTime(hour: 0, minute: 0)!)
                    tally["badge:\(badge.rawValue)", default: 0] += 1
                }
            }
            // A notification about a day is only worth sending on the day after it; a backfill of
            // older days settles them without telling the user about the past. It is for that
            // next day, the one it asks a check-in for (docs/jobs/validate-streaks.md).
            if let type = StreakMessages.type(outcome), run.now < calendar.end(of: nextDay) {
                let payload = #"{"type":"\#(type)","deep_link":"fitcircle://checkin","streak":\#(state.currentStreak),"missed_day":"\#(day)"}"#
                notifications.append(
                    OutboxMessage(
                        type: type, localDay: nextDay, deliverAfter: calendar.instant(of: nextDay, at: Self.notifyAt),
                        title: StreakMessages.title(outcome, streak: state.currentStreak, locale: user.user.locale),
                        body: StreakMessages.body(outcome, streak: state.currentStreak, locale: user.user.locale),
                        payload: payload))
            }
        }
        let settlement = Settlement(
            expectedSettledThrough: stored?.settledThrough, state: state, settledThrough: days.upperBound,
            streakDays: streakDays, badges: badges)
        let change = Change(
            settlement: settlement, dueAt: due.dueAt,
            nextDue: nextDue(user, firstUnsettled: days.upperBound.adding(days: 1)))
        return .act(PlannedChange(itemID: user.user.id, change: change, work: work, notifications: notifications, tally: tally))
    }

    public func writes(for decided: [PlannedChange<Change>], run: RunContext) -> BatchWrites {
        var writes = DueSource.moveWrites(
            job: definition.name, users: decided.map(\.itemID),
            expected: decided.map(\.change.dueAt), next: decided.map(\.change.nextDue))
        let changes = decided.compactMap { change in change.change.settlement.map { (itemID: change.itemID, change: $0) } }
        guard !changes.isEmpty else { return writes }
        let ids = changes.map(\.itemID)
        let states = changes.map(\.change.state)
        func text(_ date: LocalDate?) -> String { date?.description ?? "" }
        writes.step(
            "streaks",
            """
            select * from unnest(\(ids), \(states.map(\.currentStreak)), \(states.map(\.longestStreak)),
                                 \(states.map { text($0.lastCheckinDate) }), \(states.map(\.freezeUsedThisWeek)),
                                 \(states.map { text($0.weekStartDate) }), \(changes.map(\.change.settledThrough)),
                                 \(states.map(\.missedDays)), \(changes.map { text($0.change.expectedSettledThrough) }))
                   as c(user_id, current_streak, longest_streak, last_checkin, freeze_used, week_start,
                        settled_through, missed_days, expected)
            """)
        // Compare-and-set on settled_through: a row that moved since it was read is not overwritten.
        writes.step(
            "updated_streaks",
            """
            update user_streaks s
               set current_streak = c.current_streak, longest_streak = c.longest_streak,
                   last_checkin_date = nullif(c.last_checkin, '')::date, freeze_used_this_week = c.freeze_used,
                   week_start_date = nullif(c.week_start, '')::date, settled_through = c.settled_through,
                   missed_days = c.missed_days, updated_at = \(run.now)
              from streaks c
             where s.user_id = c.user_id and s.settled_through is not distinct from nullif(c.expected, '')::date
            returning s.user_id
            """)
        // A user without a streak row (read as expecting no settled day) gets one.
        let new = changes.filter { $0.change.expectedSettledThrough == nil }
        if !new.isEmpty {
            writes.step(
                "inserted_streaks",
                """
                insert into user_streaks (user_id, current_streak, longest_streak, last_checkin_date, freeze_used_this_week,
                                          week_start_date, settled_through, missed_days, created_at, updated_at)
                select c.user_id, c.current_streak, c.longest_streak, nullif(c.last_checkin, '')::date, c.freeze_used,
                       nullif(c.week_start, '')::date, c.settled_through, c.missed_days, \(run.now), \(run.now)
                  from streaks c
                 where c.expected = '' and not exists (select 1 from user_streaks s where s.user_id = c.user_id)
                on conflict (user_id) do nothing
                returning user_id
                """)
        }
        let written: SQLFragment =
            new.isEmpty
            ? "(select count(*) from updated_streaks)"
            : "(select count(*) from updated_streaks) + (select count(*) from inserted_streaks)"
        writes.expect(
            "\(written) = \(changes.count)",
            else: "user_streaks changed while the batch was deciding; the user will be settled on the next run")

        let streakDays = changes.flatMap { change in change.change.streakDays.map { (change.itemID, $0.key, $0.value) } }
        if !streakDays.isEmpty {
            writes.step(
                "streak_days",
                """
                update daily_tracking t set streak_day = v.streak_day
                  from unnest(\(streakDays.map(\.0)), \(streakDays.map(\.1)), \(streakDays.map(\.2))) as v(user_id, day, streak_day)
                 where t.user_id = v.user_id and t.date = v.day
                """)
        }
        let badges = changes.flatMap { change in change.change.badges.map { (change.itemID, $0.key.rawValue, $0.value) } }
        if !badges.isEmpty {
            writes.step(
                "badges",
                """
                insert into user_badges (user_id, badge, earned_at)
                select * from unnest(\(badges.map(\.0)), \(badges.map(\.1)), \(badges.map(\.2)))
                on conflict (user_id, badge) do nothing
                """)
        }
        return writes
    }
}
