import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle
import Synchronization

/// Runs one job over the items its source pages (users, a user's due notifications, circles…):
/// pages of `batchSize` items, one set-based read, a pure decision per item, one transaction of
/// set-based writes per batch with the checkpoint, and, only when that write fails, a retry item
/// by item so that only the guilty item fails. A keyset source's run holds the job's lock and
/// resumes from its checkpoint; a queue source's runs claim their pages instead, side by side,
/// and drain the queue in passes until their deadline.
public struct JobRunner<J: Job>: Sendable {
    public let job: J
    public let options: RunOptions
    public let database: Database
    public let observer: any RunObserver
    /// What the job opted in to besides its core (JobCapabilities.swift).
    let capabilities: JobCapabilities<J>

    /// How many failures the summary carries; the ledger keeps them all.
    static var failuresInSummary: Int { 20 }

    public init(job: J, options: RunOptions, database: Database, observer: any RunObserver) {
        self.job = job
        self.options = options
        self.database = database
        self.observer = observer
        capabilities = JobCapabilities(job)
    }

    var name: String { job.definition.name }

    var source: J.Source { job.source }

    public func run() async throws -> RunSummary {
        let started = ContinuousClock.now
        if let problem = source.scopeProblem(options) { throw NudgeError(.usage, "\(name): \(problem)") }
        var jobLogger = database.logger
        jobLogger[metadataKey: LogKey.job] = "\(name)"
        if options.shard.count > 1 { jobLogger[metadataKey: LogKey.shard] = "\(options.shard)" }
        let logger = jobLogger
        let ledger = RunLedger(logger: logger)
        let locks = RunLocks(job: name, shard: options.shard)

        return try await database.withConnection { connection in
            let db = BoundedConnection(connection: connection, database: database)
            let pause: String? = try await db({ try await pauseReason(on: connection, logger: logger) })
            if let pause {
                logger.notice("job is paused; not running", metadata: [LogKey.reason: "\(pause)"])
                return RunSummary.disabled(job: name, reason: pause)
            }
            try await db({ try await checkUsersExist(on: connection, logger: logger) })
            // A queue's runs share the work through their claims; a keyset run holds the lock.
            guard !source.isQueue else {
                return try await runLocked(ledger: ledger, started: started, logger: logger, on: db)
            }
            let conflict: RunLocks.Conflict? = try await db({ try await locks.acquire(on: connection, logger: logger) })
            if let conflict {
                let held: NudgeError = try await db({ try await lockHeld(conflict, on: connection, logger: logger) })
                throw held
            }
            do {
                // A job whose writes follow no outside call commits its batches without waiting
                // for the disk (`OutsideCalls`); the pooled connection gets its
                // setting back after the run.
                let asynchronous = capabilities.commitsAsynchronously && !options.dryRun
                if asynchronous { try await db({ try await connection.query("set synchronous_commit = off", logger: logger) }) }
                let summary = try await runLocked(ledger: ledger, started: started, logger: logger, on: db)
                if asynchronous { _ = try? await db({ try await connection.query("reset synchronous_commit", logger: logger) }) }
                do {
                    try await db({ try await locks.release(on: connection, logger: logger) })
                } catch {
                    // The run is recorded; the lock ends with the session anyway.
                    logger.warning("could not release the run lock", metadata: [LogKey.reason: "\(describe(error))"])
                }
                return summary
            } catch {
                if !connection.isClosed {
                    if capabilities.commitsAsynchronously && !options.dryRun {
                        _ = try? await db({ try await connection.query("reset synchronous_commit", logger: logger) })
                    }
                    try? await db({ try await locks.release(on: connection, logger: logger) })
                }
                throw error
            }
        }
    }

