import Foundation
import Logging
import PostgresNIO

/// A user as a job that reads through the due index meets them: placed in their time zone (UTC
/// when Nudge cannot place them: `problem` says why, and the job decides what that means), with
/// the instant they were due at as read, which the job's write compares before moving it.
public struct DueUser: Sendable {
    public let user: UserInTime
    /// `job_due.due_at` as read ('epoch' or a little before: an input changed, decide again at once).
    public let dueAt: Date
    /// `job_due.planned_at`: the instant the job had set before a trigger made the user due at once.
    public let plannedAt: Date?
    /// Why the user cannot be placed in time (an unknown zone, an impossible sign-up), if so.
    public let problem: String?
    /// Whether the user has a row in the index: a sweep or a backfill also reads those who have
    /// none (read as due at once), and the job's write gives them one.
    public let indexed: Bool

    public init(user: UserInTime, dueAt: Date, plannedAt: Date? = nil, problem: String? = nil, indexed: Bool = true) {
        self.user = user
        self.dueAt = dueAt
        self.plannedAt = plannedAt
        self.problem = problem
        self.indexed = indexed
    }

    /// Whether a trigger made the user due at once (their instant is 'epoch' or before it).
    public var changed: Bool { dueAt <= Date(timeIntervalSince1970: 0) }

    /// The user in their time zone, or, when Nudge cannot place them, the error that fails this
    /// user alone with the reason.
    public func placed() throws(NudgeError) -> UserInTime {
        if let problem { throw NudgeError(.configuration, problem) }
        return user
    }
}

/// The users whose next instant for a job has come (`job_due`, migration 0013), by that instant
/// and id: a run at 20:00 in Paris reads the users something is due for by then and nobody else
/// (docs/design.md, "Reading only what is due"). The job moves each user's instant forward in its
/// batch's write (`DueSource.moveWrites`); triggers move it to 'epoch' when an input of the job's
/// rule changes. What a missed tick or an outage left due is read by the next run, oldest first.
///
/// A page walks `idx_job_due_due` from the last user of the page before, at the instant its page
/// read (every user read is an item, so that instant is always known); a resumed run starts again
/// from the first due user: those its interrupted run did are no longer due. A user the job failed
/// is looked at again `retryAfter` later, not at every run. `--user` reads those users whatever
/// their instant, by id; `--shard` splits them by id.
///
/// A sweep (`--sweep`), and a backfill of a job that asks for it (`backfillReadsEveryone`), read
/// every user by id instead, due or not, with or without a row in the index: the sweep proves the
/// index right (the runner counts what it finds due that the index had not), and a backfill
/// reaches days the index has moved past.
public struct DueSource: WorkSource {
    public typealias Item = DueUser

    /// The job whose instants are read (`job_due.job`).
    public let job: String
    /// Whether a backfill (`--date`, `--from/--to`) reads every user rather than the due ones.
    public let backfillReadsEveryone: Bool

    /// How long a user the job failed waits before the next try.
    public static let retryAfter: TimeInterval = 3600

    /// The instant read for a user without a row in the index: one no row ever holds (triggers
    /// write 'epoch' or a few seconds before it), so that the job's move inserts a row and never
    /// overwrites one a trigger inserted meanwhile.
    static let noRow = Date(timeIntervalSince1970: -62_135_596_800)   // 0001-01-01

    public init(job: String, backfillReadsEveryone: Bool = false) {
        self.job = job
        self.backfillReadsEveryone = backfillReadsEveryone
    }

    public var noun: String { "user" }

    /// Each user's facts are theirs alone: the next page can be read while a batch writes.
    public var readsAhead: Bool { true }

    /// Whether the run reads users by id, due or not: `--user`, a sweep, or a backfill that must.
    private func readsByID(_ request: PageRequest) -> Bool {
        !request.users.isEmpty || request.sweep || (request.window != nil && backfillReadsEveryone)
    }

    /// The users due by the page's instant, in the run's shard.
    private func due(_ request: PageRequest) -> SQLFragment {
        "d.job = \(job) and d.due_at <= \(request.now) and \(request.inShard("d.user_id"))"
    }

    /// Every user in the run's shard (or the `--user` ones), with their row in the index if any.
    private func everyone(_ request: PageRequest) -> SQLFragment {
        "\(request.inShard("u.id")) and \(request.forUsers("u.id"))"
    }

    /// Where a page starts: after the last user of the page before (at the instant its page read;
    /// by id alone when reading by id). Without that instant (a resumed run's checkpoint), from the start.
    private func after(_ request: PageRequest) -> SQLFragment {
        guard let last = request.after else { return "true" }
        if readsByID(request) { return "u.id > \(last)" }
        guard let time = request.afterTime else { return "true" }
        return "(d.due_at, d.user_id) > (\(time), \(last))"
    }

    public func pagedAt(_ item: Paged<DueUser>) -> Date? {
        guard case .item(_, let user) = item else { return nil }
        return user.dueAt
    }

    public func scopeProblem(_ options: RunOptions) -> String? { nil }

    /// Due by the index: its instant has come, or it is a user the job failed, waiting for their
    /// retry with the instant the job had set kept (`planned_at`).
    public func wasDue(_ item: DueUser, at instant: Date) -> Bool {
        item.indexed && (item.dueAt <= instant || item.plannedAt.map { $0 <= instant } ?? false)
    }

    public func lacksIndexRow(_ item: DueUser) -> Bool { !item.indexed }

