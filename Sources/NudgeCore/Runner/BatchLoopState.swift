import Foundation
import PostgresNIO
import Synchronization

/// A connection whose every wait is bounded (`Database.bounded`): `db { … }` runs a use of it.
struct BoundedConnection: Sendable {
    let connection: PostgresConnection
    let database: Database

    @discardableResult
    func callAsFunction<T: Sendable>(statements: Int = 1, _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
        try await database.bounded(connection, statements: statements, operation)
    }
}

/// A run's counts, shared by its lanes.
final class RunTotals: Sendable {
    private let state = Mutex((counts: RunCounts(), pages: Int64(0), lastProgress: ContinuousClock.now))

    /// Whether the run's row is due its progress (counts, heartbeat, checkpoint): once a second at
    /// most, whichever lane asks first. A checkpoint that lags behind the batches written costs a
    /// resumed run a second's batches read again, which their state makes do nothing twice.
    func progressDue() -> Bool {
        state.withLock { state in
            guard ContinuousClock.now - state.lastProgress >= .seconds(1) else { return false }
            state.lastProgress = .now
            return true
        }
    }

    var counts: RunCounts { state.withLock { $0.counts } }

    func add(_ batch: RunCounts) {
        state.withLock { $0.counts.add(batch) }
    }

    /// The number of the run's next page, across lanes.
    func nextPage() -> Int64 {
        state.withLock { state in
            state.pages += 1
            return state.pages
        }
    }
}

struct BatchLoopState {
    var after: UUID?
    /// The last item's place in a source that pages by a time before its id (`WorkSource.pagedAt`).
    var afterTime: Date?
    /// Whether the current pass over a queue has met an item yet.
    var passFoundWork = false
    var batch = 0
    var counts = RunCounts()
    var tally: [String: Int] = [:]
    var failureSample: [RunSummary.Failure] = []
    let calendars = CalendarCache()
    /// When the last batch's outside calls ended, for the pause before the next batch's.
    var outsideCallsEnded: Duration?
    /// The pause owed after those calls.
    var pauseOwed: Duration = .zero
    /// Set when a job ended the run (a budget spent): the run stops after the batch in flight.
    var stop: RunStop?
    /// Set when a signal cut the batch's outside calls short: the run stops after the batch.
    var interrupted = false
}