    private func runLocked(
        ledger: RunLedger, started: ContinuousClock.Instant, logger: Logger,
        on db: BoundedConnection
    ) async throws -> RunSummary {
        let connection = db.connection
        let scopeKey = options.scopeKey(job: name)
        let isQueue = source.isQueue
        let resume = try await db(statements: 2) {
            try await ledger.recoverPrevious(
                job: name, shard: options.shard, scopeKey: scopeKey, dryRun: options.dryRun,
                shared: isQueue, on: connection)
        }
        let runID = try await db {
            try await ledger.begin(job: name, options: options, scopeKey: scopeKey, resumedFrom: resume?.runID, on: connection)
        }
        var runLogger = logger
        runLogger[metadataKey: LogKey.runID] = "\(runID)"
        let logger = runLogger
        var context = RunContext(
            definition: job.definition, runID: runID, now: options.now, startedAt: options.now,
            clock: options.clock, window: options.window, dryRun: options.dryRun, logger: logger,
            concurrency: options.concurrency, database: database)
        context.users = options.users
        context.waitClock = options.waitClock
        logger.info(
            "run started",
            metadata: [
                LogKey.now: "\(Self.timestamp(options.now))",
                LogKey.dryRun: "\(options.dryRun)",
                LogKey.resumedFrom: "\(resume.map { String($0.runID) } ?? "-")",
            ])
        let inScope: Int? =
            observer is SilentObserver
            ? nil
            : try await db {
                try await source.count(pageRequest(after: nil, runID: runID, now: options.now, logger: logger), on: connection)
            }
        observer.runStarted(runID: runID, job: name, usersInScope: inScope, resumedFrom: resume?.runID)
        await tend(context: context, on: db)
        // A queue is drained in passes until this instant; a run at an explicit --now drains what
        // is due at that instant and ends.
        let drainUntil = options.waitClock.now() + (options.nowIsExplicit || options.dryRun ? .zero : options.drainFor)

        var state = BatchLoopState(after: resume?.checkpoint)
        var status = RunStatus.succeeded
        var errorMessage: String?
        // Set when the job went to its end but met a configuration error: the run reports as
        // usual and exits 1.
        var configurationProblem = false
        let loop = LoopSettings(runID: runID, ledger: ledger, logger: logger, drainUntil: drainUntil, totals: RunTotals())
        do {
            // A dry run claims nothing, so its pages are keyset pages: one loop.
            if isQueue && options.lanes > 1 && !options.dryRun {
                (status, errorMessage, state) = try await runLanes(context: context, loop: loop, first: db)
            } else {
                (status, errorMessage) = try await batchLoopReadingAhead(state: &state, context: context, loop: loop, on: db)
            }
            state.counts = loop.totals.counts
            if status == .succeeded && state.counts.failed > 0 { status = .partial }
            if let problem = capabilities.reports?.runProblem, [.succeeded, .partial].contains(status) {
                status = .aborted
                configurationProblem = true
                errorMessage = "bad configuration found at run time: \(problem)"
                logger.error("run ended with a configuration error", metadata: [LogKey.reason: "\(problem)"])
            }
        } catch {
            status = .aborted
            errorMessage = describe(error)
            logger.error("run aborted", metadata: [LogKey.reason: "\(errorMessage!)"])
        }
        state.counts = loop.totals.counts
        do {
            try await finish(ledger, runID: runID, status: status, state: state, error: errorMessage, on: db)
        } catch {
            logger.error("could not record the end of the run", metadata: [LogKey.reason: "\(describe(error))"])
            if status != .aborted { throw NudgeError(.database, "lost the database while recording the run: \(describe(error))") }
        }
        if status == .aborted && !configurationProblem {
            throw NudgeError(.database, "run \(runID) of \(name) aborted: \(errorMessage ?? "unknown error"); \(options.resumeHint)")
        }
        observer.runFinished(counts: state.counts)
        let seconds = started.duration(to: .now).seconds
        logger.info(
            "run finished",
            metadata: [
                LogKey.status: "\(status.rawValue)", "nudge.processed": "\(state.counts.processed)",
                "nudge.succeeded": "\(state.counts.succeeded)", "nudge.skipped": "\(state.counts.skipped)",
                "nudge.failed": "\(state.counts.failed)", "nudge.seconds": "\(seconds)",
            ])
        if options.sweep {
            // The sweep's verdict on the due index, in one line an alert can match.
            let missed = state.tally[Self.indexMissed, default: 0]
            let added = state.tally[Self.indexRowAdded, default: 0]
            let rows = added == 0 ? "" : "; \(added) users had no row in it and have one now"
            logger.log(
                level: missed == 0 && added == 0 ? .notice : .error,
                "sweep finished: \(missed == 0 ? "the due index missed nothing" : "the due index missed \(missed) users")\(rows)",
                metadata: [
                    "nudge.read": "\(state.counts.processed)", "nudge.index_missed": "\(missed)",
                    "nudge.index_row_added": "\(added)",
                ])
        }
        return RunSummary(
            runID: runID, job: name, status: status.rawValue, dryRun: options.dryRun, counts: state.counts,
            tally: state.tally, resumedFrom: resume?.runID, seconds: seconds,
            failures: state.failureSample, message: errorMessage ?? capabilities.reports?.summaryNote(tally: state.tally),
            exitCode: status.exitCode(failures: state.counts.failed), noun: source.noun,
            jobMetrics: await jobMetrics(context: context, on: db))
    }

