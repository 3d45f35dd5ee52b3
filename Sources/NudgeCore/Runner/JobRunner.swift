import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle

/// Runs one job over the users in scope: keyset pages of `batchSize` users, one set-based read, a
/// pure decision per user, one transaction of set-based writes per batch with the checkpoint,
/// and, only when that write fails, a retry user by user so that only the guilty user fails.
public struct JobRunner<J: Job>: Sendable {
    public let job: J
    public let options: RunOptions
    public let database: Database
    public let observer: any RunObserver

    /// How many failures the summary carries; the ledger keeps them all.
    static var failuresInSummary: Int { 20 }

    public init(job: J, options: RunOptions, database: Database, observer: any RunObserver) {
        self.job = job
        self.options = options
        self.database = database
        self.observer = observer
    }

    private var name: String { job.definition.name }

    /// The keyset starts below every id.
    private static var beforeEveryID: UUID { UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)) }

    public func run() async throws -> RunSummary {
        let started = ContinuousClock.now
        var logger = database.logger
        logger[metadataKey: LogKey.job] = "\(name)"
        if options.shard.count > 1 { logger[metadataKey: LogKey.shard] = "\(options.shard)" }
        let ledger = RunLedger(logger: logger)

        return try await database.client.withConnection { connection in
            if let pause = try await pauseReason(on: connection, logger: logger) {
                logger.notice("job is paused; not running", metadata: [LogKey.reason: "\(pause)"])
                return .disabled(job: name, reason: pause)
            }
            try await checkUsersExist(on: connection, logger: logger)
            try await acquireLock(on: connection, logger: logger)
            do {
                let summary = try await runLocked(ledger: ledger, started: started, logger: logger, on: connection)
                try await releaseLock(on: connection, logger: logger)
                return summary
            } catch {
                try? await releaseLock(on: connection, logger: logger)
                throw error
            }
        }
    }

    private func runLocked(ledger: RunLedger, started: ContinuousClock.Instant, logger: Logger,
                           on connection: PostgresConnection) async throws -> RunSummary {
        let scopeKey = options.scopeKey(job: name)
        let resume = try await ledger.recoverPrevious(job: name, shard: options.shard, scopeKey: scopeKey,
                                                      dryRun: options.dryRun, on: connection)
        let runID = try await ledger.begin(job: name, options: options, scopeKey: scopeKey,
                                           resumedFrom: resume?.runID, on: connection)
        var logger = logger
        logger[metadataKey: LogKey.runID] = "\(runID)"
        let context = RunContext(definition: job.definition, runID: runID, now: options.now, window: options.window,
                                 dryRun: options.dryRun, logger: logger, concurrency: options.concurrency)
        logger.info("run started", metadata: [
            LogKey.now: "\(Self.timestamp(options.now))",
            LogKey.dryRun: "\(options.dryRun)",
            LogKey.resumedFrom: "\(resume.map { String($0.runID) } ?? "-")",
        ])
        let usersInScope = observer is SilentObserver ? nil : try await countUsersInScope(on: connection, logger: logger)
        observer.runStarted(runID: runID, job: name, usersInScope: usersInScope, resumedFrom: resume?.runID)

        var state = BatchLoopState(after: resume?.checkpoint)
        var status = RunStatus.succeeded
        var errorMessage: String?
        do {
            batches: while true {
                if Task.isShuttingDownGracefully || Task.isCancelled {
                    status = .interrupted
                    errorMessage = "stopped by a signal; the next run with the same scope resumes after the checkpoint"
                    logger.notice("stopping on a signal after the last batch")
                    break batches
                }
                let page: [UserRow]
                switch try await nextPage(after: state.after, on: connection, logger: logger) {
                case .paused(let pause):
                    status = .paused
                    errorMessage = "paused: \(pause)"
                    logger.notice("job paused; stopping between batches", metadata: [LogKey.reason: "\(pause)"])
                    break batches
                case .users(let users):
                    page = users
                }
                guard let last = page.last else { break batches }
                state.batch += 1
                var batchLogger = logger
                batchLogger[metadataKey: LogKey.batch] = "\(state.batch)"
                try await runBatch(page, state: &state, context: context, ledger: ledger, logger: batchLogger, on: connection)
                observer.batchFinished(counts: state.counts)
                if let stop = state.stop {
                    status = .stopped
                    errorMessage = "\(stop); the users it did not reach are left to a later run"
                    logger.notice("job stopped itself after the batch", metadata: [LogKey.reason: "\(stop)"])
                    break batches
                }
                state.after = last.id
            }
            if status == .succeeded && state.counts.failed > 0 { status = .partial }
        } catch {
            status = .aborted
            errorMessage = describe(error)
            logger.error("run aborted", metadata: [LogKey.reason: "\(errorMessage!)"])
        }
        do {
            try await ledger.finish(runID: runID, status: status, counts: state.counts, tally: state.tally,
                                    error: errorMessage, on: connection)
        } catch {
            logger.error("could not record the end of the run", metadata: [LogKey.reason: "\(describe(error))"])
            if status != .aborted { throw NudgeError(.database, "lost the database while recording the run: \(describe(error))") }
        }
        if status == .aborted {
            throw NudgeError(.database, "run \(runID) of \(name) aborted: \(errorMessage ?? "unknown error"); the next run resumes after its checkpoint")
        }
        observer.runFinished(counts: state.counts)
        let seconds = started.duration(to: .now).seconds
        logger.info("run finished", metadata: [
            LogKey.status: "\(status.rawValue)", "nudge.processed": "\(state.counts.processed)",
            "nudge.succeeded": "\(state.counts.succeeded)", "nudge.skipped": "\(state.counts.skipped)",
            "nudge.failed": "\(state.counts.failed)", "nudge.seconds": "\(seconds)",
        ])
        return RunSummary(runID: runID, job: name, status: status.rawValue, dryRun: options.dryRun, counts: state.counts,
                          tally: state.tally, resumedFrom: resume?.runID, seconds: seconds,
                          failures: state.failureSample, message: errorMessage, exitCode: status.exitCode)
    }

    // MARK: One batch

    private func runBatch(_ page: [UserRow], state: inout BatchLoopState, context: RunContext, ledger: RunLedger,
                          logger: Logger, on connection: PostgresConnection) async throws {
        var failures: [(UUID, String)] = []
        var placed: [UserInTime] = []
        for user in page {
            do {
                placed.append(UserInTime(user: user, calendar: try state.calendars.calendar(for: user.timezone)))
            } catch {
                failures.append((user.id, error.description))
            }
        }
        let facts = try await job.loadFacts(for: placed, run: context, on: connection)
        var planned: [PlannedChange<J.Change>] = []
        var nothingDue = 0
        for user in placed {
            do {
                switch try job.decide(for: user, facts: facts[user.user.id], run: context) {
                case .nothingDue(let why):
                    nothingDue += 1
                    report(user.user.id, .nothingDue, detail: why)
                case .act(let change):
                    planned.append(change)
                }
            } catch {
                failures.append((user.user.id, describe(error)))
            }
        }

        // Users the outside step skipped with a reason (a rejected reply, a spent budget): counted
        // as skipped, their reasons recorded with the failures'.
        var skipped: [(UUID, String)] = []
        var stoppedIDs: Set<UUID> = []
        if job.completesOutside && !planned.isEmpty {
            if let previous = state.outsideCallsEnded {
                try await Task.sleep(until: previous + job.pauseBetweenBatches)
            }
            (planned, skipped, stoppedIDs) = await completeOutside(planned, failures: &failures, state: &state, context: context)
            state.outsideCallsEnded = .now
        }
        // The checkpoint stops short of the first user a RunStop left undone.
        let checkpoint: UUID?
        if let firstUndone = page.firstIndex(where: { stoppedIDs.contains($0.id) }) {
            checkpoint = firstUndone > 0 ? page[firstUndone - 1].id : state.after
        } else {
            checkpoint = page.last!.id
        }

        // One statement: the job's writes, the work marks, the outbox and the checkpoint.
        var committed = planned
        do {
            var writes = self.writes(for: planned, context: context)
            if !context.dryRun {
                writes.append(batchRecord(ledger, checkpoint: checkpoint, page: page, committed: planned.count,
                                          nothingDue: nothingDue, skipped: skipped, failures: failures, state: state, context: context))
            }
            try await send(writes, context: context, on: connection)
        } catch where Self.isStatementError(error) {
            logger.warning("batch write failed; retrying user by user", metadata: [LogKey.reason: "\(describe(error))"])
            committed = []
            for change in planned {
                do {
                    try await send(writes(for: [change], context: context), context: context, on: connection)
                    committed.append(change)
                } catch where Self.isStatementError(error) {
                    failures.append((change.userID, describe(error)))
                }
            }
            if !context.dryRun {
                try await send(batchRecord(ledger, checkpoint: checkpoint, page: page, committed: committed.count,
                                           nothingDue: nothingDue, skipped: skipped, failures: failures, state: state, context: context),
                               context: context, on: connection)
            }
        }
        if context.dryRun {
            // The dry run's own ledger row is kept: outside the rolled-back statement.
            try await execute(batchRecord(ledger, checkpoint: checkpoint, page: page, committed: committed.count,
                                          nothingDue: nothingDue, skipped: skipped, failures: failures, state: state, context: context),
                              on: connection, logger: logger)
        }
        do {
            state.tally.merge(try await job.afterBatch(run: context, on: connection), uniquingKeysWith: +)
        } catch {
            logger.warning("the batch's bookkeeping failed; its writes stand", metadata: [LogKey.reason: "\(describe(error))"])
        }
        for (userID, reason) in skipped {
            var userLogger = logger
            userLogger[metadataKey: LogKey.userID] = "\(userID.uuidString.lowercased())"
            userLogger.notice("user skipped", metadata: [LogKey.reason: "\(reason)"])
            report(userID, .nothingDue, detail: reason)
        }

        state.counts.processed += page.count
        state.counts.succeeded += committed.count
        state.counts.skipped += nothingDue + skipped.count
        state.counts.failed += failures.count
        for change in committed {
            state.tally.merge(change.tally, uniquingKeysWith: +)
            for message in change.notifications { state.tally["notification:\(message.type)", default: 0] += 1 }
            if observer.wantsUserReports {
                report(change.userID, .changed, detail: "", work: change.work.map { "\($0.localDay) \($0.outcome)" + ($0.detail.map { ": \($0)" } ?? "") },
                       notifications: change.notifications.map { "\($0.type) after \(Self.timestamp($0.deliverAfter))" })
            }
        }
        for (userID, reason) in failures {
            var userLogger = logger
            userLogger[metadataKey: LogKey.userID] = "\(userID.uuidString.lowercased())"
            userLogger.warning("user failed", metadata: [LogKey.reason: "\(reason)"])
            report(userID, .failed, detail: reason)
            if state.failureSample.count < Self.failuresInSummary {
                state.failureSample.append(.init(userID: userID, reason: reason))
            }
        }
    }

    private func batchRecord(_ ledger: RunLedger, checkpoint: UUID?, page: [UserRow], committed: Int, nothingDue: Int,
                             skipped: [(UUID, String)], failures: [(UUID, String)], state: BatchLoopState,
                             context: RunContext) -> BatchWrites {
        var counts = state.counts
        counts.processed += page.count
        counts.succeeded += committed
        counts.skipped += nothingDue + skipped.count
        counts.failed += failures.count
        return ledger.batchRecord(runID: context.runID, checkpoint: checkpoint, counts: counts, failures: failures + skipped)
    }

    /// Runs the job's outside step for the batch's changes, up to `--concurrency` at once, in the
    /// changes' order. Returns the completed changes, the users skipped with their reasons, and
    /// those a `RunStop` left undone (skipped too).
    private func completeOutside(_ planned: [PlannedChange<J.Change>], failures: inout [(UUID, String)],
                                 state: inout BatchLoopState, context: RunContext) async
        -> ([PlannedChange<J.Change>], [(UUID, String)], Set<UUID>) {
        var outcomes = [OutsideOutcome<J.Change>?](repeating: nil, count: planned.count)
        await withTaskGroup(of: (Int, OutsideOutcome<J.Change>).self) { group in
            var next = 0
            func startNext() {
                guard next < planned.count else { return }
                let index = next, change = planned[index]
                next += 1
                group.addTask {
                    do {
                        return (index, .done(try await job.complete(change, run: context)))
                    } catch let stop as RunStop {
                        return (index, .stopped(stop))
                    } catch let skip as UserSkip {
                        return (index, .skipped(skip.reason))
                    } catch {
                        return (index, .failed(describe(error)))
                    }
                }
            }
            for _ in 0..<max(1, context.concurrency) { startNext() }
            for await (index, outcome) in group {
                outcomes[index] = outcome
                startNext()
            }
        }
        var completed: [PlannedChange<J.Change>] = []
        var skipped: [(UUID, String)] = []
        var stopped: Set<UUID> = []
        for (change, outcome) in zip(planned, outcomes) {
            switch outcome! {
            case .done(let change): completed.append(change)
            case .failed(let reason): failures.append((change.userID, reason))
            case .skipped(let reason): skipped.append((change.userID, reason))
            case .stopped(let stop):
                skipped.append((change.userID, "not done: \(stop)"))
                stopped.insert(change.userID)
                state.stop = state.stop ?? stop
            }
        }
        return (completed, skipped, stopped)
    }

    /// The job's own writes, then the work marks and the outbox, which the runner owns.
    private func writes(for changes: [PlannedChange<J.Change>], context: RunContext) -> BatchWrites {
        guard !changes.isEmpty else { return BatchWrites() }
        var writes = job.writes(for: changes, run: context)

        let marks = changes.flatMap { change in change.work.map { (change.userID, $0) } }
        if !marks.isEmpty {
            writes.step("nudge_work", """
                insert into job_work (job, user_id, local_day, outcome, detail, run_id)
                select \(name), user_id, local_day, outcome, nullif(detail, ''), \(context.runID)
                  from unnest(\(marks.map(\.0)), \(marks.map(\.1.localDay)), \(marks.map(\.1.outcome)),
                              \(marks.map { $0.1.detail ?? "" }))
                       as w(user_id, local_day, outcome, detail)
                on conflict (job, user_id, local_day) do nothing
                """)
        }
        let messages = changes.flatMap { change in change.notifications.map { (change.userID, $0) } }
        if !messages.isEmpty {
            writes.step("nudge_outbox", """
                insert into notification_outbox
                       (dedupe_key, job, user_id, local_day, notification_type, deliver_after, title, body, payload, run_id)
                select dedupe_key, \(name), user_id, local_day, notification_type, deliver_after, title, body,
                       payload::jsonb, \(context.runID)
                  from unnest(\(messages.map { $0.1.dedupeKey(job: name, userID: $0.0) }), \(messages.map(\.0)),
                              \(messages.map(\.1.localDay)), \(messages.map(\.1.type)), \(messages.map(\.1.deliverAfter)),
                              \(messages.map(\.1.title)), \(messages.map(\.1.body)), \(messages.map(\.1.payload)))
                       as m(dedupe_key, user_id, local_day, notification_type, deliver_after, title, body, payload)
                on conflict (dedupe_key) do nothing
                """)
        }
        return writes
    }

    /// Sends a batch's writes as one statement, its own transaction; a dry run's is rolled back.
    private func send(_ writes: BatchWrites, context: RunContext, on connection: PostgresConnection) async throws {
        guard !writes.isEmpty else { return }
        guard context.dryRun else {
            try await execute(writes, on: connection, logger: context.logger)
            return
        }
        try await connection.query("begin", logger: context.logger)
        do {
            try await execute(writes, on: connection, logger: context.logger)
        } catch {
            _ = try? await connection.query("rollback", logger: context.logger)
            throw error
        }
        try await connection.query("rollback", logger: context.logger)
    }

    /// Runs the writes as one statement, reading its one row to the end: that is what runs it to completion.
    private func execute(_ writes: BatchWrites, on connection: PostgresConnection, logger: Logger) async throws {
        for try await _ in try await connection.query(writes.statement.query(), logger: logger) {}
    }

    private func report(_ userID: UUID, _ outcome: UserReport.Outcome, detail: String, work: [String] = [],
                        notifications: [String] = []) {
        guard observer.wantsUserReports else { return }
        observer.userDecided(UserReport(userID: userID, outcome: outcome, detail: detail, work: work,
                                        notifications: notifications))
    }

    // MARK: Paging, locks, kill switch

    private enum Page {
        case users([UserRow])
        case paused(String)
    }

    /// The next keyset page of users, unless the job has been paused: the kill switch costs no
    /// round trip of its own.
    private func nextPage(after: UUID?, on connection: PostgresConnection, logger: Logger) async throws -> Page {
        let rows = try await connection.query("""
            select p.job, p.paused_by, p.paused_at, p.reason, u.id, u.timezone, u.locale, u.created_at
              from (values (1)) as one(x)
              left join lateral (select job, paused_by, paused_at, reason from job_pauses
                                  where job in (\(name), '*') order by job = '*' desc limit 1) p on true
              left join lateral (
                select id, timezone, locale, created_at from users
                 where p.job is null
                   and id > \(after ?? Self.beforeEveryID)
                   and (\(options.shard.count) = 1
                        or ('x' || left(id::text, 8))::bit(32)::bigint % \(options.shard.count) = \(options.shard.index))
                   and (cardinality(\(options.users)::uuid[]) = 0 or id = any(\(options.users)::uuid[]))
                 order by id
                 limit \(options.batchSize)) u on true
            """, logger: logger)
        var page: [UserRow] = []
        page.reserveCapacity(options.batchSize)
        for try await (job, pausedBy, pausedAt, reason, id, timezone, locale, createdAt)
            in rows.decode((String?, String?, Date?, String?, UUID?, String?, String?, Date?).self) {
            if let job, let pausedBy, let pausedAt {
                return .paused(Self.pauseMessage(job: job, pausedBy: pausedBy, pausedAt: pausedAt, reason: reason))
            }
            if let id, let locale, let createdAt {
                page.append(UserRow(id: id, timezone: timezone, locale: locale, createdAt: createdAt))
            }
        }
        return .users(page)
    }

    private func countUsersInScope(on connection: PostgresConnection, logger: Logger) async throws -> Int {
        let rows = try await connection.query("""
            select count(*) from users
             where (\(options.shard.count) = 1
                    or ('x' || left(id::text, 8))::bit(32)::bigint % \(options.shard.count) = \(options.shard.index))
               and (cardinality(\(options.users)::uuid[]) = 0 or id = any(\(options.users)::uuid[]))
            """, logger: logger)
        for try await count in rows.decode(Int.self) { return count }
        return 0
    }

    private func checkUsersExist(on connection: PostgresConnection, logger: Logger) async throws {
        guard !options.users.isEmpty else { return }
        let rows = try await connection.query("""
            select u from unnest(\(options.users)::uuid[]) as u
             where not exists (select 1 from users where id = u)
            """, logger: logger)
        var missing: [String] = []
        for try await id in rows.decode(UUID.self) { missing.append(id.uuidString.lowercased()) }
        if !missing.isEmpty {
            throw NudgeError(.usage, "no user with id \(missing.joined(separator: ", "))")
        }
    }

    private func pauseReason(on connection: PostgresConnection, logger: Logger) async throws -> String? {
        let rows = try await connection.query("""
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

    /// A session-level advisory lock per job and shard: it dies with the process, so a crashed run
    /// never blocks the next one. Dry runs take it too, so that they never interleave with a real run.
    private var lockKey: Int64 { Self.lockKey(job: name, shard: options.shard) }

    static func lockKey(job: String, shard: Shard) -> Int64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325   // FNV-1a
        for byte in "nudge:job:\(job):\(shard)".utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01B3
        }
        return Int64(bitPattern: hash)
    }

    private func acquireLock(on connection: PostgresConnection, logger: Logger) async throws {
        let rows = try await connection.query("select pg_try_advisory_lock(\(lockKey))", logger: logger)
        for try await acquired in rows.decode(Bool.self) where acquired { return }
        var holder = ""
        let running = try await connection.query("""
            select id, host, pid, started_at from job_runs
             where job = \(name) and shard_index = \(options.shard.index) and shard_count = \(options.shard.count)
               and status = 'running' order by id desc limit 1
            """, logger: logger)
        for try await (id, host, pid, startedAt) in running.decode((Int64, String, Int, Date).self) {
            holder = ": run \(id) on \(host), pid \(pid), since \(Self.timestamp(startedAt))"
        }
        throw NudgeError(.locked, "another run of \(name) (shard \(options.shard)) holds the lock\(holder)")
    }

    private func releaseLock(on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query("select pg_advisory_unlock(\(lockKey))", logger: logger)
    }

    // MARK: Errors

    /// The server rejected a statement (a constraint, a bad value): isolable to the users it
    /// touched. Anything else (a lost connection) ends the run.
    static func isStatementError(_ error: any Error) -> Bool {
        if let error = error as? PSQLError { return error.code == .server }
        return error is NudgeError
    }

}

extension JobRunner {
    static func timestamp(_ instant: Date) -> String {
        instant.formatted(.iso8601)
    }
}

/// How one user's outside step ended.
private enum OutsideOutcome<Change: Sendable>: Sendable {
    case done(PlannedChange<Change>)
    case failed(String)
    case skipped(String)
    case stopped(RunStop)
}

struct BatchLoopState {
    var after: UUID?
    var batch = 0
    var counts = RunCounts()
    var tally: [String: Int] = [:]
    var failureSample: [RunSummary.Failure] = []
    var calendars = CalendarCache()
    /// When the last batch's outside calls ended, for the pause before the next batch's.
    var outsideCallsEnded: ContinuousClock.Instant?
    /// Set when a job ended the run (a budget spent): the run stops after the batch in flight.
    var stop: RunStop?
}

/// An observer that shows nothing: for runs inside tests and the benchmark.
public struct SilentObserver: RunObserver {
    public init() {}
    public func runStarted(runID: Int64, job: String, usersInScope: Int?, resumedFrom: Int64?) {}
    public func batchFinished(counts: RunCounts) {}
    public var wantsUserReports: Bool { false }
    public func userDecided(_ report: UserReport) {}
    public func runFinished(counts: RunCounts) {}
}

extension Duration {
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
