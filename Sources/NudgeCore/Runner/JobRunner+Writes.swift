import Foundation
import Logging
import PostgresNIO

/// The runner's batch writes: one statement in its own transaction (a dry run's rolled back), the
/// claims renewed before a write that follows sends, and that write tried once more on a fresh
/// connection when its own went during the sends.
extension JobRunner {
    /// Sends a batch's writes as one statement, its own transaction; a dry run's is rolled back.
    func send(_ writes: BatchWrites, context: RunContext, on db: BoundedConnection) async throws {
        guard !writes.isEmpty else { return }
        let connection = db.connection
        let logger = context.logger
        // A prepared statement's first use on the connection is two statements (`prepared`).
        guard context.dryRun else {
            try await db(statements: 2) { try await execute(writes, on: connection, logger: logger) }
            return
        }
        try await db(statements: 4) {
            try await connection.query("begin", logger: logger)
            do {
                try await execute(writes, on: connection, logger: logger)
            } catch {
                _ = try? await connection.query("rollback", logger: logger)
                throw error
            }
            try await connection.query("rollback", logger: logger)
        }
    }

    /// The page's claims renewed before a write that follows sends (`WorkSource.keep`): on the
    /// batch's connection, or, when that fails (it went during the sends), on a fresh one, as the
    /// write will be (`sendAfterSends`). When neither answers, every user counts as held: the
    /// write, behind the claims, changes nothing of a user another run took.
    func keepBeforeWrite(
        _ ids: [UUID], for duration: TimeInterval, heldUntil: Duration,
        context: RunContext, on db: BoundedConnection
    ) async -> Set<UUID> {
        // What is left of the claims, read as each attempt begins: the first may have taken long to fail.
        let clock = options.waitClock
        let left: @Sendable () -> Duration = { heldUntil - clock.now() }
        do {
            return try await db { try await source.keep(page: ids, for: duration, left: left(), run: context, on: db.connection) }
        } catch {
            do {
                return try await database.withNewConnection { connection in
                    try await database.bounded(connection) {
                        try await source.keep(page: ids, for: duration, left: left(), run: context, on: connection)
                    }
                }
            } catch let again {
                context.logger.warning(
                    "the batch's claims could not be renewed before its write",
                    metadata: [
                        LogKey.reason: "\(describe(error)); on a fresh connection: \(describe(again))"
                    ])
                return Set(ids)
            }
        }
    }

    /// A batch's write. After its sends (a job that completes outside), a write that failed for
    /// the run (a lost connection, a statement cut off) is tried once more, on a fresh connection,
    /// before the run gives up on it: without it the sends would go again once their claims lapse.
    /// The connection is opened for it, outside the pool.
    /// (Dispatch's write is compare-and-set on its claims: one that had in fact been written
    /// changes nothing the second time.) Returns the error the lane ends on once the batch is
    /// accounted for, when the batch's own connection is gone.
    func sendAfterSends(_ writes: BatchWrites, context: RunContext, on db: BoundedConnection) async throws -> (any Error)? {
        do {
            try await send(writes, context: context, on: db)
            return nil
        } catch  where capabilities.outside != nil && !context.dryRun && FailureScope.of(error) == .run {
            context.logger.warning(
                "the batch's write failed after its sends; trying it once more on a fresh connection",
                metadata: [LogKey.reason: "\(describe(error))"])
            do {
                // Outside the pool, whose idle connections may have gone with this one.
                try await database.withNewConnection { connection in
                    try await send(writes, context: context, on: BoundedConnection(connection: connection, database: database))
                }
            } catch let again {
                context.logger.error("the batch's write failed again", metadata: [LogKey.reason: "\(describe(again))"])
                throw error
            }
            return db.connection.isClosed ? error : nil
        }
    }

    /// Runs the writes as one statement, reading its one row to the end: that is what runs it to completion.
    func execute(_ writes: BatchWrites, on connection: PostgresConnection, logger: Logger) async throws {
        for try await _ in try await connection.prepared(writes.statement, logger: logger) {}
    }
}