    /// The job's own gauges for the run's textfile, read at the time it is now; none on a dry
    /// run (which writes no metrics) or when nobody writes them. An error is logged and the run's
    /// own metrics go without them.
    private func jobMetrics(context: RunContext, on db: BoundedConnection) async -> [RunMetric] {
        guard options.readsJobMetrics && !options.dryRun, let reports = capabilities.reports else { return [] }
        var context = context
        context.now = max(context.now, options.clock.now())
        let now = context
        do {
            return try await db { try await reports.runMetrics(run: now, on: db.connection) }
        } catch {
            context.logger.warning("the job's metrics could not be read", metadata: [LogKey.reason: "\(describe(error))"])
            return []
        }
    }

    /// What every batch loop of a run shares.
    private struct LoopSettings: Sendable {
        let runID: Int64
        let ledger: RunLedger
        let logger: Logger
        let drainUntil: Duration
        /// The run's counts, across lanes.
        let totals: RunTotals
    }

    /// How long a page read ahead may wait for its batch's turn.
    static var readAheadKeptFor: Duration { .seconds(2) }

    /// A page read, with its place in the run and, when it was read ahead, its facts.
    private struct ReadPage: Sendable {
        let page: [Paged<J.Source.Item>]
        let request: PageRequest
        let claimedAt: Duration
        var facts: BatchFacts?
    }

    /// What a batch read about its items: those it can work on, those that failed to read, and
    /// the job's facts about the former.
    struct BatchFacts: Sendable {
        var placed: [(id: UUID, item: J.Source.Item)]
        var failures: [(UUID, String)]
        var facts: [UUID: J.Facts]
    }

    /// The batch loop of a keyset job on two connections: while a batch decides, makes its
    /// outside calls and writes on the run's, the next page and its facts are read on a second
    /// one from the pool, so that a batch costs about its write alone. (The next page starts after
    /// this one's last item, whatever this batch writes: its items are other users, whose facts
    /// no batch of this run writes.) A page read more than `readAheadKeptFor` before its turn is
    /// read again. Only for a source that allows it (`WorkSource.readsAhead`); any other: the
    /// plain loop. The second connection is taken once the first page has items: a run with
    /// nothing to do (most cron runs) uses one.
    private func batchLoopReadingAhead(
        state: inout BatchLoopState, context: RunContext, loop: LoopSettings,
        on db: BoundedConnection
    ) async throws -> (RunStatus, String?) {
        guard source.readsAhead else {
            return try await batchLoop(state: &state, context: context, loop: loop, on: db, second: nil)
        }
        var starting = context
        starting.now = max(context.now, options.clock.now())
        let firstContext = starting
        let request = pageRequest(
            after: state.after, afterTime: state.afterTime, runID: loop.runID, pageID: loop.totals.nextPage(),
            now: firstContext.now, logger: loop.logger)
        let claimedAt = options.waitClock.now()
        let first = ReadPage(
            page: try await readPage(request, calendars: state.calendars, logger: loop.logger, on: db),
            request: request, claimedAt: claimedAt)
        guard !first.page.isEmpty else {
            return try await batchLoop(state: &state, context: firstContext, loop: loop, on: db, second: nil, first: first)
        }
        let start = state
        // The loop's state comes back whether it ended or threw: an aborted run's ledger still
        // gets its tally and failures.
        let (end, after) = try await database.withConnection { connection in
            var local = start
            do {
                let end = try await batchLoop(
                    state: &local, context: firstContext, loop: loop, on: db,
                    second: BoundedConnection(connection: connection, database: database), first: first)
                return (Result<(RunStatus, String?), any Error>.success(end), local)
            } catch {
                return (.failure(error), local)
            }
        }
        state = after
        return try end.get()
    }

