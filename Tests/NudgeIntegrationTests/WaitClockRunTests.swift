import Foundation
import NudgeCore
import NudgeStandIns
import PostgresNIO
import ServiceLifecycleTestKit
import Synchronization
import Testing

/// The runner's waits on a clock the test moves (`RunOptions.waitClock`): what it does at each
/// moment is checked without waiting for it, whatever the machine's load.
@Suite(.dropsItsDatabases) struct WaitClockRunTests {
    private static let now = "2026-03-20T12:00:00Z"

    /// Moves `clock` to each deadline a sleeper waits for, as soon as it waits: the run goes on
    /// at once, and its clock reads what it would have after the real waits.
    private static func advancing(_ clock: ManualWaitClock) -> Task<Void, Never> {
        Task {
            for await deadline in clock.sleepers {
                let now = clock.now()
                if deadline > now { clock.advance(by: deadline - now) }
            }
        }
    }

    /// A database of `count` users due for validate-streaks at `now`, and a clock for the run.
    private static func users(_ count: Int) async throws -> (TestDatabase, ManualWaitClock) {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: count, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        return (database, ManualWaitClock())
    }

    private static func run<J: Job>(
        _ job: J, clock: ManualWaitClock, on database: TestDatabase, concurrency: Int = 1, grace: Duration? = nil
    ) async throws -> RunSummary {
        try await database.withDatabase { db in
            var options = RunOptions(now: ISO8601DateFormatter().date(from: now)!, nowIsExplicit: true, batchSize: 5, concurrency: concurrency)
            options.waitClock = clock
            if let grace { options.shutdownGrace = grace }
            return try await JobRunner(job: job, options: options, database: db, observer: SilentObserver()).run()
        }
    }

    /// A job that calls out owes a pause after each batch's calls: the next batch's calls start
    /// once the pause has passed on the run's clock, measured from the end of the calls before.
    @Test func theNextBatchsCallsWaitOutThePauseOnTheRunsClock() async throws {
        let (database, clock) = try await Self.users(15)
        let advancing = Self.advancing(clock)
        defer { advancing.cancel() }
        let job = CallingOut(inner: ValidateStreaksJob(definition: streaksDefinition()), clock: clock, pause: .seconds(10))
        let summary = try await Self.run(job, clock: clock, on: database)
        #expect(summary.status == "succeeded", "\(summary)")
        #expect(summary.counts.succeeded == 15)
        // Three batches of five: their calls at 0 s, 10 s and 20 s on the run's clock, and the
        // runner slept until each of those instants.
        #expect(job.calls.all == [.zero, .seconds(10), .seconds(20)])
        #expect(clock.deadlines == [.seconds(10), .seconds(20)])
    }