    public func page(
        _ request: PageRequest, calendars: CalendarCache,
        on connection: PostgresConnection
    ) async throws -> [Paged<DueUser>] {
        let query: SQLFragment =
            readsByID(request)
            ? """
            select u.id, u.timezone, u.locale, u.created_at, coalesce(d.due_at, \(Self.noRow)), d.planned_at, d.user_id is not null
              from users u left join job_due d on d.job = \(job) and d.user_id = u.id
             where \(request.notPaused) and \(after(request)) and \(everyone(request))
             order by u.id
             limit \(request.limit)
            """
            : """
            select u.id, u.timezone, u.locale, u.created_at, d.due_at, d.planned_at, true
              from job_due d join users u on u.id = d.user_id
             where \(request.notPaused) and \(after(request)) and \(due(request))
             order by d.due_at, d.user_id
             limit \(request.limit)
            """
        let rows = try await connection.prepared(query, logger: request.logger)
        var page: [Paged<DueUser>] = []
        page.reserveCapacity(request.limit)
        for try await (id, timezone, locale, createdAt, dueAt, plannedAt, indexed)
            in rows.decode((UUID, String?, String, Date, Date, Date?, Bool).self)
        {
            let row = UserRow(id: id, timezone: timezone, locale: locale, createdAt: createdAt)
            // Every user read is an item, one Nudge cannot place in time too (in UTC, and the job
            // skips it with the reason): the next page starts after its instant.
            do throws(LocalCalendar.Failure) {
                var (placed, problem) = try calendars.placeForDelivery(row)
                if !CalendarCache.plausibleInstants.contains(createdAt) { problem = LocalCalendar.Failure.implausibleSignUp.description }
                page.append(.item(id, DueUser(user: placed, dueAt: dueAt, plannedAt: plannedAt, problem: problem, indexed: indexed)))
            } catch {
                page.append(.unusable(id, "cannot place the user even in UTC: \(error)"))
            }
        }
        return page
    }

    public func count(_ request: PageRequest, on connection: PostgresConnection) async throws -> Int? {
        let query: SQLFragment =
            readsByID(request)
            ? "select count(*) from users u where \(everyone(request))"
            : "select count(*) from job_due d where \(due(request))"
        return try await request.count(query, on: connection)
    }

    /// The users the job failed wait `retryAfter`, even one a change made due (failing, they would
    /// fail the same way at the next run); the instant the job had set is kept (`planned_at`), so
    /// that the retry catches up what it planned.
    public func release(page ids: [UUID], changed: Set<UUID>, failed: [(UUID, String)], run: RunContext) -> BatchWrites {
        var writes = BatchWrites()
        let retry = failed.map(\.0).sorted { $0.uuidString < $1.uuidString }
        guard !retry.isEmpty else { return writes }
        writes.step(
            "failed_due_later",
            """
            update job_due set due_at = \(Self.wholeSeconds(run.now.addingTimeInterval(Self.retryAfter))),
                               planned_at = coalesce(planned_at, case when due_at > 'epoch' then due_at end)
             where job = \(job) and user_id = any(\(retry)) and due_at <= \(run.now)
            """)
        return writes
    }

    /// The batch write that moves each changed user's instant to `next`, if it is still the one
    /// read (`expected`): a trigger that made the user due again meanwhile wins, and the next run
    /// decides them again. A user read without a row (`noRow`, by a sweep or a backfill) gets one. In id
    /// order, as every writer of these rows locks them.
    public static func moveWrites(job: String, users: [UUID], expected: [Date], next: [Date]) -> BatchWrites {
        var writes = BatchWrites()
        guard !users.isEmpty else { return writes }
        let order = users.indices.sorted { users[$0].uuidString < users[$1].uuidString }
        writes.step(
            "due_moves",
            """
            select * from unnest(\(order.map { users[$0] }), \(order.map { expected[$0] }), \(order.map { wholeSeconds(next[$0]) }))
                   as m(user_id, expected, next)
            """)
        writes.step(
            "moved_due",
            """
            update job_due d set due_at = m.next, planned_at = null
              from due_moves m
             where d.job = \(job) and d.user_id = m.user_id
               and d.due_at between m.expected - interval '1 millisecond' and m.expected + interval '1 millisecond'
            """)
        // Only users read without a row (a sweep, a backfill) can need one.
        guard expected.contains(noRow) else { return writes }
        writes.step(
            "indexed_due",
            """
            insert into job_due (job, user_id, due_at)
            select \(job), m.user_id, m.next from due_moves m
             where not exists (select 1 from job_due d where d.job = \(job) and d.user_id = m.user_id)
            on conflict (job, user_id) do nothing
            """)
        return writes
    }

    /// For each of `jobs` (those that read through the due index), how many users have no row in
    /// it: a load that bypassed the triggers (`pg_restore --disable-triggers`, logical replication)
    /// leaves them out, and no run but the job's weekly sweep reads them. Two counts per job, no
    /// scan of one against the other (a row goes with its user).
    public static func unindexedUsers(jobs: [String], on connection: PostgresConnection, logger: Logger) async throws -> [(String, Int)] {
        var counts: [(String, Int)] = []
        let rows = try await connection.query(
            """
            select j.job, (select count(*) from users) - (select count(*) from job_due d where d.job = j.job)
              from unnest(\(jobs)) with ordinality as j(job, place) order by j.place
            """, logger: logger)
        for try await (job, count) in rows.decode((String, Int).self) { counts.append((job, count)) }
        return counts
    }

    /// `instant` to the second below: every instant written is whole seconds, so that one read
    /// back compares equal (a trigger moves an instant by whole seconds too).
    public static func wholeSeconds(_ instant: Date) -> Date {
        Date(timeIntervalSince1970: instant.timeIntervalSince1970.rounded(.down))
    }
}