    /// Reads a page and, when it has items, their facts: what the loop reads ahead.
    private func readAhead(
        _ request: PageRequest, calendars: CalendarCache, context: RunContext,
        on db: BoundedConnection
    ) async throws -> ReadPage {
        let claimedAt = options.waitClock.now()
        let page = try await readPage(request, calendars: calendars, logger: context.logger, on: db)
        var read = ReadPage(page: page, request: request, claimedAt: claimedAt)
        if !page.isEmpty { read.facts = try await readBatch(page, context: context, on: db) }
        return read
    }

    /// Pages and batches until the items (or the queue's passes) end, the job is paused, a
    /// signal comes or the job stops itself: how the loop ended, and why. With a `second`
    /// connection, each batch's next page and facts are read on it while the batch writes. The
    /// `first` page, when the caller read it, is the loop's first.
    private func batchLoop(
        state: inout BatchLoopState, context initial: RunContext, loop: LoopSettings,
        on db: BoundedConnection, second: BoundedConnection? = nil,
        first: ReadPage? = nil
    ) async throws -> (RunStatus, String?) {
        var ahead: Task<ReadPage, any Error>?
        do {
            let end = try await batchLoop(
                state: &state, context: initial, loop: loop, on: db, second: second, first: first,
                ahead: &ahead)
            // A page read ahead of a loop that ended (a pause, a stop, a signal) is dropped unused.
            _ = try? await ahead?.value
            return end
        } catch {
            _ = try? await ahead?.value
            throw error
        }
    }

    private func batchLoop(
        state: inout BatchLoopState, context initial: RunContext, loop: LoopSettings,
        on db: BoundedConnection, second: BoundedConnection?, first: ReadPage?,
        ahead: inout Task<ReadPage, any Error>?
    ) async throws -> (RunStatus, String?) {
        let connection = db.connection
        let logger = loop.logger
        var context = initial
        var first = first
        while true {
            if Task.isShuttingDownGracefully || Task.isCancelled {
                logger.notice("stopping on a signal after the last batch")
                return (.interrupted, "stopped by a signal; \(options.resumeHint)")
            }
            var readEarlier: ReadPage?
            if let given = first {
                first = nil
                readEarlier = given
            } else if let task = ahead {
                ahead = nil
                // A page read ahead while the batch before took long (its outside calls held by a
                // rate limit), by the wall clock or the run's, is read again: a batch is decided
                // at about the time it really is. So is one the second connection failed to read:
                // the run's own connection says whether the database is there.
                let kept = Self.readAheadKeptFor
                if let early = try? await task.value, options.waitClock.now() - early.claimedAt <= kept,
                    options.clock.now().timeIntervalSince(early.request.now) <= kept.seconds
                {
                    readEarlier = early
                }
            }
            let read: ReadPage
            if let readEarlier {
                read = readEarlier
                context.now = read.request.now
            } else {
                // A cron run decides each batch at the time it really is; a run at --now at that instant.
                context.now = max(context.now, options.clock.now())
                let pageID = loop.totals.nextPage()
                let request = pageRequest(
                    after: state.after, afterTime: state.afterTime, runID: loop.runID, pageID: pageID,
                    now: context.now, logger: logger)
                let claimedAt = options.waitClock.now()
                read = ReadPage(
                    page: try await readPage(request, calendars: state.calendars, logger: logger, on: db),
                    request: request, claimedAt: claimedAt)
            }
            let page = read.page
            let request = read.request
            let claimedAt = read.claimedAt
            let pageID = request.pageID
            if page.isEmpty {
                // An empty page: the end of the items, of this pass over a queue, or a pause.
                if let pause: String = try await db({ try await pauseReason(on: connection, logger: logger) }) {
                    logger.notice("job paused; stopping between batches", metadata: [LogKey.reason: "\(pause)"])
                    return (.paused, "paused: \(pause)")
                }
                // The pause may have been lifted between the page and the question: look once more.
                if !source.isQueue, try await !readPage(request, calendars: state.calendars, logger: logger, on: db).isEmpty {
                    continue
                }
                guard source.isQueue,
                    try await waitForNextPass(
                        state: &state, until: loop.drainUntil, runID: loop.runID,
                        totals: loop.totals, context: context, on: db)
                else { return (.succeeded, nil) }
                continue
            }
            let last = page[page.count - 1].id
            let lastTime = source.pagedAt(page[page.count - 1])
            state.batch += 1
            state.passFoundWork = true
            var batchContext = context
            batchContext.pageID = pageID
            batchContext.logger[metadataKey: LogKey.batch] = "\(pageID)"
            let facts: BatchFacts
            if let readAhead = read.facts {
                facts = readAhead
            } else {
                facts = try await readBatch(page, context: batchContext, on: db)
            }
            if let second {
                // The next page and its facts, on the second connection, while this batch decides and writes.
                var next = context
                next.now = max(context.now, options.clock.now())
                let nextPageID = loop.totals.nextPage()
                next.pageID = nextPageID
                next.logger[metadataKey: LogKey.batch] = "\(nextPageID)"
                let nextRequest = pageRequest(
                    after: last, afterTime: lastTime, runID: loop.runID, pageID: nextPageID,
                    now: next.now, logger: logger)
                let calendars = state.calendars
                let nextContext = next
                ahead = Task { try await readAhead(nextRequest, calendars: calendars, context: nextContext, on: second) }
            }
            try await runBatch(
                page, facts: facts, claimedAt: claimedAt, state: &state, context: batchContext,
                ledger: loop.ledger, totals: loop.totals, on: db)
            observer.batchFinished(counts: loop.totals.counts)
            if let stop = state.stop {
                logger.notice("job stopped itself after the batch", metadata: [LogKey.reason: "\(stop)"])
                return (.stopped, "\(stop); the \(source.noun)s it did not reach are left to a later run")
            }
            if state.interrupted {
                logger.notice("stopping on a signal after the batch")
                return (.interrupted, "stopped by a signal; the \(source.noun)s whose outside calls were cut short are left to the next run")
            }
            state.after = source.isQueue && !options.dryRun ? nil : last
            state.afterTime = source.isQueue && !options.dryRun ? nil : lastTime
        }
    }

