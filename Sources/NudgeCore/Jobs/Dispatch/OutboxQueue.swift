import Foundation
import Logging
import PostgresNIO

/// A user's notifications that dispatch holds: the rows due now (and those of the next five
/// minutes, which may join a delivery of their group), with the user placed in their time zone.
public struct UserNotifications: Sendable {
    public let user: UserInTime
    public let rows: [QueuedNotification]
    /// Why the user's zone is unknown (they are in UTC here): only what needs no local clock goes.
    public var zoneProblem: String? = nil
}

/// The notification outbox as a queue: each page claims the due rows of up to `limit` users.
///
/// A claim is a user's lease (`dispatch_leases`: one dispatcher decides a user's notifications
/// at a time, so that caps and grouping hold) and their rows (`status = 'sending'` until
/// `lease_until`), taken in one statement: candidate rows `FOR UPDATE SKIP LOCKED`, so that
/// dispatchers claiming at once pass each other by; leases upserted in user order, only where
/// none is held, so that no two dispatchers hold one user; then the leased users' rows, again
/// skipping any another claim has locked. Rows whose holder died are taken again when their lease
/// ends. A claim touches no indexed column of the outbox, so it is an update in place. Each claim counts as an attempt (a row that kills its dispatcher three times is given
/// up); the batch's write puts back what it did not change. A dry run claims nothing: it reads
/// the users with due rows in id order.
public struct OutboxQueue: WorkSource {
    /// A claimed (or, on a dry run, read) row with its user's zone, locale and sign-up.
    typealias ClaimedRow = (
        Int64, UUID, String, String, LocalDate, Date, Date, String, String, String,
        Int, [String], Int64?, Date?, Date?, String?, String?, Date?, Date?, String?, String, Date
    )

    public typealias Item = UserNotifications

    /// How long a claim holds: longer than a batch's sends and write take.
    public let lease: TimeInterval
    /// Rows due this much after the claim are claimed too, to join a delivery of their group.
    public let lookAhead: TimeInterval

    public init(lease: TimeInterval = 120, lookAhead: TimeInterval = DispatchRules.groupWindow) {
        self.lease = lease
        self.lookAhead = lookAhead
    }

    public var noun: String { "user" }
    public var isQueue: Bool { true }

    public func page(
        _ request: PageRequest, calendars: CalendarCache,
        on connection: PostgresConnection
    ) async throws -> [Paged<UserNotifications>] {
        let rows: [ClaimedRow]
        if request.dryRun {
            var read: [ClaimedRow] = []
            for try await row in try await connection.query(try peek(request).query(), logger: request.logger)
                .decode(ClaimedRow.self)
            { read.append(row) }
            rows = read
        } else {
            var claimed: [ClaimedRow] = []
            var users = Set<UUID>()
            for try await row in try await connection.execute(
                Claim(request: request, lease: lease, lookAhead: lookAhead),
                logger: request.logger)
            {
                claimed.append(row)
                users.insert(row.1)
            }
            // A page short by a few users lost them to a claim running at the same moment (their
            // leases went to it): it is topped up once, so that pages stay full while the queue
            // is (a full page is a full Resend batch request of emails).
            if !users.isEmpty, users.count < request.limit, users.count >= request.limit * 9 / 10 {
                var more = request
                more.limit = request.limit - users.count
                // Best effort: the page stands without it (a retry of the whole page would not see
                // the users the first claim already holds).
                do {
                    var extra: [ClaimedRow] = []
                    for try await row in try await connection.execute(
                        Claim(request: more, lease: lease, lookAhead: lookAhead),
                        logger: request.logger)
                    { extra.append(row) }
                    claimed += extra
                } catch {
                    request.logger.notice("could not top up a short page; it goes as it is", metadata: [LogKey.reason: "\(describe(error))"])
                }
            }
            rows = claimed
        }
        var byUser: [(UUID, UserRow, [QueuedNotification])] = []
        for (
            id, userID, type, channel, localDay, deliverAfter, dueAt, title, body, payload,
            attempts, deliveredTo, deliveryID, sentAt, requestLeftAt, requestKey, requestTo, requestExpiresAt, requestShownBy, timezone, locale,
            createdAt
        ) in rows {
            // The table's check allows no other (migration 0005).
            guard let channel = DeliveryChannel(rawValue: channel) else {
                throw NudgeError(.database, "notification_outbox row \(id) has the channel '\(channel)', which dispatch does not know")
            }
            let row = QueuedNotification(
                id: id, type: type, channel: channel, localDay: localDay, deliverAfter: deliverAfter,
                dueAt: dueAt, title: title, body: body, payload: payload, attempts: attempts,
                deliveredTo: Set(deliveredTo), deliveryID: deliveryID, sentAt: sentAt,
                requestLeftAt: requestLeftAt, requestKey: requestKey, requestTo: requestTo,
                requestExpiresAt: requestExpiresAt, requestShownBy: requestShownBy)
            if byUser.last?.0 == userID {
                byUser[byUser.count - 1].2.append(row)
            } else {
                byUser.append((userID, UserRow(id: userID, timezone: timezone, locale: locale, createdAt: createdAt), [row]))
            }
        }
        return byUser.map { id, user, rows in
            do {
                let (placed, problem) = try calendars.placeForDelivery(user)
                return .item(id, UserNotifications(user: placed, rows: rows, zoneProblem: problem))
            } catch {
                return .unusable(id, "\(error)")
            }
        }
    }