    /// A batch's outside calls that go on past the job's bound for them all are stopped when the
    /// run's clock reaches it: the user whose call was under way fails with the reason; those
    /// whose calls had not started (`--concurrency` 1) are left to the next run as they were,
    /// nothing spent; no signal came, and the run is not called interrupted.
    @Test func outsideCallsPastTheirBoundFailTheirUsersWhenTheRunsClockReachesIt() async throws {
        let (database, clock) = try await Self.users(5)
        let advancing = Self.advancing(clock)
        defer { advancing.cancel() }
        let job = CallingOut(
            inner: ValidateStreaksJob(definition: streaksDefinition()), clock: clock, pause: .zero,
            limit: .seconds(30), hangs: true)
        let summary = try await Self.run(job, clock: clock, on: database)
        #expect(summary.status == "partial", "\(summary)")
        #expect(summary.counts.failed == 1 && summary.counts.skipped == 4, "\(summary.counts)")
        let reasons = try await database.psql("select reason from job_run_failures order by reason").split(separator: "\n")
        #expect(reasons.count == 5)
        #expect(reasons.count { $0 == "its outside calls took longer than the batch's 30.0 seconds" } == 1, "\(reasons)")
        #expect(
            reasons.count {
                $0 == "not done: its outside calls had not started when the batch's 30.0 seconds for them ran out; "
                    + "left to the next run"
            } == 4, "\(reasons)")
        #expect(clock.deadlines == [.seconds(30)])
        #expect(try await database.count("select count(*) from user_streaks") == 0)
    }

    /// A call that answers its cancellation with its result (its request had left) is settled by
    /// it; no call starts once the bound has passed: the others are left to the next run.
    @Test func noCallStartsOnceTheBoundHasPassed() async throws {
        let (database, clock) = try await Self.users(5)
        let advancing = Self.advancing(clock)
        defer { advancing.cancel() }
        let job = CallingOut(
            inner: ValidateStreaksJob(definition: streaksDefinition()), clock: clock, pause: .zero,
            limit: .seconds(30), hangs: true, answersWhenCancelled: true)
        let summary = try await Self.run(job, clock: clock, on: database)
        #expect(job.calls.started == 1)
        #expect(summary.counts.succeeded == 1 && summary.counts.skipped == 4 && summary.counts.failed == 0, "\(summary.counts)")
        #expect(try await database.count("select count(*) from user_streaks") == 1)
    }

    /// SIGTERM (a graceful shutdown) while calls hang: no new call starts, the calls in flight
    /// get the grace on the run's clock, no less (the run is still waiting a moment before it
    /// ends), and when it has passed they are cancelled and their users left to the next run;
    /// the run is interrupted.
    @Test func aSignalGivesTheCallsInFlightTheGraceOnTheRunsClock() async throws {
        let (database, clock) = try await Self.users(5)
        let job = CallingOut(
            inner: ValidateStreaksJob(definition: streaksDefinition()), clock: clock, pause: .zero, hangs: true)
        try await testGracefulShutdown { trigger in
            let run = Task { try await Self.run(job, clock: clock, on: database, concurrency: 3, grace: .seconds(20)) }
            try await until("three calls in flight", on: job.calls.changes) { job.calls.started == 3 }
            trigger.triggerGracefulShutdown()
            // The grace is the only wait: it starts when the signal comes, on the run's clock.
            let graceEnds = try await nextSleeper(of: clock)
            #expect(graceEnds == clock.now() + .seconds(20))
            clock.advance(by: .seconds(19))
            let early = try await ending(within: 1) { try await run.value }
            #expect(early == nil, "the run ended before its grace had passed")
            clock.advance(by: .seconds(1))
            let summary = try #require(try await ending { try await run.value }, "the run did not end once its grace had passed")
            #expect(summary.status == "interrupted", "\(summary)")
            #expect(job.calls.started == 3, "a call started after the signal")
            #expect(summary.counts.succeeded == 0 && summary.counts.skipped == 5, "\(summary.counts)")
        }
        #expect(try await database.count("select count(*) from user_streaks") == 0)
        #expect(
            try await database.count(
                "select count(*) from job_run_failures where reason like 'not done: the run was stopped by a signal%'") == 5)
    }
}

/// validate-streaks with an outside step: each batch's calls record when they began on the run's
/// clock, and either return at once or never (until cancelled).
private struct CallingOut: OutsideCalls {
    let inner: ValidateStreaksJob
    let clock: ManualWaitClock
    let pause: Duration
    var limit: Duration?
    var hangs = false
    /// Whether a hanging call answers its cancellation with its change, as a call whose request
    /// already left does (dispatch's), rather than with an error.
    var answersWhenCancelled = false
    /// When each batch's calls began.
    let calls = Calls()

    final class Calls: Sendable {
        private let state = Mutex<[Duration]>([])

        private let count = Mutex(0)

        /// One more for each call begun.
        let changes = Changes()

        /// Records `now` unless the batch's calls already did.
        func began(at now: Duration) {
            count.withLock { $0 += 1 }
            state.withLock { calls in if calls.last != now { calls.append(now) } }
            changes.changed()
        }

        var all: [Duration] { state.withLock { $0 } }

        /// How many calls began.
        var started: Int { count.withLock { $0 } }
    }

    var definition: JobDefinition { inner.definition }

    var source: DueSource { inner.source }

    var readStatements: Int { inner.readStatements }

    var outsideTimeLimit: Duration? { limit }

    func loadFacts(for users: [DueUser], run: RunContext, on connection: PostgresConnection) async throws -> [UUID: ValidateStreaksJob.Facts] {
        try await inner.loadFacts(for: users, run: run, on: connection)
    }

    func decide(for user: DueUser, facts: ValidateStreaksJob.Facts?, run: RunContext) throws -> Decision<ValidateStreaksJob.Change> {
        try inner.decide(for: user, facts: facts, run: run)
    }

    func complete(_ change: PlannedChange<ValidateStreaksJob.Change>, run: RunContext) async throws -> PlannedChange<ValidateStreaksJob.Change> {
        let now = clock.now()
        calls.began(at: now)
        if hangs {
            // Never answers: ends only when the runner cancels it (a real sleep, which the test's
            // clock does not end).
            if answersWhenCancelled {
                try? await Task.sleep(for: .seconds(3600))   // sleeps: a call that hangs
            } else {
                try await Task.sleep(for: .seconds(3600))   // sleeps: a call that hangs
            }
        }
        return change
    }

    func pause(after planned: [PlannedChange<ValidateStreaksJob.Change>]) -> Duration { pause }

    func writes(for changes: [PlannedChange<ValidateStreaksJob.Change>], run: RunContext) -> BatchWrites {
        inner.writes(for: changes, run: run)
    }
}
