import Foundation
import Logging
import PostgresNIO
import Synchronization

/// Spaces a provider's requests to the rate its account allows: each request takes the next free
/// slot, one interval after the slot before it, and leaves once that slot has come. The rate is
/// the account's (Resend's team, the LLM's key), not one process's: with a database, every process
/// that calls the provider takes its slots from the same row (`SharedPace`), so that dispatchers of
/// overlapping cron minutes and of every shard, and push-trigger's shards, keep it together
/// (docs/jobs/dispatch.md, "Email (Resend)"; docs/jobs/push-trigger.md).
public protocol ProviderPace: Sendable {
    /// Takes the next free slot and answers how long to wait for it; nil, having taken nothing,
    /// when that slot is further away than `limit` (nil: however far it is).
    func reserve(within limit: Duration?) async throws -> Duration?

    /// Moves the next free slot to `delay` from now, unless it is later already: the provider
    /// asked every request to wait that long.
    func hold(for delay: Duration) async throws
}

public enum PaceSpacing {
    /// The time between two slots for at most `limit` requests in any `window`, the window widened
    /// by `allowance`: a request reaches the provider a little after its slot (a wake-up, a
    /// statement, the network), and two of them that get there unevenly late must still not put
    /// `limit + 1` into one of the provider's windows.
    public static func interval(limit: Int, per window: Duration, allowance: Duration) -> Duration {
        (window + allowance) / max(1, limit)
    }
}

/// One process's pace, in memory: for a client that has no database (a client tried alone, as
/// in the unit tests). A run with a database paces through it (`SharedPace`).
public final class LocalPace: ProviderPace {
    public let interval: Duration
    private let clock: any WaitClock
    private let next: Mutex<Duration>

    public init(interval: Duration, clock: any WaitClock = SystemWaitClock()) {
        self.interval = interval
        self.clock = clock
        next = Mutex(clock.now())
    }

    public func reserve(within limit: Duration?) -> Duration? {
        let now = clock.now()
        return next.withLock { next in
            let slot = max(next, now)
            let wait = slot - now
            if let limit, wait > limit { return nil }
            next = slot + interval
            return wait
        }
    }

    public func hold(for delay: Duration) {
        let now = clock.now()
        next.withLock { next in next = max(next, now + delay) }
    }
}

/// The pace every process shares: a provider's next free slot is its row of `provider_pace`
/// (migration 0023), and a reservation is one statement that takes the slot and moves the row on
/// by the interval, or takes nothing when the slot is too far. Slots are on the database's clock
/// (`clock_timestamp()`, read once the row's lock is held), so that processes on different hosts
/// agree on them; what comes back is the wait, which each process counts on its own clock from the
/// answer's arrival (never sooner than the slot).
public struct SharedPace: ProviderPace {
    /// The row's name: `resend`, `anthropic`, `openai`.
    public let provider: String
    public let interval: Duration
    let database: Database
    let logger: Logger

    public init(provider: String, interval: Duration, database: Database, logger: Logger) {
        self.provider = provider
        self.interval = interval
        self.database = database
        self.logger = logger
    }

    public func reserve(within limit: Duration?) async throws -> Duration? {
        try await take(within: limit)?.wait
    }

    /// The slot taken, on the database's clock, and how long to wait for it; nil when it is
    /// further away than `limit`. Its statement is bounded like any other (`Database.bounded`):
    /// a database that does not answer fails the reservation, and nothing leaves.
    func take(within limit: Duration?) async throws -> (slot: Date, wait: Duration)? {
        let provider = self.provider
        let step = interval.seconds
        let bound = limit?.seconds
        let logger = self.logger
        let database = self.database
        do {
            return try await database.withConnection { connection in
                try await database.bounded(connection) {
                    // The conflict's update runs with the row locked: `clock_timestamp()` is read
                    // after any other process's reservation has moved the row on.
                    let rows = try await connection.query(
                        """
                        insert into provider_pace as p (provider, next_slot)
                        values (\(provider), clock_timestamp() + \(step) * interval '1 second')
                        on conflict (provider) do update
                           set next_slot = greatest(p.next_slot, clock_timestamp()) + \(step) * interval '1 second'
                         where \(bound)::float8 is null
                            or p.next_slot <= clock_timestamp() + \(bound)::float8 * interval '1 second'
                        returning p.next_slot - \(step) * interval '1 second',
                                  extract(epoch from p.next_slot - \(step) * interval '1 second' - clock_timestamp())::float8
                        """, logger: logger)
                    var taken: (slot: Date, wait: Duration)?
                    for try await (slot, wait) in rows.decode((Date, Double).self) {
                        taken = (slot, .seconds(max(0, wait)))
                    }
                    return taken
                }
            }
        } catch {
            throw failed(error, doing: "take a turn")
        }
    }

    public func hold(for delay: Duration) async throws {
        let provider = self.provider
        let seconds = delay.seconds
        let logger = self.logger
        let database = self.database
        do {
            try await database.withConnection { connection in
                try await database.bounded(connection) {
                    _ = try await connection.query(
                        """
                        insert into provider_pace as p (provider, next_slot)
                        values (\(provider), clock_timestamp() + \(seconds) * interval '1 second')
                        on conflict (provider) do update set next_slot = greatest(p.next_slot, excluded.next_slot)
                        """, logger: logger)
                }
            }
        } catch {
            throw failed(error, doing: "hold every request")
        }
    }

    private func failed(_ error: any Error, doing what: String) -> NudgeError {
        let reason = describe(error)
        logger.warning(
            "could not use a provider's pace shared through the database",
            metadata: [
                "nudge.provider": "\(provider)", LogKey.reason: "\(reason)",
            ])
        return NudgeError(.database, "could not \(what) under \(provider)'s pace (provider_pace): \(reason)")
    }
}