    public var claimLasts: TimeInterval? { lease }

    /// Renews the page's claims (the users' leases and their rows') for `duration` from now, when
    /// what is `left` of them is less than that (reading the facts, or the
    /// sends, took long); the users still held: not one whose lease ran out and another
    /// dispatcher took.
    public func keep(
        page ids: [UUID], for duration: TimeInterval, left: Duration, run: RunContext,
        on connection: PostgresConnection
    ) async throws -> Set<UUID> {
        guard !ids.isEmpty, left.seconds < duration else { return Set(ids) }
        let answer = try await connection.query(
            """
            with kept as (
                update dispatch_leases set leased_until = greatest(leased_until, now() + make_interval(secs => \(duration)))
                 where user_id = any(\(ids)) and run_id = \(run.claim)
                returning user_id
            ), rows as (
                update notification_outbox o set lease_until = greatest(o.lease_until, now() + make_interval(secs => \(duration)))
                  from kept where o.user_id = kept.user_id and \(unescaped: Self.open) and o.status = 'sending'
                              and o.claimed_by = \(run.claim)
            )
            select user_id from kept
            """, logger: run.logger)
        var held = Set<UUID>()
        for try await id in answer.decode(UUID.self) { held.insert(id) }
        return held
    }

    /// Rows whose user no dispatcher holds now.
    private func unleased(_ request: PageRequest) -> SQLFragment {
        "not exists (select 1 from dispatch_leases l where l.user_id = o.user_id and l.leased_until > now())"
    }

    /// A dry run's page: the next users with due rows, in id order, claimed by nobody.
    private func peek(_ request: PageRequest) -> SQLFragment {
        return """
            select o.id, o.user_id, o.notification_type, o.channel, o.local_day, o.deliver_after,
                   coalesce(o.next_attempt_at, o.deliver_after) as due_at, coalesce(o.title, ''), coalesce(o.body, ''),
                   o.payload::text, o.attempts + 1, o.delivered_to, o.delivery_id, o.sent_at, o.request_left_at,
                   o.request_key, o.request_to, o.request_expires_at, o.request_shown_by, u.timezone, u.locale, u.created_at
              from (select distinct o.user_id from notification_outbox o
                     where \(unescaped: Self.open) and o.status = 'pending'
                       and coalesce(o.next_attempt_at, o.deliver_after) <= \(request.now)
                       and o.user_id > \(request.keysetStart) and \(request.notPaused) and \(request.inShard("o.user_id"))
                       and \(request.forUsers("o.user_id")) and \(unleased(request))
                     order by o.user_id limit \(request.limit)) p
              join notification_outbox o on o.user_id = p.user_id and \(unescaped: Self.open) and o.status = 'pending'
                   and coalesce(o.next_attempt_at, o.deliver_after) <= \(request.now.addingTimeInterval(lookAhead))
              join users u on u.id = p.user_id
             order by o.user_id, due_at, o.id
            """
    }

    public func count(_ request: PageRequest, on connection: PostgresConnection) async throws -> Int? { nil }

