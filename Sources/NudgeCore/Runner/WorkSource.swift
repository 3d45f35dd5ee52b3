import Foundation
import Logging
import PostgresNIO

/// The kind of work a job pages: users for most jobs, a user's due notifications for dispatch,
/// circles or scheduled calls for others. The runner asks its source for pages; everything else
/// (isolation, the batch's one write, the ledger, kill switches, dry runs, shards, the summary)
/// is the runner's, whatever the items are.
///
/// Two ways of paging exist:
/// - **keyset** (`isQueue == false`): the items in the source's order (users by id, calls by due
///   time and id), a page after the last item, which its id names; a run
///   takes the job's lock and keeps a checkpoint, so that an interrupted run resumes after it.
/// - **queue** (`isQueue == true`): each page claims the items due now, with a lease, so that any
///   number of runs work side by side without a lock; a run drains the queue in passes until its
///   deadline (`RunOptions.drainFor`), and a claim whose holder died is taken again when its lease
///   ends. Nothing to resume: what is not done stays in the queue.
public protocol WorkSource: Sendable {
    associatedtype Item: Sendable

    /// What one item is called in reports and the ledger ("user").
    var noun: String { get }

    /// Whether pages are claims on a shared queue (no lock, no checkpoint, passes until the
    /// deadline) rather than keyset pages of a table.
    var isQueue: Bool { get }

    /// Whether the runner may read the next page and its facts while a batch decides and writes
    /// (on a second connection): only when no batch's write changes what the next page reads, as
    /// for users paged one by one, each with facts of their own. Not for circles, whose facts
    /// include what their members were told in other circles.
    var readsAhead: Bool { get }

    /// The next page: at most `request.limit` items after `request.after` (keyset) or not
    /// claimed by anyone (queue), none when `request.notPaused` does not hold. An item that cannot
    /// be used (an unknown time zone) comes back as `.unusable` with the reason: it fails alone.
    func page(_ request: PageRequest, calendars: CalendarCache, on connection: PostgresConnection) async throws -> [Paged<Item>]

    /// How many items the run will meet, for a progress bar; nil when a count means nothing (a queue).
    func count(_ request: PageRequest, on connection: PostgresConnection) async throws -> Int?

    /// What the batch's write must also carry for the page's items (a queue: its claims
    /// released, those the job did not change put back as they were, and those of the items
    /// that failed put back for a later attempt). `changed` are the items whose change the same
    /// statement writes: no step may touch their rows.
    func release(page ids: [UUID], changed: Set<UUID>, failed: [(UUID, String)], run: RunContext) -> BatchWrites

    /// How long a claim of a page lasts from when it is taken (a queue's lease); nil for a source
    /// without claims.
    var claimLasts: TimeInterval? { get }

    /// Before a batch's outside calls and before its write (a queue's claims): makes the page's
    /// claims last `duration` more when what is `left` of them (on the run's wait clock) might
    /// not cover it; the items still held, without those whose claim ran
    /// out and went to another run meanwhile, which the batch must leave alone. All of them for
    /// a source without claims.
    func keep(
        page ids: [UUID], for duration: TimeInterval, left: Duration, run: RunContext,
        on connection: PostgresConnection
    ) async throws -> Set<UUID>

    /// When the next item falls due after `instant`, if one is waiting (a queue: how long a
    /// draining run sleeps); nil when none is.
    func nextDue(after instant: Date, request: PageRequest, on connection: PostgresConnection) async throws -> Date?

    /// Why the source cannot serve a run asked for with `options` (a sweep of a source without a
    /// due index, a shard of whole tables), or nil; the run refuses before it starts (exit 64).
    func scopeProblem(_ options: RunOptions) -> String?

    /// Whether `item` was due when `instant` came, by the source's own index: false for one a
    /// sweep (`--sweep`) read although the index did not have it due. Always true for a source
    /// without an index of due instants.
    func wasDue(_ item: Item, at instant: Date) -> Bool

    /// Whether `item` has no row at all in the source's index of due instants (a user a load that
    /// bypassed the triggers left out): a sweep reads it and the job's write gives it one. Always
    /// false for a source without such an index.
    func lacksIndexRow(_ item: Item) -> Bool

