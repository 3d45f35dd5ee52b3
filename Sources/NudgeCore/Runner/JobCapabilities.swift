import Foundation
import PostgresNIO

// What a job may do besides its core (`Job`), each opted in to by conforming: the runner finds a
// job's capabilities once, when its run begins (`JobCapabilities`), and a job that conforms to
// none is paged, decided and written, nothing more.

/// A job whose decided changes call outside services between the decision and the batch's write
/// (push-trigger's LLM copy; dispatch's providers). Such a job's batches wait for the disk when
/// they commit: its write records what a provider or the LLM already did. A job without it may
/// commit without waiting (`synchronous_commit = off`): every state it writes is compare-and-set
/// (a user's instant, `settled_through`, a goal that exists, a work mark), so the batches a crash
/// loses are decided again by the next run, their outbox rows with them, before dispatch saw them.
public protocol OutsideCalls: Job {
    /// Whether this run makes the calls (dispatch: not on a dry run, which sends nothing).
    var callsOutside: Bool { get }

    /// Carries out the part of a decided change that needs an outside service, for up to
    /// `--concurrency` items of a batch at once. A thrown error fails this item alone; a
    /// `UserSkip` skips it with its reason; a `RunStop` leaves it undone and ends the run after
    /// this batch.
    func complete(_ change: PlannedChange<Change>, run: RunContext) async throws -> PlannedChange<Change>

    /// Outside calls the batch's items make together, once each item's own are done (dispatch:
    /// the batch's emails in Resend's batch requests). Each of its waits has its own bound.
    func completeTogether(_ changes: [PlannedChange<Change>], run: RunContext) async -> [PlannedChange<Change>]

    /// The batch's changes once every outside call of the batch ended, before they are written:
    /// for a job whose reading of one answer depends on what the whole batch learnt (dispatch: a
    /// provider found down late in the batch). Pure.
    func review(_ changes: [PlannedChange<Change>], run: RunContext) -> [PlannedChange<Change>]

    /// How long the runner leaves between one batch's outside calls and the next batch's, after
    /// the batch's `planned` changes went to `complete` (push-trigger: 100 ms per 50 users,
    /// owed in proportion to the users the batch sent to the LLM, docs/jobs/push-trigger.md).
    func pause(after planned: [PlannedChange<Change>]) -> Duration

    /// How long a batch's outside calls may take all together, when the job's calls leave part
    /// of their own bound to the runner (dispatch: a provider that stalls after its answer's
    /// head); nil when each call bounds itself. The items still at work then fail with the reason.
    var outsideTimeLimit: Duration? { get }
}

extension OutsideCalls {
    public var callsOutside: Bool { true }

    public func completeTogether(_ changes: [PlannedChange<Change>], run: RunContext) async -> [PlannedChange<Change>] {
        changes
    }

    public func review(_ changes: [PlannedChange<Change>], run: RunContext) -> [PlannedChange<Change>] { changes }

    public func pause(after planned: [PlannedChange<Change>]) -> Duration { .zero }

    public var outsideTimeLimit: Duration? { nil }
}

/// A job that keeps state beside its batches' writes: after each batch (push-trigger's LLM
/// usage), or shared with its other runs (dispatch: the providers' health and their probes).
/// None of it ever blocks or undoes a batch's write; its errors are logged and the run goes on.
public protocol Bookkeeping: Job {
    /// How many statements `afterBatch` or `tend` sends one after the other at most.
    var bookkeepingStatements: Int { get }

    /// After each batch's write. Returns what to add to the run's tally.
    func afterBatch(run: RunContext, on connection: PostgresConnection) async throws -> [String: Int]

    /// State the job shares with its other runs, kept while no batch is at work: called before a
    /// run's first page and, for a queue, about every second while it waits for the next item.
    func tend(run: RunContext, on connection: PostgresConnection) async throws

    /// Outside calls the shared state asks for, made after each `tend`, outside the bound of its
    /// statements (dispatch: the harmless probes of providers found down, which its `tend`
    /// claimed). Each of its waits has its own bound; it never fails the run. True when they
    /// learnt something `tend` should write at once: the runner then calls `tend` again.
    func tendOutside(run: RunContext) async -> Bool
}

extension Bookkeeping {
    public var bookkeepingStatements: Int { readStatements }

    public func afterBatch(run: RunContext, on connection: PostgresConnection) async throws -> [String: Int] { [:] }

    public func tend(run: RunContext, on connection: PostgresConnection) async throws {}

    public func tendOutside(run: RunContext) async -> Bool { false }
}

/// A job with something of its own to report about a run besides the runner's counts.
public protocol RunReports: Job {
    /// A configuration error the job met on its way without stopping (dispatch: a provider
    /// paused for the rest of the run): the run goes to its end, then reports it and exits 1.
    var runProblem: String? { get }

    /// What the run's summary should say besides its counts, from its tally (dispatch: which
    /// providers are not configured, and how many notifications wait for them).
    func summaryNote(tally: [String: Int]) -> String?

    /// Gauges of the job's own for the run's metrics textfile (`NUDGE_METRICS_DIR`), beside the
    /// runner's: asked once, at the end of a run that is not a dry run, with at most one bounded
    /// statement on the run's connection (dispatch: each provider's state and the notifications
    /// parked for it, docs/jobs/dispatch.md). Its error is logged and the run's own metrics are
    /// written without them.
    func runMetrics(run: RunContext, on connection: PostgresConnection) async throws -> [RunMetric]
}

extension RunReports {
    public var runProblem: String? { nil }

    public func summaryNote(tally: [String: Int]) -> String? { nil }

    public func runMetrics(run: RunContext, on connection: PostgresConnection) async throws -> [RunMetric] { [] }
}

/// The capabilities a run's job opted in to, found once when the run begins.
struct JobCapabilities<J: Job>: Sendable {
    /// The job's outside calls, typed with its own changes; nil when the job makes none in this run.
    let outside: Outside?
    let bookkeeping: (any Bookkeeping)?
    let reports: (any RunReports)?

    struct Outside: Sendable {
        let complete: @Sendable (PlannedChange<J.Change>, RunContext) async throws -> PlannedChange<J.Change>
        let completeTogether: @Sendable ([PlannedChange<J.Change>], RunContext) async -> [PlannedChange<J.Change>]
        let review: @Sendable ([PlannedChange<J.Change>], RunContext) -> [PlannedChange<J.Change>]
        let pause: @Sendable ([PlannedChange<J.Change>]) -> Duration
        let timeLimit: Duration?
    }

    init(_ job: J) {
        outside = (job as? any OutsideCalls).flatMap { Self.outside(of: $0) }
        bookkeeping = job as? any Bookkeeping
        reports = job as? any RunReports
    }

    /// The capability's calls, typed with the opened job's changes. The opened job is `J` itself,
    /// so the one cast below is from a type to the same type and never fails.
    private static func outside<O: OutsideCalls>(of job: O) -> Outside? {
        guard job.callsOutside else { return nil }
        let calls = JobCapabilities<O>.Outside(
            complete: { try await job.complete($0, run: $1) },
            completeTogether: { await job.completeTogether($0, run: $1) },
            review: { job.review($0, run: $1) },
            pause: { job.pause(after: $0) },
            timeLimit: job.outsideTimeLimit)
        guard let typed = (calls as Any) as? Outside else { preconditionFailure("a job opened as itself changed its type") }
        return typed
    }

    /// Whether the job's batches commit without waiting for the disk (`OutsideCalls`).
    var commitsAsynchronously: Bool { outside == nil }
}
