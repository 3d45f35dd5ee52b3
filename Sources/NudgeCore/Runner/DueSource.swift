import Foundation
import PostgresNIO

/// A user as a job that reads through the due index meets them: placed in their time zone (UTC
/// when Nudge does not know theirs: `zoneProblem` says why, and the job decides what that means),
/// with the instant they were due at as read, which the job's write compares before moving it.
public struct DueUser: Sendable {
    public let user: UserInTime
    /// `job_due.due_at` as read ('epoch': an input changed, decide again at once).
    public let dueAt: Date
    public let zoneProblem: String?

    public init(user: UserInTime, dueAt: Date, zoneProblem: String? = nil) {
        self.user = user
        self.dueAt = dueAt
        self.zoneProblem = zoneProblem
    }
}

/// The users whose next instant for a job has come (`job_due`, migration 0013), by that instant
/// and id: a run at 20:00 in Paris reads the users something is due for by then and nobody else
/// (SPEC §5, DESIGN "Finding the work"). The job moves each user's instant forward in its
/// batch's write (`DueSource.moveWrites`); triggers move it to 'epoch' when an input of the job's
/// rule changes. What a missed tick or an outage left due is read by the next run, oldest first.
///
/// A page walks `idx_job_due_due` from the last user of the page before (at the instant its page
/// read); a resumed run starts again from the first due user: those its interrupted run did are
/// no longer due. `--user` reads those users whatever their instant (an operator's re-decision is
/// harmless: the job's state says what is done), `--shard` splits them by id.
public struct DueSource: WorkSource {
    public typealias Item = DueUser

    /// The job whose instants are read (`job_due.job`).
    public let job: String

    public init(job: String) {
        self.job = job
    }

    public var noun: String { "user" }

    /// The users read: due by the page's instant, or, for `--user`, those users.
    private func conditions(_ request: PageRequest) -> SQLFragment {
        let due: SQLFragment = request.users.isEmpty ? "d.due_at <= \(request.now)" : "true"
        return """
            d.job = \(job) and \(due) and \(request.inShard("d.user_id")) and \(request.forUsers("d.user_id"))
            """
    }

    /// Where a page starts: after the last user of the page before, at the instant its page read.
    /// A page that ended on a user it could not place knows only the id: that user's instant
    /// now, if it is still due (it is: nothing moved it); a resumed run's checkpoint user has
    /// moved on, and the page starts from the first due user.
    private func after(_ request: PageRequest) -> SQLFragment {
        guard let last = request.after else { return "true" }
        if let time = request.afterTime { return "(d.due_at, d.user_id) > (\(time), \(last))" }
        return """
            (d.due_at, d.user_id) > (coalesce((select k.due_at from job_due k
                                                where k.job = \(job) and k.user_id = \(last) and k.due_at <= \(request.now)),
                                               '-infinity'),
                                      case when exists (select 1 from job_due k
                                                         where k.job = \(job) and k.user_id = \(last) and k.due_at <= \(request.now))
                                           then \(last) else \(UUID.allZeros) end)
            """
    }

    public func pagedAt(_ item: Paged<DueUser>) -> Date? {
        guard case .item(_, let user) = item else { return nil }
        return user.dueAt
    }

    public func page(_ request: PageRequest, calendars: CalendarCache,
                     on connection: PostgresConnection) async throws -> [Paged<DueUser>] {
        let query: SQLFragment = """
            select u.id, u.timezone, u.locale, u.created_at, d.due_at
              from job_due d join users u on u.id = d.user_id
             where \(request.notPaused) and \(after(request)) and \(conditions(request))
             order by d.due_at, d.user_id
             limit \(request.limit)
            """
        let rows = try await connection.query(try query.query(), logger: request.logger)
        var page: [Paged<DueUser>] = []
        page.reserveCapacity(request.limit)
        for try await (id, timezone, locale, createdAt, dueAt) in rows.decode((UUID, String?, String, Date, Date).self) {
            let row = UserRow(id: id, timezone: timezone, locale: locale, createdAt: createdAt)
            guard CalendarCache.plausibleInstants.contains(createdAt) else {
                page.append(.unusable(id, LocalCalendar.Failure.implausibleSignUp.description))
                continue
            }
            do throws(LocalCalendar.Failure) {
                let (user, problem) = try calendars.placeForDelivery(row)
                page.append(.item(id, DueUser(user: user, dueAt: dueAt, zoneProblem: problem)))
            } catch {
                page.append(.unusable(id, error.description))
            }
        }
        return page
    }

    public func count(_ request: PageRequest, on connection: PostgresConnection) async throws -> Int? {
        let query: SQLFragment = "select count(*) from job_due d where \(conditions(request))"
        for try await count in try await connection.query(try query.query(), logger: request.logger).decode(Int.self) {
            return count
        }
        return 0
    }

    /// The batch write that moves each changed user's instant to `next`, if it is still the one
    /// read (`expected`): a trigger that made the user due again meanwhile wins, and the next run
    /// decides them again.
    public static func moveWrites(job: String, users: [UUID], expected: [Date], next: [Date]) -> BatchWrites {
        var writes = BatchWrites()
        guard !users.isEmpty else { return writes }
        writes.step("moved_due", """
            update job_due d set due_at = m.next
              from unnest(\(users), \(expected), \(next)) as m(user_id, expected, next)
             where d.job = \(job) and d.user_id = m.user_id and d.due_at = m.expected
            """)
        return writes
    }
}
