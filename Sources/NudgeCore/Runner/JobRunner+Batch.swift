import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle
import Synchronization

/// One batch of a run: its facts read, its decisions, its outside calls and its one transaction of
/// writes with the checkpoint (`JobRunner`).
extension JobRunner {
    // MARK: One batch

    /// The page's items placed or failed, and the job's facts about those placed.
    func readBatch(_ page: [Paged<J.Source.Item>], context: RunContext, on db: BoundedConnection) async throws -> BatchFacts {
        var failures: [(UUID, String)] = []
        var placed: [(id: UUID, item: J.Source.Item)] = []
        for entry in page {
            switch entry {
            case .item(let id, let item): placed.append((id, item))
            case .unusable(let id, let reason): failures.append((id, reason))
            }
        }
        let facts = try await readFacts(
            for: &placed, failures: &failures, fullBatch: page.count == options.batchSize,
            context: context, on: db)
        return BatchFacts(placed: placed, failures: failures, facts: facts)
    }

    func runBatch(
        _ page: [Paged<J.Source.Item>], facts read: BatchFacts, claimedAt: Duration,
        state: inout BatchLoopState, context: RunContext,
        ledger: RunLedger, totals: RunTotals, on db: BoundedConnection
    ) async throws {
        let logger = context.logger
        var failures = read.failures
        // Items the job skipped with a reason (a window passed, a rejected reply, a spent budget):
        // counted as skipped, their reasons recorded with the failures'.
        var skipped: [(UUID, String)] = []
        let placed = read.placed
        let facts = read.facts
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
        if let outside = capabilities.outside, !planned.isEmpty, let limit = outside.timeLimit, let until = heldUntil {
            // The claims must outlast the outside calls (each user's, then the batch's together)
            // and the write: renewed when reading took long, and the users whose claim went to
            // another run meanwhile are left to it, nothing sent for them.
            let needed = (limit * 2).seconds + 20
            let ids = planned.map(\.itemID)
            let renewing = options.waitClock.now()
            let held = try await db {
                try await source.keep(page: ids, for: needed, left: until - renewing, run: context, on: db.connection)
            }
            heldUntil = max(until, renewing + .seconds(needed))
            for id in ids where !held.contains(id) {
                skipped.append((id, "its claim ran out before its outside calls and another run holds it now"))
            }
            planned.removeAll { !held.contains($0.itemID) }
        }
        if let outside = capabilities.outside, !planned.isEmpty {
            if let previous = state.outsideCallsEnded {
                try await options.waitClock.sleep(until: previous + state.pauseOwed)
            }
            let pause = outside.pause(planned)
            let result = await completeOutside(planned, calls: outside, context: context)
            planned = outside.review(await outside.completeTogether(result.completed, context), context)
            failures += result.failed
            skipped += result.skipped
            undone = result.undone
            state.stop = state.stop ?? result.stop
            state.interrupted = state.interrupted || result.interrupted
            state.outsideCallsEnded = options.waitClock.now()
            state.pauseOwed = pause
            if !context.dryRun, !planned.isEmpty, let until = heldUntil {
                // The write must end before the claims do: renewed when less than its bound is
                // left. A user whose claim ran out and went to another run while the sends were
                // under way is that run's now: this batch writes nothing for them, and says so
                // (what was sent for them may be sent again).
                // The write's bound is that of its two statements (`send`). (At most a claim's own
                // length: a database without a statement time-out bounds its write by two hours,
                // and a run that died would hold its items as long.)
                let bound = min(database.limits.answerTimeout(statements: 2).seconds, source.claimLasts ?? 0)
                let ids = planned.map(\.itemID)
                let held = await keepBeforeWrite(ids, for: bound, heldUntil: until, context: context, on: db)
                for id in ids where !held.contains(id) {
                    logger.error(
                        "a claim ran out while its sends were under way",
                        metadata: [
                            LogKey.userID: "\(id.uuidString.lowercased())",
                            LogKey.reason: "another run holds the user now: this run writes nothing for them, and what it sent may be sent again",
                        ])
                    skipped.append(
                        (
                            id,
                            "its claim ran out while its outside calls were under way and another run holds it now: "
                                + "nothing of them is written by this run"
                        ))
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
                writes.append(
                    batchRecord(
                        ledger, checkpoint: checkpoint, page: page, committed: planned.count - laterIDs.count,
                        nothingDue: nothingDue, skipped: skipped, failures: failures, totals: totals, context: context))
            }
            laneEnds = try await sendAfterSends(writes, context: context, on: db)
        } catch  where FailureScope.of(error) == .users {
            logger.warning(
                "batch write failed; retrying \(source.noun) by \(source.noun)",
                metadata: [LogKey.reason: "\(describe(error))"])
            committed = []
            var errors: [any Error] = []
            for change in planned {
                do {
                    try await send(writes(for: [change], context: context), context: context, on: db)
                    committed.append(change)
                } catch  where FailureScope.of(error) == .users {
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
                record.append(
                    batchRecord(
                        ledger, checkpoint: checkpoint, page: page,
                        committed: committed.count { !laterIDs.contains($0.itemID) },
                        nothingDue: nothingDue, skipped: skipped, failures: failures, totals: totals, context: context))
                try await send(record, context: context, on: db)
            }
        }
        if context.dryRun, systemic == nil {
            // The dry run's own ledger row is kept: outside the rolled-back statement.
            let record = batchRecord(
                ledger, checkpoint: checkpoint, page: page,
                committed: committed.count { !laterIDs.contains($0.itemID) },
                nothingDue: nothingDue, skipped: skipped, failures: failures, totals: totals, context: context)
            try await db { try await execute(record, on: db.connection, logger: logger) }
        }
        do {
            if laneEnds == nil, let books = capabilities.bookkeeping {
                state.tally.merge(
                    try await db(statements: books.bookkeepingStatements) { try await books.afterBatch(run: context, on: db.connection) },
                    uniquingKeysWith: +)
            }
        } catch  where !db.connection.isClosed {
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
                state.tally["notification:\(message.type)\(message.channel.suffix)", default: 0] += 1
            }
            if observer.wantsUserReports {
                report(
                    change.itemID, .changed, detail: "", work: change.work.map { "\($0.localDay) \($0.outcome)" + ($0.detail.map { ": \($0)" } ?? "") },
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
    private func readFacts(
        for placed: inout [(id: UUID, item: J.Source.Item)], failures: inout [(UUID, String)],
        fullBatch: Bool, context: RunContext, on db: BoundedConnection
    ) async throws -> [UUID: J.Facts] {
        let items = placed
        do {
            return try await db(statements: job.readStatements) {
                try await job.loadFacts(for: items.map(\.item), run: context, on: db.connection)
            }
        } catch  where FailureScope.of(error) == .users {
            context.logger.warning(
                "reading the batch failed on a row; reading it \(source.noun) by \(source.noun)",
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
            } catch  where FailureScope.of(error) == .users {
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

    private func batchRecord(
        _ ledger: RunLedger, checkpoint: UUID?, page: [Paged<J.Source.Item>], committed: Int, nothingDue: Int,
        skipped: [(UUID, String)], failures: [(UUID, String)], totals: RunTotals,
        context: RunContext
    ) -> BatchWrites {
        var counts = totals.counts
        counts.processed += page.count
        counts.succeeded += committed
        counts.skipped += nothingDue + skipped.count
        counts.failed += failures.count
        // A queue's lanes write the run's progress a few times a second between them, not each batch.
        return ledger.batchRecord(
            runID: context.runID, checkpoint: checkpoint, counts: counts, failures: failures + skipped,
            progress: totals.progressDue())
    }
}
