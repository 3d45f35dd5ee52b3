import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle

/// The runner's pages, locks and switches: what the next page is, when the next pass may start,
/// whether the job is paused, and who holds its lock.
extension JobRunner {
    func pageRequest(
        after: UUID?, afterTime: Date? = nil, runID: Int64, pageID: Int64 = 0, now: Date,
        logger: Logger
    ) -> PageRequest {
        var request = PageRequest(
            job: name, runID: runID, pageID: pageID, now: now, after: after, afterTime: afterTime,
            limit: options.batchSize, shard: options.shard,
            users: options.users, window: options.window, dryRun: options.dryRun, logger: logger)
        request.sweep = options.sweep
        return request
    }

    /// The next page. A claim that loses a deadlock or a serialization race against another
    /// dispatcher (it claims nothing) is made again, up to three times.
    func readPage(
        _ request: PageRequest, calendars: CalendarCache, logger: Logger,
        on db: BoundedConnection
    ) async throws -> [Paged<J.Source.Item>] {
        var attempt = 0
        while true {
            attempt += 1
            do {
                // Two: a page is a prepared statement, parsed on its first use (`prepared`).
                return try await db(statements: 2) { try await source.page(request, calendars: calendars, on: db.connection) }
            } catch let error as PSQLError
                where source.isQueue && attempt < 3
                && ["40001", "40P01", "55P03"].contains(error.serverInfo?[.sqlState] ?? "")
            {
                logger.notice(
                    "claim lost a race with another run; claiming again",
                    metadata: [LogKey.reason: "\(describe(error))"])
                try await Task.sleep(for: .milliseconds(20 * attempt))
            }
        }
    }

    /// After a pass over a queue: whether to start another one, once something is due. Another
    /// pass starts at once when this one found work and the clock stands still (a run at --now
    /// takes all that is due at that instant); a draining run sleeps until the next item is due
    /// (looking again every second, for items queued meanwhile) and ends when nothing falls due
    /// before its deadline, on a signal or when the job is paused.
    func waitForNextPass(
        state: inout BatchLoopState, until deadline: Duration, runID: Int64,
        totals: RunTotals, context: RunContext, on db: BoundedConnection
    ) async throws -> Bool {
        let logger = context.logger
        defer { state.passFoundWork = false }
        if options.nowIsExplicit || options.dryRun { return state.passFoundWork && !options.dryRun }
        let clock = options.waitClock
        while clock.now() < deadline {
            if Task.isShuttingDownGracefully || Task.isCancelled { return false }
            if totals.progressDue() {
                let counts = totals.counts
                try await db { try await db.connection.query(RunLedger.heartbeat(runID: runID, counts: counts), logger: logger) }
            }
            await tend(context: context, on: db)
            let now = options.clock.now()
            let request = pageRequest(after: nil, runID: runID, now: now, logger: logger)
            let next: Date? = try await db { try await source.nextDue(after: now, request: request, on: db.connection) }
            guard let next else { return false }
            let wait = next.timeIntervalSince(options.clock.now())
            if wait <= 0 { return true }
            let left = deadline - clock.now()
            guard Duration.seconds(wait) < left else { return false }
            try? await clock.sleep(for: min(.seconds(wait), .seconds(1), left))
        }
        return false
    }

    /// The job's `tend`, at the time it is now, then its outside calls (`tendOutside`); an error
    /// is logged and the run goes on (unless the connection is gone, which the next use of it
    /// reports).
    func tend(context: RunContext, on db: BoundedConnection) async {
        await tendShared(context: context, on: db)
        await tendOutside(context: context, on: db)
    }

    /// The job's outside calls for its shared state, and, when they learnt something, its `tend`
    /// at once to write it.
    func tendOutside(context: RunContext, on db: BoundedConnection) async {
        var context = context
        context.now = max(context.now, options.clock.now())
        guard let books = capabilities.bookkeeping, await books.tendOutside(run: context) else { return }
        await tendShared(context: context, on: db)
    }

    private func tendShared(context: RunContext, on db: BoundedConnection) async {
        guard let books = capabilities.bookkeeping else { return }
        var context = context
        context.now = max(context.now, options.clock.now())
        let now = context
        do {
            try await db(statements: books.bookkeepingStatements) { try await books.tend(run: now, on: db.connection) }
        } catch {
            context.logger.warning("the job's shared state could not be kept", metadata: [LogKey.reason: "\(describe(error))"])
        }
    }

    func checkUsersExist(on connection: PostgresConnection, logger: Logger) async throws {
        guard !options.users.isEmpty else { return }
        let rows = try await connection.query(
            """
            select u from unnest(\(options.users)::uuid[]) as u
             where not exists (select 1 from users where id = u)
            """, logger: logger)
        var missing: [String] = []
        for try await id in rows.decode(UUID.self) { missing.append(id.uuidString.lowercased()) }
        if !missing.isEmpty {
            throw NudgeError(.usage, "no user with id \(missing.joined(separator: ", "))")
        }
    }

    func pauseReason(on connection: PostgresConnection, logger: Logger) async throws -> String? {
        let rows = try await connection.query(
            """
            select job, paused_by, paused_at, reason from job_pauses where job in (\(name), '*')
            """, logger: logger)
        for try await (job, pausedBy, pausedAt, reason) in rows.decode((String, String, Date, String?).self) {
            return Self.pauseMessage(job: job, pausedBy: pausedBy, pausedAt: pausedAt, reason: reason)
        }
        return nil
    }

    static func pauseMessage(job: String, pausedBy: String, pausedAt: Date, reason: String?) -> String {
        let scope = job == "*" ? "every job is paused" : "\(job) is paused"
        return "\(scope) by \(pausedBy) since \(timestamp(pausedAt))"
            + (reason.map { " (\($0))" } ?? "") + "; `nudge resume \(job == "*" ? "--all" : job)` restarts it"
    }

    /// The error that says who holds the lock, exit 75.
    func lockHeld(_ conflict: RunLocks.Conflict, on connection: PostgresConnection, logger: Logger) async throws -> NudgeError {
        var holder = ""
        let running = try await connection.query(RunLedger.runningRuns(job: name), logger: logger)
        for try await (id, index, count, host, pid, startedAt) in running.decode((Int64, Int, Int, String, Int, Date).self) {
            let sameShard = index == options.shard.index && count == options.shard.count
            guard sameShard == (conflict == .shard) else { continue }
            holder = ": run \(id)\(sameShard ? "" : " of shard \(index)/\(count)") on \(host), pid \(pid), since \(Self.timestamp(startedAt))"
            break
        }
        switch conflict {
        case .shard:
            return NudgeError(.locked, "another run of \(name) (shard \(options.shard)) holds the lock\(holder)")
        case .scope:
            return NudgeError(
                .locked,
                """
                a run of \(name) over overlapping users (another shard count) holds the lock\(holder); \
                runs of one job overlap unless they share a shard count
                """)
        }
    }
}
