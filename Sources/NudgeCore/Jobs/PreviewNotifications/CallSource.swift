import Foundation
import PostgresNIO

/// A scheduled coaching call as preview-notifications pages it (docs/jobs/preview-notifications.md).
public struct CallRow: Sendable, Equatable {
    public let id: UUID
    public let userID: UUID
    public let scheduledAt: Date
    /// The topic's key (`fitness_checkin`…), as the app stored it.
    public let topic: String?
    /// `users.notification_lead_min`: how many minutes before the call its preview goes.
    public let leadMinutes: Int
    /// `scheduled_calls.preview_due_at` as read: where the call stands in the pages' order.
    public let dueAt: Date
    /// Whether its preview was decided before (`preview_for` set, or cleared by dispatch when it
    /// refused the preview: `preview_note` 'not sent: …'): rows queued then may still be waiting.
    public let decidedBefore: Bool

    public init(
        id: UUID, userID: UUID, scheduledAt: Date, topic: String?, leadMinutes: Int, dueAt: Date? = nil,
        decidedBefore: Bool = false
    ) {
        self.decidedBefore = decidedBefore
        self.id = id
        self.userID = userID
        self.scheduledAt = scheduledAt
        self.topic = topic
        self.leadMinutes = leadMinutes
        self.dueAt = dueAt ?? scheduledAt.addingTimeInterval(-Double(leadMinutes) * 60)
    }

    /// When its preview is due: `scheduled_at − notification_lead_min`.
    public var previewAt: Date { scheduledAt.addingTimeInterval(-Double(leadMinutes) * 60) }
}

/// A call with its user placed in their time zone (UTC when theirs is unknown: `zoneProblem` says so).
public struct CallInTime: Sendable {
    public let call: CallRow
    public let user: UserInTime
    public var zoneProblem: String?

    public init(call: CallRow, user: UserInTime, zoneProblem: String? = nil) {
        self.call = call
        self.user = user
        self.zoneProblem = zoneProblem
    }
}

/// The calls whose preview is to be decided, by due time: still `pending`, not decided for the
/// time they are at now (`preview_for`, which a re-scheduled call no longer matches), whose
/// preview falls due within `lookAhead` of the page's instant, and which began at most
/// `lateBy` ago (so that one found too late is skipped with a reason, once). `--user` keeps the
/// users' calls; `--shard` splits calls by their user.
///
/// Only what can be due is read (docs/design.md, "Reading only what is due"): the page walks
/// `idx_scheduled_calls_preview_due`, the undecided pending calls by `preview_due_at` (`scheduled_at − notification_lead_min`,
/// which triggers keep up to date, migration 0008), and id, from the earliest due time a call not
/// yet `lateBy` old can have, or the last call of the page before, to the horizon: each page
/// reads its own calls, whatever the table holds and however many fall due at once. A call
/// written without its `preview_due_at` (triggers off, or a backfill not finished) is read too,
/// through `idx_scheduled_calls_preview_due_unset` (migration 0012) by its call time, its due
/// time computed as the trigger would: no call goes without its preview for want of the column.
///
/// A user whose time zone Nudge does not know still gets the preview (it needs no zone): the
/// call's local day is then UTC's.
public struct CallSource: WorkSource {
    public typealias Item = CallInTime

    public let lookAhead: TimeInterval
    /// How long after a call's start a call still undecided is met (and skipped).
    public static let lateBy: TimeInterval = 3600
    /// `users.notification_lead_min`'s largest value (the column's check).
    static let longestLead: TimeInterval = 120 * 60

    public init(lookAhead: TimeInterval) {
        self.lookAhead = lookAhead
    }

    public var noun: String { "call" }

    /// The due time as the trigger computes it, for a call without `preview_due_at`.
    static let computedDue = "(c.scheduled_at - make_interval(mins => u.notification_lead_min))"