    /// For a keyset source ordered by a time before its id (calls by their preview's due time):
    /// that time of `item` as its page read it, so that the next page starts after it even if the
    /// row has moved since (`PageRequest.afterTime`). Nil for a source ordered by id alone.
    func pagedAt(_ item: Paged<Item>) -> Date?
}

extension WorkSource {
    public var isQueue: Bool { false }

    public var readsAhead: Bool { false }

    public func release(page ids: [UUID], changed: Set<UUID>, failed: [(UUID, String)], run: RunContext) -> BatchWrites {
        BatchWrites()
    }

    public var claimLasts: TimeInterval? { nil }

    public func keep(
        page ids: [UUID], for duration: TimeInterval, left: Duration, run: RunContext,
        on connection: PostgresConnection
    ) async throws -> Set<UUID> {
        Set(ids)
    }

    public func nextDue(after instant: Date, request: PageRequest, on connection: PostgresConnection) async throws -> Date? { nil }

    public func pagedAt(_ item: Paged<Item>) -> Date? { nil }

    public func wasDue(_ item: Item, at instant: Date) -> Bool { true }

    public func lacksIndexRow(_ item: Item) -> Bool { false }

    public func scopeProblem(_ options: RunOptions) -> String? {
        options.sweep ? "--sweep is for the jobs that read through the due index" : nil
    }
}

/// One item of a page, or why it cannot be worked on.
public enum Paged<Item: Sendable>: Sendable {
    case item(UUID, Item)
    case unusable(UUID, String)

    public var id: UUID {
        switch self {
        case .item(let id, _), .unusable(let id, _): id
        }
    }
}

/// What a source needs to read its next page.
public struct PageRequest: Sendable {
    public let job: String
    public let runID: Int64
    /// The page's number in its run, across lanes.
    public let pageID: Int64
    /// The instant the page is read at: what is due is due by then.
    public let now: Date
    /// Keyset pages: the last id of the page before; nil for the first.
    public let after: UUID?
    /// Keyset pages of a source ordered by a time before its id: the last item's time as read
    /// (`WorkSource.pagedAt`); nil for the first page, a resumed run, or an item read unusable.
    public var afterTime: Date? = nil
    public var limit: Int
    public let shard: Shard
    /// `--user`: only these users (or only their items); empty for all.
    public let users: [UUID]
    /// A backfill's local days (`--date`, `--from/--to`); nil for a normal run.
    public let window: DayWindow?
    public let dryRun: Bool
    /// `--sweep`: every item, due or not (`RunOptions.sweep`).
    public var sweep = false
    public let logger: Logger
    /// Where a keyset page starts: after the last id of the page before, or from the first id.
    public var keysetStart: UUID { after ?? .allZeros }

    /// What names this page's claims (a queue): its run and number, so that a lane whose claim
    /// ran out can never write over, or release, the claim that replaced it.
    public var claim: Int64 { Self.claim(runID: runID, pageID: pageID) }

    static func claim(runID: Int64, pageID: Int64) -> Int64 { (runID << 24) | (pageID & 0xFF_FFFF) }

    /// The kill switch as a condition to put in the page's query: when the job is paused the page
    /// is empty, and the runner asks why. It costs no round trip of its own.
    public var notPaused: SQLFragment {
        "not exists (select 1 from job_pauses where job in (\(job), '*'))"
    }

    /// The condition that keeps the rows whose `column` (a user id) belongs to this run's shard: a
    /// range of ids, which an index on the column serves.
    public func inShard(_ column: String) -> SQLFragment {
        guard shard.count > 1 else { return "true" }
        guard let upper = shard.upperBound else { return "\(unescaped: column) >= \(shard.lowerBound)" }
        return "\(unescaped: column) >= \(shard.lowerBound) and \(unescaped: column) < \(upper)"
    }

    /// The number `query` (a source's `count(*)` of the run's items) answers.
    func count(_ query: SQLFragment, on connection: PostgresConnection) async throws -> Int {
        for try await count in try await connection.query(try query.query(), logger: logger).decode(Int.self) {
            return count
        }
        return 0
    }

    /// The condition that keeps the rows whose `column` is one of the `--user` ids, if any.
    public func forUsers(_ column: String) -> SQLFragment {
        guard !users.isEmpty else { return "true" }
        return "\(unescaped: column) = any(\(users)::uuid[])"
    }
}

extension UUID {
    /// The nil UUID, all zeros: below every other id, and a stand-in for "none" in a typed array.
    static let allZeros = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
}