    /// A queue drained by `options.lanes` batch loops at once, each on its own connection (the
    /// first on the run's): as many dispatchers in one process, sharing the run's counts. A lane
    /// that meets an error it cannot isolate (its connection lost) ends on it alone, its batch's
    /// sends done and written (`sendAfterSends`), while the others drain as they would; the run
    /// then ends as the most serious of its lanes' ends, an error first.
    private func runLanes(
        context: RunContext, loop: LoopSettings,
        first: BoundedConnection
    ) async throws -> (RunStatus, String?, BatchLoopState) {
        let ends = await withTaskGroup(of: (RunStatus, String?, BatchLoopState).self) { group in
            for lane in 0..<options.lanes {
                group.addTask {
                    var laneContext = context
                    laneContext.logger[metadataKey: LogKey.lane] = "\(lane)"
                    let ownContext = laneContext
                    /// The lane's end: how its loop ended, or the error it ended on.
                    @Sendable func drain(on db: BoundedConnection) async -> (RunStatus, String?, BatchLoopState) {
                        var state = BatchLoopState(after: nil)
                        do {
                            let (status, message) = try await batchLoop(state: &state, context: ownContext, loop: loop, on: db)
                            return (status, message, state)
                        } catch {
                            ownContext.logger.error(
                                "lane ended on an error; the other lanes go on",
                                metadata: [LogKey.reason: "\(describe(error))"])
                            return (.aborted, describe(error), state)
                        }
                    }
                    if lane == 0 { return await drain(on: first) }
                    do {
                        return try await database.withConnection { connection in
                            await drain(on: BoundedConnection(connection: connection, database: database))
                        }
                    } catch {
                        return (.aborted, "no connection for the lane: \(describe(error))", BatchLoopState(after: nil))
                    }
                }
            }
            var ends: [(RunStatus, String?, BatchLoopState)] = []
            for await end in group { ends.append(end) }
            return ends
        }
        var merged = BatchLoopState(after: nil)
        for (_, _, state) in ends {
            merged.tally.merge(state.tally, uniquingKeysWith: +)
            merged.failureSample += state.failureSample.prefix(Self.failuresInSummary - merged.failureSample.count)
            merged.stop = merged.stop ?? state.stop
            merged.interrupted = merged.interrupted || state.interrupted
        }
        let order: [RunStatus] = [.aborted, .interrupted, .paused, .stopped, .succeeded]
        let worst = ends.min { order.firstIndex(of: $0.0) ?? 0 < order.firstIndex(of: $1.0) ?? 0 }!
        return (worst.0, worst.1, merged)
    }

