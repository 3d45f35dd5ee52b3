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

    /// How many failures the summary carries; the ledger keeps them all.
    static var failuresInSummary: Int { 20 }

    public init(job: J, options: RunOptions, database: Database, observer: any RunObserver) {
        self.job = job
        self.options = options
        self.database = database
        self.observer = observer
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
                // for the disk (`Job.commitsAsynchronously`); the pooled connection gets its
                // setting back after the run.
                let asynchronous = job.commitsAsynchronously && !options.dryRun
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
                    if job.commitsAsynchronously && !options.dryRun {
                        _ = try? await db({ try await connection.query("reset synchronous_commit", logger: logger) })
                    }
                    try? await db({ try await locks.release(on: connection, logger: logger) })
                }
                throw error
            }
        }
    }

    private func runLocked(ledger: RunLedger, started: ContinuousClock.Instant, logger: Logger,
                           on db: BoundedConnection) async throws -> RunSummary {
        let connection = db.connection
        let scopeKey = options.scopeKey(job: name)
        let isQueue = source.isQueue
        let resume = try await db(statements: 2) {
            try await ledger.recoverPrevious(job: name, shard: options.shard, scopeKey: scopeKey, dryRun: options.dryRun,
                                             shared: isQueue, on: connection)
        }
        let runID = try await db {
            try await ledger.begin(job: name, options: options, scopeKey: scopeKey, resumedFrom: resume?.runID, on: connection)
        }
        var runLogger = logger
        runLogger[metadataKey: LogKey.runID] = "\(runID)"
        let logger = runLogger
        var context = RunContext(definition: job.definition, runID: runID, now: options.now, startedAt: options.now,
                                 clock: options.clock, window: options.window, dryRun: options.dryRun, logger: logger,
                                 concurrency: options.concurrency, database: database)
        context.users = options.users
        logger.info("run started", metadata: [
            LogKey.now: "\(Self.timestamp(options.now))",
            LogKey.dryRun: "\(options.dryRun)",
            LogKey.resumedFrom: "\(resume.map { String($0.runID) } ?? "-")",
        ])
        let inScope: Int? = observer is SilentObserver ? nil : try await db {
            try await source.count(pageRequest(after: nil, runID: runID, now: options.now, logger: logger), on: connection)
        }
        observer.runStarted(runID: runID, job: name, usersInScope: inScope, resumedFrom: resume?.runID)
        await tend(context: context, on: db)
        // A queue is drained in passes until this instant; a run at an explicit --now drains what
        // is due at that instant and ends.
        let drainUntil = ContinuousClock.now + (options.nowIsExplicit || options.dryRun ? .zero : options.drainFor)

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
            if let problem = job.runProblem, [.succeeded, .partial].contains(status) {
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
        logger.info("run finished", metadata: [
            LogKey.status: "\(status.rawValue)", "nudge.processed": "\(state.counts.processed)",
            "nudge.succeeded": "\(state.counts.succeeded)", "nudge.skipped": "\(state.counts.skipped)",
            "nudge.failed": "\(state.counts.failed)", "nudge.seconds": "\(seconds)",
        ])
        if options.sweep {
            // The sweep's verdict on the due index, in one line an alert can match.
            let missed = state.tally[Self.indexMissed, default: 0]
            let added = state.tally[Self.indexRowAdded, default: 0]
            let rows = added == 0 ? "" : "; \(added) users had no row in it and have one now"
            logger.log(level: missed == 0 && added == 0 ? .notice : .error,
                       "sweep finished: \(missed == 0 ? "the due index missed nothing" : "the due index missed \(missed) users")\(rows)",
                       metadata: ["nudge.read": "\(state.counts.processed)", "nudge.index_missed": "\(missed)",
                                  "nudge.index_row_added": "\(added)"])
        }
        return RunSummary(runID: runID, job: name, status: status.rawValue, dryRun: options.dryRun, counts: state.counts,
                          tally: state.tally, resumedFrom: resume?.runID, seconds: seconds,
                          failures: state.failureSample, message: errorMessage ?? job.summaryNote(tally: state.tally),
                          exitCode: status.exitCode(failures: state.counts.failed), noun: source.noun,
                          jobMetrics: await jobMetrics(context: context, on: db))
    }

    /// The job's own gauges for the run's textfile, read at the time it is now; none on a dry
    /// run (which writes no metrics) or when nobody writes them. An error is logged and the run's
    /// own metrics go without them.
    private func jobMetrics(context: RunContext, on db: BoundedConnection) async -> [RunMetric] {
        guard options.readsJobMetrics && !options.dryRun else { return [] }
        var context = context
        context.now = max(context.now, options.clock.now())
        let now = context
        do {
            return try await db { try await job.runMetrics(run: now, on: db.connection) }
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
        let drainUntil: ContinuousClock.Instant
        /// The run's counts, across lanes.
        let totals: RunTotals
    }

    /// How long a page read ahead may wait for its batch's turn.
    static var readAheadKeptFor: Duration { .seconds(2) }

    /// A page read, with its place in the run and, when it was read ahead, its facts.
    private struct ReadPage: Sendable {
        let page: [Paged<J.Source.Item>]
        let request: PageRequest
        let claimedAt: ContinuousClock.Instant
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
    /// read again. Only for the jobs that read users through the due index: a circle's facts
    /// include what its members were told in other circles. Any other job: the plain loop.
    private func batchLoopReadingAhead(state: inout BatchLoopState, context: RunContext, loop: LoopSettings,
                                       on db: BoundedConnection) async throws -> (RunStatus, String?) {
        guard source is DueSource else {
            return try await batchLoop(state: &state, context: context, loop: loop, on: db, second: nil)
        }
        let start = state
        // The loop's state comes back whether it ended or threw: an aborted run's ledger still
        // gets its tally and failures.
        let (end, after) = try await database.withConnection { connection in
            var local = start
            do {
                let end = try await batchLoop(state: &local, context: context, loop: loop, on: db,
                                              second: BoundedConnection(connection: connection, database: database))
                return (Result<(RunStatus, String?), any Error>.success(end), local)
            } catch {
                return (.failure(error), local)
            }
        }
        state = after
        return try end.get()
    }

    /// Reads a page and, when it has items, their facts: what the loop reads ahead.
    private func readAhead(_ request: PageRequest, calendars: CalendarCache, context: RunContext,
                           on db: BoundedConnection) async throws -> ReadPage {
        let claimedAt = ContinuousClock.now
        let page = try await readPage(request, calendars: calendars, logger: context.logger, on: db)
        var read = ReadPage(page: page, request: request, claimedAt: claimedAt)
        if !page.isEmpty { read.facts = try await readBatch(page, context: context, on: db) }
        return read
    }

    /// Pages and batches until the items (or the queue's passes) end, the job is paused, a
    /// signal comes or the job stops itself: how the loop ended, and why. With a `second`
    /// connection, each batch's next page and facts are read on it while the batch writes.
    private func batchLoop(state: inout BatchLoopState, context initial: RunContext, loop: LoopSettings,
                           on db: BoundedConnection, second: BoundedConnection? = nil) async throws -> (RunStatus, String?) {
        var ahead: Task<ReadPage, any Error>?
        do {
            let end = try await batchLoop(state: &state, context: initial, loop: loop, on: db, second: second, ahead: &ahead)
            // A page read ahead of a loop that ended (a pause, a stop, a signal) is dropped unused.
            _ = try? await ahead?.value
            return end
        } catch {
            _ = try? await ahead?.value
            throw error
        }
    }

    private func batchLoop(state: inout BatchLoopState, context initial: RunContext, loop: LoopSettings,
                           on db: BoundedConnection, second: BoundedConnection?,
                           ahead: inout Task<ReadPage, any Error>?) async throws -> (RunStatus, String?) {
        let connection = db.connection, logger = loop.logger
        var context = initial
        while true {
            if Task.isShuttingDownGracefully || Task.isCancelled {
                logger.notice("stopping on a signal after the last batch")
                return (.interrupted, "stopped by a signal; \(options.resumeHint)")
            }
            var readEarlier: ReadPage?
            if let task = ahead {
                ahead = nil
                // A page read ahead while the batch before took long (its outside calls held by a
                // rate limit), by the wall clock or the run's, is read again: a batch is decided
                // at about the time it really is. So is one the second connection failed to read:
                // the run's own connection says whether the database is there.
                let kept = Self.readAheadKeptFor
                if let early = try? await task.value, early.claimedAt.duration(to: .now) <= kept,
                   options.clock.now().timeIntervalSince(early.request.now) <= kept.seconds {
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
                let request = pageRequest(after: state.after, afterTime: state.afterTime, runID: loop.runID, pageID: pageID,
                                          now: context.now, logger: logger)
                let claimedAt = ContinuousClock.now
                read = ReadPage(page: try await readPage(request, calendars: state.calendars, logger: logger, on: db),
                                request: request, claimedAt: claimedAt)
            }
            let page = read.page, request = read.request, claimedAt = read.claimedAt, pageID = request.pageID
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
                guard source.isQueue, try await waitForNextPass(state: &state, until: loop.drainUntil, runID: loop.runID,
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
                let nextRequest = pageRequest(after: last, afterTime: lastTime, runID: loop.runID, pageID: nextPageID,
                                              now: next.now, logger: logger)
                let calendars = state.calendars, nextContext = next
                ahead = Task { try await readAhead(nextRequest, calendars: calendars, context: nextContext, on: second) }
            }
            try await runBatch(page, facts: facts, claimedAt: claimedAt, state: &state, context: batchContext,
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
    private func runLanes(context: RunContext, loop: LoopSettings,
                          first: BoundedConnection) async throws -> (RunStatus, String?, BatchLoopState) {
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
                            ownContext.logger.error("lane ended on an error; the other lanes go on",
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
    private func finish(_ ledger: RunLedger, runID: Int64, status: RunStatus, state: BatchLoopState, error: String?,
                        on db: BoundedConnection) async throws {
        let (counts, tally) = (state.counts, state.tally)
        let record: @Sendable (PostgresConnection) async throws -> Void = { connection in
            try await ledger.finish(runID: runID, status: status, counts: counts, tally: tally, error: error, on: connection)
        }
        if !db.connection.isClosed {
            do {
                return try await db { try await record(db.connection) }
            } catch where db.connection.isClosed {
                // Lost while recording: try once more on a new connection.
            }
        }
        // Not one from the pool: it may hand over the connection the run read ahead on, whose
        // session may have stopped answering with the run's.
        try await database.withNewConnection { connection in
            try await BoundedConnection(connection: connection, database: database) { try await record(connection) }
        }
    }

    // MARK: One batch

    /// The page's items placed or failed, and the job's facts about those placed.
    private func readBatch(_ page: [Paged<J.Source.Item>], context: RunContext, on db: BoundedConnection) async throws -> BatchFacts {
        var failures: [(UUID, String)] = []
        var placed: [(id: UUID, item: J.Source.Item)] = []
        for entry in page {
            switch entry {
            case .item(let id, let item): placed.append((id, item))
            case .unusable(let id, let reason): failures.append((id, reason))
            }
        }
        let facts = try await readFacts(for: &placed, failures: &failures, fullBatch: page.count == options.batchSize,
                                        context: context, on: db)
        return BatchFacts(placed: placed, failures: failures, facts: facts)
    }

    private func runBatch(_ page: [Paged<J.Source.Item>], facts read: BatchFacts, claimedAt: ContinuousClock.Instant,
                          state: inout BatchLoopState, context: RunContext,
                          ledger: RunLedger, totals: RunTotals, on db: BoundedConnection) async throws {
        let logger = context.logger
        var failures = read.failures
        // Items the job skipped with a reason (a window passed, a rejected reply, a spent budget):
        // counted as skipped, their reasons recorded with the failures'.
        var skipped: [(UUID, String)] = []
        let placed = read.placed, facts = read.facts
        var planned: [PlannedChange<J.Change>] = []
        var nothingDue = 0
        // The items with nothing due whose change only moves their next instant: written with
        // the batch after its outside calls, counted as nothing due.
        var later: [PlannedChange<J.Change>] = []
        for (id, item) in placed {
            do {
                switch try job.decide(for: item, facts: facts[id], run: context) {
                case .nothingDue(let why):
                    nothingDue += 1
                    report(id, .nothingDue, detail: why)
                case .later(let change, let why):
                    later.append(change)
                    report(id, .nothingDue, detail: why)
                case .act(let change):
                    planned.append(change)
                }
            } catch let skip as UserSkip {
                skipped.append((id, skip.reason))
            } catch {
                failures.append((id, describe(error)))
            }
        }

        // A sweep: the items the due index did not have due (those whose decision nonetheless did
        // something, more than move their next instant, are what the index missed).
        let notDueByIndex = options.sweep ? Set(placed.filter { !source.wasDue($0.item, at: context.now) }.map(\.id)) : []
        // ...and those it had no row for at all, which the batch's write gives one.
        let unindexed = options.sweep ? Set(placed.filter { source.lacksIndexRow($0.item) }.map(\.id)) : []

        var undone: Set<UUID> = []
        // When the page's claims end, on this process's clock (nil: a source without claims).
        var heldUntil = source.claimLasts.map { claimedAt + .seconds($0) }
        if job.completesOutside && !planned.isEmpty, let limit = job.outsideTimeLimit, let until = heldUntil {
            // The claims must outlast the outside calls (each user's, then the batch's together)
            // and the write: renewed when reading took long, and the users whose claim went to
            // another run meanwhile are left to it, nothing sent for them.
            let needed = (limit * 2).seconds + 20
            let ids = planned.map(\.itemID), renewing = ContinuousClock.now
            let held = try await db { try await source.keep(page: ids, for: needed, heldUntil: until, run: context, on: db.connection) }
            heldUntil = max(until, renewing + .seconds(needed))
            for id in ids where !held.contains(id) {
                skipped.append((id, "its claim ran out before its outside calls and another run holds it now"))
            }
            planned.removeAll { !held.contains($0.itemID) }
        }
        if job.completesOutside && !planned.isEmpty {
            if let previous = state.outsideCallsEnded {
                try await Task.sleep(until: previous + state.pauseOwed)
            }
            let pause = job.pause(after: planned)
            let outside = await completeOutside(planned, context: context)
            planned = job.review(await job.completeTogether(outside.completed, run: context), run: context)
            failures += outside.failed
            skipped += outside.skipped
            undone = outside.undone
            state.stop = state.stop ?? outside.stop
            state.interrupted = state.interrupted || outside.interrupted
            state.outsideCallsEnded = .now
            state.pauseOwed = pause
            if !context.dryRun, !planned.isEmpty, let until = heldUntil {
                // The write must end before the claims do: renewed when less than its bound is
                // left. A user whose claim ran out and went to another run while the sends were
                // under way is that run's now: this batch writes nothing for them, and says so
                // (what was sent for them may be sent again).
                // The write's bound is that of its two statements (`send`). (At most a claim's own
                // length: a database without a statement time-out bounds its write by two hours,
                // and a dispatcher that died would hold its users as long.)
                let bound = min(database.limits.answerTimeout(statements: 2).seconds, source.claimLasts ?? 0)
                let ids = planned.map(\.itemID)
                let held = await keepBeforeWrite(ids, for: bound, heldUntil: until, context: context, on: db)
                for id in ids where !held.contains(id) {
                    logger.error("a claim ran out while its sends were under way", metadata: [
                        LogKey.userID: "\(id.uuidString.lowercased())",
                        LogKey.reason: "another run holds the user now: this run writes nothing for them, and what it sent may be sent again",
                    ])
                    skipped.append((id, "its claim ran out while its outside calls were under way and another run holds it now: "
                                        + "nothing of them is written by this run"))
                }
                planned.removeAll { !held.contains($0.itemID) }
            }
        }
        // The checkpoint stops short of the first item left undone (a spent budget, a signal); a
        // queue keeps none: what is not done stays in it.
        let checkpoint: UUID?
        if source.isQueue {
            checkpoint = nil
        } else if let firstUndone = page.firstIndex(where: { undone.contains($0.id) }) {
            checkpoint = firstUndone > 0 ? page[firstUndone - 1].id : state.after
        } else {
            checkpoint = page.last!.id
        }
        let pageIDs = page.map(\.id)
        let laterIDs = Set(later.map(\.itemID))
        planned += later
        nothingDue += later.count

        // One statement: the job's writes, the work marks, the outbox and the checkpoint.
        var committed = planned
        // Set when every user of the batch failed to write the same way: the run ends after the
        // batch's bookkeeping.
        var systemic: NudgeError?
        // Set when the batch was written on another connection after its own was lost: the lane
        // ends on this once the batch is accounted for.
        var laneEnds: (any Error)?
        do {
            var writes = self.writes(for: planned, context: context)
            if !context.dryRun {
                writes.append(source.release(page: pageIDs, changed: Set(planned.map(\.itemID)), failed: failures, run: context))
                writes.append(batchRecord(ledger, checkpoint: checkpoint, page: page, committed: planned.count - laterIDs.count,
                                          nothingDue: nothingDue, skipped: skipped, failures: failures, totals: totals, context: context))
            }
            laneEnds = try await sendAfterSends(writes, context: context, on: db)
        } catch where FailureScope.of(error) == .users {
            logger.warning("batch write failed; retrying \(source.noun) by \(source.noun)",
                           metadata: [LogKey.reason: "\(describe(error))"])
            committed = []
            var errors: [any Error] = []
            for change in planned {
                do {
                    try await send(writes(for: [change], context: context), context: context, on: db)
                    committed.append(change)
                } catch where FailureScope.of(error) == .users {
                    failures.append((change.itemID, describe(error)))
                    errors.append(error)
                }
            }
            // A change that only moved an item's next instant and failed to write counts as failed.
            nothingDue -= laterIDs.subtracting(committed.map(\.itemID)).count
            if FailureScope.isSystemic(failed: errors, of: planned.count, fullBatch: page.count == options.batchSize) {
                systemic = NudgeError(.database, "every \(source.noun) of the batch failed to write the same way: \(failures.last!.1)")
            }
            if !context.dryRun, systemic == nil {
                var record = source.release(page: pageIDs, changed: Set(committed.map(\.itemID)), failed: failures, run: context)
                record.append(batchRecord(ledger, checkpoint: checkpoint, page: page,
                                          committed: committed.count { !laterIDs.contains($0.itemID) },
                                          nothingDue: nothingDue, skipped: skipped, failures: failures, totals: totals, context: context))
                try await send(record, context: context, on: db)
            }
        }
        if context.dryRun, systemic == nil {
            // The dry run's own ledger row is kept: outside the rolled-back statement.
            let record = batchRecord(ledger, checkpoint: checkpoint, page: page,
                                     committed: committed.count { !laterIDs.contains($0.itemID) },
                                     nothingDue: nothingDue, skipped: skipped, failures: failures, totals: totals, context: context)
            try await db { try await execute(record, on: db.connection, logger: logger) }
        }
        do {
            if laneEnds == nil {
                state.tally.merge(try await db(statements: job.bookkeepingStatements) { try await job.afterBatch(run: context, on: db.connection) },
                                  uniquingKeysWith: +)
            }
        } catch where !db.connection.isClosed {
            logger.warning("the batch's bookkeeping failed; its writes stand", metadata: [LogKey.reason: "\(describe(error))"])
        }
        if let systemic { throw systemic }
        for (userID, reason) in skipped {
            var userLogger = logger
            userLogger[metadataKey: LogKey.userID] = "\(userID.uuidString.lowercased())"
            userLogger.notice("user skipped", metadata: [LogKey.reason: "\(reason)"])
            report(userID, .nothingDue, detail: reason)
        }

        var batchCounts = RunCounts()
        batchCounts.processed = page.count
        // (Those a sweep gave a row count whatever their decision was: moving their instant writes it.)
        state.tally[Self.indexRowAdded, default: 0] += committed.count { unindexed.contains($0.itemID) }
        if state.tally[Self.indexRowAdded] == 0 { state.tally[Self.indexRowAdded] = nil }
        committed.removeAll { laterIDs.contains($0.itemID) }
        batchCounts.succeeded = committed.count
        batchCounts.skipped = nothingDue + skipped.count
        batchCounts.failed = failures.count
        state.counts.add(batchCounts)
        totals.add(batchCounts)
        for change in committed {
            state.tally.merge(change.tally, uniquingKeysWith: +)
            if notDueByIndex.contains(change.itemID) {
                var userLogger = logger
                userLogger[metadataKey: LogKey.userID] = "\(change.itemID.uuidString.lowercased())"
                userLogger.error("the due index did not have this user due; the sweep did their work")
                state.tally[Self.indexMissed, default: 0] += 1
            }
            for message in change.notifications {
                state.tally["notification:\(message.type)" + (message.channel == "push" ? "" : ":\(message.channel)"), default: 0] += 1
            }
            if observer.wantsUserReports {
                report(change.itemID, .changed, detail: "", work: change.work.map { "\($0.localDay) \($0.outcome)" + ($0.detail.map { ": \($0)" } ?? "") },
                       notifications: change.notifications.map(Self.reportLine))
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
        if let laneEnds { throw laneEnds }
    }

    /// The job's facts about the batch's users, in its few set-based reads. When a read fails on
    /// a row (a value that cannot be read, an `'infinity'` date), the batch is read again user by
    /// user: only the owners of such rows fail, with the reason, and drop out of the batch.
    private func readFacts(for placed: inout [(id: UUID, item: J.Source.Item)], failures: inout [(UUID, String)],
                           fullBatch: Bool, context: RunContext, on db: BoundedConnection) async throws -> [UUID: J.Facts] {
        let items = placed
        do {
            return try await db(statements: job.readStatements) {
                try await job.loadFacts(for: items.map(\.item), run: context, on: db.connection)
            }
        } catch where FailureScope.of(error) == .users {
            context.logger.warning("reading the batch failed on a row; reading it \(source.noun) by \(source.noun)",
                                   metadata: [LogKey.reason: "\(describe(error))"])
        }
        var facts: [UUID: J.Facts] = [:]
        var readable: [(id: UUID, item: J.Source.Item)] = []
        var unreadable: [(UUID, String)] = []
        var errors: [any Error] = []
        for entry in items {
            do {
                let own = try await db(statements: job.readStatements) {
                    try await job.loadFacts(for: [entry.item], run: context, on: db.connection)
                }
                facts.merge(own) { _, new in new }
                readable.append(entry)
            } catch where FailureScope.of(error) == .users {
                unreadable.append((entry.id, "cannot read the \(source.noun)'s rows: \(describe(error))"))
                errors.append(error)
            }
        }
        if FailureScope.isSystemic(failed: errors, of: items.count, fullBatch: fullBatch) {
            throw NudgeError(.database, "every user of the batch failed to read the same way: \(unreadable[0].1)")
        }
        failures += unreadable
        placed = readable
        return facts
    }

    private func batchRecord(_ ledger: RunLedger, checkpoint: UUID?, page: [Paged<J.Source.Item>], committed: Int, nothingDue: Int,
                             skipped: [(UUID, String)], failures: [(UUID, String)], totals: RunTotals,
                             context: RunContext) -> BatchWrites {
        var counts = totals.counts
        counts.processed += page.count
        counts.succeeded += committed
        counts.skipped += nothingDue + skipped.count
        counts.failed += failures.count
        // A queue's lanes write the run's progress a few times a second between them, not each batch.
        return ledger.batchRecord(runID: context.runID, checkpoint: checkpoint, counts: counts, failures: failures + skipped,
                                  progress: totals.progressDue())
    }

    /// What the outside step made of a batch's changes.
    private struct OutsideResult {
        var completed: [PlannedChange<J.Change>] = []
        var failed: [(UUID, String)] = []
        var skipped: [(UUID, String)] = []
        /// Users left for a later run (a `RunStop`, a signal); counted as skipped too.
        var undone: Set<UUID> = []
        var stop: RunStop?
        var interrupted = false
    }

    /// Runs the job's outside step for the batch's changes, up to `--concurrency` at once, in the
    /// changes' order. After SIGTERM no new call starts, and the calls in flight get
    /// `shutdownGrace` to end before they are cancelled: their users are left undone.
    private func completeOutside(_ planned: [PlannedChange<J.Change>], context: RunContext) async -> OutsideResult {
        var outcomes = [OutsideOutcome<J.Change>?](repeating: nil, count: planned.count)
        let grace = options.shutdownGrace
        await withTaskGroup(of: (Int, OutsideOutcome<J.Change>)?.self) { group in
            var next = 0
            var shuttingDown = Task.isShuttingDownGracefully
            var running = 0
            func startNext() {
                guard next < planned.count, !shuttingDown, !Task.isShuttingDownGracefully else { return }
                running += 1
                let index = next, change = planned[index]
                next += 1
                group.addTask {
                    do {
                        return (index, .done(try await job.complete(change, run: context)))
                    } catch let stop as RunStop {
                        return (index, .stopped(stop))
                    } catch let skip as UserSkip {
                        return (index, .skipped(skip.reason))
                    } catch where Task.isCancelled || error is CancellationError {
                        return (index, .interrupted)
                    } catch {
                        return (index, .failed(describe(error)))
                    }
                }
            }
            // Watches for SIGTERM: nil when it comes (no new calls), then, after the grace, a
            // second nil that cancels the calls still in flight.
            group.addTask {
                do { try await gracefulShutdown() } catch { return (-1, .interrupted) }
                return nil
            }
            // The batch's bound, when the job's calls leave part of their waits to it (-2).
            var timeLimitPassed = false
            if let limit = job.outsideTimeLimit {
                group.addTask {
                    do { try await Task.sleep(for: limit) } catch { return (-1, .interrupted) }
                    return (-2, .interrupted)
                }
            }
            for _ in 0..<max(1, context.concurrency) { startNext() }
            while running > 0, let finished = await group.next() {
                switch finished {
                case (-2, _)?:
                    timeLimitPassed = true
                    group.cancelAll()
                case (let index, .interrupted)? where index >= 0 && timeLimitPassed && !shuttingDown:
                    outcomes[index] = .failed("its outside calls took longer than the batch's \(job.outsideTimeLimit!)")
                    running -= 1
                case nil where !shuttingDown:
                    shuttingDown = true
                    group.addTask {
                        try? await Task.sleep(for: grace)
                        return Task.isCancelled ? (-1, .interrupted) : nil
                    }
                case nil:
                    group.cancelAll()
                case (let index, let outcome)? where index >= 0:
                    outcomes[index] = outcome
                    running -= 1
                    startNext()
                default:
                    break
                }
            }
            group.cancelAll()
        }
        var result = OutsideResult()
        for (change, outcome) in zip(planned, outcomes) {
            switch outcome {
            case .done(let change)?: result.completed.append(change)
            case .failed(let reason)?: result.failed.append((change.itemID, reason))
            case .skipped(let reason)?: result.skipped.append((change.itemID, reason))
            case .stopped(let stop)?:
                result.skipped.append((change.itemID, "not done: \(stop)"))
                result.undone.insert(change.itemID)
                result.stop = result.stop ?? stop
            case .interrupted?, nil:
                result.skipped.append((change.itemID, "not done: the run was stopped by a signal before this user's outside call ended; left to the next run"))
                result.undone.insert(change.itemID)
                result.interrupted = true
            }
        }
        return result
    }

    /// The job's own writes, then the work marks and the outbox, which the runner owns. A message
    /// whose key is queued already is not queued again, with one exception: a call's preview that
    /// dispatch refused for its call (`DispatchRules.callStep`: moved away, cancelled) and that
    /// reached no one is queued anew when its job decides it again (the call back at that time,
    /// pending again).
    private func writes(for changes: [PlannedChange<J.Change>], context: RunContext) -> BatchWrites {
        guard !changes.isEmpty else { return BatchWrites() }
        var writes = job.writes(for: changes, run: context)

        let marks = changes.flatMap { change in change.work.map { (change.itemID, $0) } }
        if !marks.isEmpty {
            writes.step("nudge_work", """
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
            writes.step("nudge_outbox", """
                insert into notification_outbox
                       (dedupe_key, job, user_id, local_day, notification_type, channel, deliver_after, title, body,
                        payload, run_id)
                select dedupe_key, \(name), user_id, local_day, notification_type, channel, deliver_after, title, body,
                       payload::jsonb, \(context.runID)
                  from unnest(\(messages.map { $0.1.dedupeKey(job: name, userID: $0.0) }), \(messages.map(\.0)),
                              \(messages.map(\.1.localDay)), \(messages.map(\.1.type)), \(messages.map(\.1.channel)),
                              \(messages.map(\.1.deliverAfter)), \(messages.map(\.1.title)), \(messages.map(\.1.body)),
                              \(messages.map(\.1.payload)))
                       as m(dedupe_key, user_id, local_day, notification_type, channel, deliver_after, title, body, payload)
                on conflict (dedupe_key) do nothing
                """)
            // A call's preview decided again (the call back at that time, pending again) whose row
            // reached no one: queued anew with what the job decided now, whether it was refused for
            // its call, withdrawn by a decision on another path, or still waiting (a fallback held
            // behind a refused push keeps its 30 s after the push's new time). (A step of its own:
            // the insert's conflict clause may not touch one row twice, and a batch may queue a
            // key twice.)
            let revivable = messages.filter { NotificationKind.of($0.1.type).isTimeCritical }
            if !revivable.isEmpty {
                writes.step("nudge_outbox_revived", """
                    update notification_outbox o
                       set local_day = m.local_day, deliver_after = m.deliver_after, title = m.title, body = m.body,
                           payload = m.payload::jsonb, run_id = \(context.runID), status = 'pending', next_attempt_at = null,
                           attempts = case when o.status = 'pending' then o.attempts else 0 end, last_error = null,
                           lease_until = null, claimed_by = null, delivery_id = null
                      from unnest(\(revivable.map { $0.1.dedupeKey(job: name, userID: $0.0) }), \(revivable.map(\.1.localDay)),
                                  \(revivable.map(\.1.deliverAfter)), \(revivable.map(\.1.title)), \(revivable.map(\.1.body)),
                                  \(revivable.map(\.1.payload)))
                           as m(dedupe_key, local_day, deliver_after, title, body, payload)
                     where o.dedupe_key = m.dedupe_key and o.job = \(name)
                       and (o.status = 'pending'
                            or (o.status = 'suppressed' and o.last_error like \(DispatchRules.callStep + ": %"))
                            or (o.status = 'cancelled' and o.last_error like 'superseded:%'))
                       and o.sent_at is null and o.delivered_to = '{}' and o.request_left_at is null
                    """)
            }
        }
        return writes
    }

    /// A queued notification as a run's report tells it: its type and channel, when, and what
    /// the user will read (an email's subject).
    static func reportLine(_ message: OutboxMessage) -> String {
        let when = "\(message.type)" + (message.channel == "push" ? "" : " (\(message.channel))") + " after \(timestamp(message.deliverAfter))"
        return message.channel == "push" ? "\(when): \(message.title) — \(message.body)" : "\(when): \(message.title)"
    }

    private func report(_ userID: UUID, _ outcome: UserReport.Outcome, detail: String, work: [String] = [],
                        notifications: [String] = []) {
        guard observer.wantsUserReports else { return }
        observer.userDecided(UserReport(userID: userID, outcome: outcome, detail: detail, work: work,
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

/// How one user's outside step ended.
private enum OutsideOutcome<Change: Sendable>: Sendable {
    case done(PlannedChange<Change>)
    case failed(String)
    case skipped(String)
    case stopped(RunStop)
    /// Cancelled by a signal, or never started after one.
    case interrupted
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