    public func nextDue(after instant: Date, request: PageRequest, on connection: PostgresConnection) async throws -> Date? {
        let filters: SQLFragment = "\(request.inShard("o.user_id")) and \(request.forUsers("o.user_id"))"
        // The first pending row no one holds, and the first claim to lapse.
        let query: SQLFragment = """
            select least(
                (select coalesce(o.next_attempt_at, o.deliver_after) from notification_outbox o
                  where \(unescaped: Self.open) and o.status = 'pending' and \(filters) and \(unleased(request))
                  order by coalesce(o.next_attempt_at, o.deliver_after), o.id limit 1),
                (select min(o.lease_until) - (now() - \(request.now)) from notification_outbox o
                  where \(unescaped: Self.open) and coalesce(o.next_attempt_at, o.deliver_after) <= \(request.now)
                    and o.status = 'sending' and \(filters)))
            """
        for try await next in try await connection.query(try query.query(), logger: request.logger).decode(Date?.self) {
            return next
        }
        return nil
    }

    /// The rows with something still to do: `idx_outbox_due`'s condition, which a query must
    /// repeat to use it.
    static let open = "(o.next_attempt_at is null or o.next_attempt_at < 'infinity')"

    /// Releases the page's leases; puts the rows the job left alone back as they were (the claim's
    /// attempt undone), and those of the users that failed back for a later attempt (after
    /// `retryDelay`, never before they are due; for good after the last attempt, logged), with
    /// the reason. Only this page's claims: a claim that ran out and was taken over is the
    /// other dispatcher's.
    public func release(page ids: [UUID], changed: Set<UUID>, failed: [(UUID, String)], run: RunContext) -> BatchWrites {
        var writes = BatchWrites()
        writes.step(
            "released_leases",
            """
            update dispatch_leases set leased_until = '-infinity'
             where user_id = any(\(ids)) and run_id = \(run.claim)
            """)
        let failedIDs = Set(failed.map(\.0))
        let untouched = ids.filter { !changed.contains($0) && !failedIDs.contains($0) }
        if !untouched.isEmpty {
            writes.step(
                "released_rows",
                """
                update notification_outbox
                   set status = 'pending', lease_until = null, claimed_by = null, attempts = greatest(0, attempts - 1)
                 where user_id = any(\(untouched)) and status = 'sending' and claimed_by = \(run.claim)
                   and (next_attempt_at is null or next_attempt_at < 'infinity')
                """)
        }
        let failures = failed.filter { !changed.contains($0.0) }
        if !failures.isEmpty {
            let backoff = DispatchRules.retryCeiling(afterAttemptsIn: "o.attempts")
            // Only a row that was due spent an attempt (one claimed ahead of its time did not).
            let lastAttempt: SQLFragment = """
                (o.attempts >= \(DispatchRules.maxAttempts) and coalesce(o.next_attempt_at, o.deliver_after) <= \(run.now))
                """
            writes.step(
                "failed_rows",
                """
                update notification_outbox o
                   set status = case when \(lastAttempt) then 'failed' else 'pending' end,
                       next_attempt_at = case when \(lastAttempt) then 'infinity'
                                              else greatest(coalesce(o.next_attempt_at, o.deliver_after), \(run.now) + \(backoff)) end,
                       attempts = o.attempts - case when coalesce(o.next_attempt_at, o.deliver_after) > \(run.now) then 1 else 0 end,
                       last_error = f.reason, lease_until = null, claimed_by = null
                  from unnest(\(failures.map(\.0)), \(failures.map(\.1))) as f(user_id, reason)
                 where o.user_id = f.user_id and o.status = 'sending' and o.claimed_by = \(run.claim)
                   and \(unescaped: Self.open)
                returning o.id, o.user_id, o.notification_type, o.channel, o.status, o.title, o.body, o.payload, o.last_error,
                          o.attempts
                """)
            writes.step(
                "failed_rows_logs",
                """
                insert into notification_logs (user_id, type, notification_type, channel, status, title, body, payload,
                                               error_msg, outbox_id, attempt, run_id)
                select user_id, notification_type, notification_type, channel, 'failed', title,
                       -- An email's log names it; its parts and the user's unsubscribe link stay in the outbox.
                       case when channel = 'email' then null else body end,
                       case when channel = 'email' then jsonb_build_object('email_type', payload->>'email_type') else payload end,
                       last_error, id,
                       attempts, \(run.runID)
                  from failed_rows where status = 'failed'
                """)
        }
        return writes
    }
}

