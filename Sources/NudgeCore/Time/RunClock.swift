import Foundation

/// Where a run reads the time: the one clock injected into it. A cron run follows the real time,
/// so that a user reached hours into a long run is decided at the hour it really is; a run at an
/// explicit `--now` (a backfill, a test, a replay) keeps that instant from its first batch to its last.
public protocol RunClock: Sendable {
    func now() -> Date
}

/// The real time.
public struct SystemClock: RunClock {
    public init() {}

    public func now() -> Date { Date() }
}

/// One instant, for a run at `--now`.
public struct FixedClock: RunClock {
    public let instant: Date

    public init(_ instant: Date) {
        self.instant = instant
    }

    public func now() -> Date { instant }
}