    /// Records how the run ended: on its own connection, or, when that one was lost, on a new one
    /// opened for it, so that a run cut off from the database leaves its status when it can.
    private func finish(
        _ ledger: RunLedger, runID: Int64, status: RunStatus, state: BatchLoopState, error: String?,
        on db: BoundedConnection
    ) async throws {
        let (counts, tally) = (state.counts, state.tally)
        let record: @Sendable (PostgresConnection) async throws -> Void = { connection in
            try await ledger.finish(runID: runID, status: status, counts: counts, tally: tally, error: error, on: connection)
        }
        if !db.connection.isClosed {
            do {
                return try await db { try await record(db.connection) }
            } catch  where db.connection.isClosed {
                // Lost while recording: try once more on a new connection.
            }
        }
        // Not one from the pool: it may hand over the connection the run read ahead on, whose
        // session may have stopped answering with the run's.
        try await database.withNewConnection { connection in
            try await BoundedConnection(connection: connection, database: database) { try await record(connection) }
        }
    }

    /// The job's own writes, then the work marks, which the runner owns, and the notifications the
    /// changes queue (`NotificationQueue.enqueue`).
    func writes(for changes: [PlannedChange<J.Change>], context: RunContext) -> BatchWrites {
        guard !changes.isEmpty else { return BatchWrites() }
        var writes = job.writes(for: changes, run: context)

        let marks = changes.flatMap { change in change.work.map { (change.itemID, $0) } }
        if !marks.isEmpty {
            writes.step(
                "nudge_work",
                """
                insert into job_work (job, user_id, local_day, outcome, detail, run_id)
                select job, user_id, local_day, outcome, nullif(detail, ''), \(context.runID)
                  from unnest(\(marks.map { $0.1.job(name) }), \(marks.map(\.0)), \(marks.map(\.1.localDay)),
                              \(marks.map(\.1.outcome)), \(marks.map { $0.1.detail ?? "" }))
                       as w(job, user_id, local_day, outcome, detail)
                on conflict (job, user_id, local_day) do nothing
                """)
        }
        let messages = changes.flatMap { change in change.notifications.map { ($0.recipient ?? change.itemID, $0) } }
        if !messages.isEmpty {
            NotificationQueue.enqueue(messages, job: name, runID: context.runID, into: &writes)
        }
        return writes
    }

    /// A queued notification as a run's report tells it: its type and channel, when, and what
    /// the user will read (an email's subject).
    static func reportLine(_ message: OutboxMessage) -> String {
        let when = "\(message.type)" + (message.channel == .push ? "" : " (\(message.channel))") + " after \(timestamp(message.deliverAfter))"
        return message.channel == .push ? "\(when): \(message.title) — \(message.body)" : "\(when): \(message.title)"
    }

    func report(
        _ userID: UUID, _ outcome: UserReport.Outcome, detail: String, work: [String] = [],
        notifications: [String] = []
    ) {
        guard observer.wantsUserReports else { return }
        observer.userDecided(
            UserReport(
                userID: userID, outcome: outcome, detail: detail, work: work,
                notifications: notifications))
    }

    /// The tally of the users a sweep found work for that the due index did not have due.
    static var indexMissed: String { "index_missed" }
    /// The tally of the users a sweep found without a row in the due index, and gave one.
    static var indexRowAdded: String { "index_row_added" }
}

extension JobRunner {
    static func timestamp(_ instant: Date) -> String {
        instant.formatted(.iso8601)
    }
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