/// The claim, prepared once per connection: a dispatcher sends it hundreds of times a minute, and
/// planning it each time would cost more than running it. Every filter is a parameter (the
/// shard, the `--user` ids, the job's pause), so that its text never changes.
private struct Claim: PostgresPreparedStatement {
    typealias Row = OutboxQueue.ClaimedRow

    let request: PageRequest
    let lease: TimeInterval
    let lookAhead: TimeInterval

    static let name = "nudge_outbox_claim_v7"

    static let sql = """
        with due as (
            select o.id, o.user_id, coalesce(o.next_attempt_at, o.deliver_after) as due_at
              from notification_outbox o
             where (o.next_attempt_at is null or o.next_attempt_at < 'infinity')
               and coalesce(o.next_attempt_at, o.deliver_after) <= $1
               and (o.status = 'pending' or (o.status = 'sending' and o.lease_until <= now()))
               and not exists (select 1 from job_pauses where job in ($10, '*'))
               and o.user_id >= $7 and ($8::uuid is null or o.user_id < $8)
               and (cardinality($9::uuid[]) = 0 or o.user_id = any($9::uuid[]))
               and not exists (select 1 from dispatch_leases l where l.user_id = o.user_id and l.leased_until > now())
             order by coalesce(o.next_attempt_at, o.deliver_after), o.id
             limit $6
               for update of o skip locked
        ), picked as (
            select user_id from (select user_id, min(due_at) as first_due from due
                                  group by user_id order by first_due, user_id limit $5) p
             order by user_id
        ), leased as (
            insert into dispatch_leases (user_id, run_id, leased_until)
            select user_id, $4, now() + make_interval(secs => $2) from picked order by user_id
            on conflict (user_id) do update set run_id = excluded.run_id, leased_until = excluded.leased_until
             where dispatch_leases.leased_until <= now()
            returning user_id
        ), claimable as (
            select o.id from notification_outbox o join leased l on l.user_id = o.user_id
             where (o.next_attempt_at is null or o.next_attempt_at < 'infinity')
               and ((o.status = 'pending' and coalesce(o.next_attempt_at, o.deliver_after) <= $3)
                    or (o.status = 'sending' and o.lease_until <= now()))
               for update of o skip locked
        ), claimed as (
            update notification_outbox o
               set status = 'sending', lease_until = now() + make_interval(secs => $2), claimed_by = $4,
                   attempts = o.attempts + 1
              from claimable c
             where o.id = c.id
            returning o.id, o.user_id, o.notification_type, o.channel, o.local_day, o.deliver_after,
                      coalesce(o.next_attempt_at, o.deliver_after) as due_at, coalesce(o.title, '') as title,
                      coalesce(o.body, '') as body, o.payload::text as payload, o.attempts, o.delivered_to,
                      o.delivery_id, o.sent_at, o.request_left_at, o.request_key, o.request_to, o.request_expires_at,
                      o.request_shown_by
        )
        select c.*, u.timezone, u.locale, u.created_at
          from claimed c join users u on u.id = c.user_id
         order by c.user_id, c.due_at, c.id
        """

    static var bindingDataTypes: [PostgresDataType] {
        [.timestamptz, .float8, .timestamptz, .int8, .int8, .int8, .uuid, .uuid, .uuidArray, .text]
    }

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 10)
        bindings.append(request.now)
        bindings.append(lease)
        bindings.append(request.now.addingTimeInterval(lookAhead))
        bindings.append(request.claim)
        bindings.append(Int64(request.limit))
        // How many due rows it looks at (and locks) to find its users: two per user of the page,
        // since locking a row writes it. A digest is a push and an email due at once: its users
        // fill a page (a full Resend batch request); a user with more due rows makes it smaller.
        bindings.append(Int64(request.limit * 2))
        bindings.append(request.shard.lowerBound)
        bindings.append(request.shard.upperBound)
        bindings.append(request.users)
        bindings.append(request.job)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        try row.decode(Row.self)
    }
}