    /// The calls of one of the two reads: those with `preview_due_at` (by it), or those without
    /// (by their call time, then their computed due time).
    private func conditions(_ request: PageRequest, dueSet: Bool) -> SQLFragment {
        let horizon = request.now.addingTimeInterval(lookAhead)
        let range: SQLFragment =
            dueSet
            ? """
            c.preview_due_at > \(request.now.addingTimeInterval(-Self.lateBy - Self.longestLead))
            and c.preview_due_at <= \(horizon)
            """
            : """
            c.preview_due_at is null and c.scheduled_at <= \(horizon.addingTimeInterval(Self.longestLead))
            and \(unescaped: Self.computedDue) <= \(horizon)
            """
        return """
            c.status = 'pending' and c.preview_for is distinct from c.scheduled_at and \(range)
            and c.scheduled_at > \(request.now.addingTimeInterval(-Self.lateBy))
            and \(request.inShard("c.user_id")) and \(request.forUsers("c.user_id"))
            """
    }

    /// Where a page starts: after the last call of the page before, at the due time its page read
    /// (`pagedAt`). A resumed run, or a page that ended on an unusable call, knows only its id: its
    /// due time now, or, the call gone, the start of the range.
    private func after(_ request: PageRequest, due: String) -> SQLFragment {
        guard let last = request.after else { return "true" }
        if let time = request.afterTime { return "(\(unescaped: due), c.id) > (\(time), \(last))" }
        return """
            (\(unescaped: due), c.id) > (coalesce((select coalesce(k.preview_due_at, k.scheduled_at - make_interval(mins => ku.notification_lead_min))
                                                     from scheduled_calls k join users ku on ku.id = k.user_id where k.id = \(last)),
                                                    \(request.now.addingTimeInterval(-Self.lateBy - Self.longestLead))), \(last))
            """
    }

    public func pagedAt(_ item: Paged<CallInTime>) -> Date? {
        guard case .item(_, let call) = item else { return nil }
        return call.call.dueAt
    }

    public func page(
        _ request: PageRequest, calendars: CalendarCache,
        on connection: PostgresConnection
    ) async throws -> [Paged<CallInTime>] {
        func read(dueSet: Bool) -> SQLFragment {
            let due = dueSet ? "c.preview_due_at" : Self.computedDue
            return """
                (select c.id, c.user_id, c.scheduled_at, c.topic, u.notification_lead_min, \(unescaped: due) as due,
                        c.preview_for is not null or coalesce(c.preview_note like 'not sent:%', false) as decided,
                        u.timezone, u.locale, u.created_at
                   from scheduled_calls c join users u on u.id = c.user_id
                  where \(request.notPaused) and \(after(request, due: due)) and \(conditions(request, dueSet: dueSet))
                  order by \(unescaped: due), c.id
                  limit \(request.limit))
                """
        }
        let query: SQLFragment = """
            select * from (\(read(dueSet: true)) union all \(read(dueSet: false))) calls
             order by due, id
             limit \(request.limit)
            """
        let rows = try await connection.query(try query.query(), logger: request.logger)
        var page: [Paged<CallInTime>] = []
        page.reserveCapacity(request.limit)
        for try await (id, userID, scheduledAt, topic, lead, dueAt, decidedBefore, timezone, locale, createdAt)
            in rows.decode((UUID, UUID, Date, String?, Int, Date, Bool, String?, String, Date).self)
        {
            let call = CallRow(
                id: id, userID: userID, scheduledAt: scheduledAt, topic: topic, leadMinutes: lead, dueAt: dueAt,
                decidedBefore: decidedBefore)
            // The preview needs no zone (nor a sign-up time): in an unknown zone UTC's day stands
            // in, and the call's mark says why.
            let (user, problem) = try calendars.placeForDelivery(
                UserRow(
                    id: userID, timezone: timezone, locale: locale,
                    createdAt: createdAt))
            page.append(.item(id, CallInTime(call: call, user: user, zoneProblem: problem.map { "\($0): the call's local day is UTC's" })))
        }
        return page
    }

    public func count(_ request: PageRequest, on connection: PostgresConnection) async throws -> Int? {
        let query: SQLFragment = """
            select count(*) from scheduled_calls c join users u on u.id = c.user_id
             where (\(conditions(request, dueSet: true))) or (\(conditions(request, dueSet: false)))
            """
        return try await request.count(query, on: connection)
    }
}
