import Foundation
import Logging
import PostgresNIO
import Testing

@testable import NudgeCore

private let now = "2026-03-20T12:00:00Z"

@Suite(.dropsItsDatabases) struct KillSwitchTests {
    @Test(arguments: [["NUDGE_ENABLED": "false"], ["VALIDATE_STREAKS_ENABLED": "false"], ["VALIDATE_STREAKS_ENABLED": "0"]])
    func anEnvironmentKillSwitchChangesNoRowAtAll(_ environment: [String: String]) async throws {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 20, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        let before = try await database.dump()
        let result = try await database.nudge(["run", "validate-streaks", "--now", now], environment: environment)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("not run"))
        #expect(try await database.dump() == before)
    }

    @Test func nudgePauseChangesNoRowAndResumeRestarts() async throws {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 20, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        #expect(try await database.nudge(["pause", "validate-streaks", "--reason", "bad copy"]).status == 0)
        let before = try await database.dump()
        let paused = try await database.nudge(["run", "validate-streaks", "--now", now])
        #expect(paused.status == 0)
        #expect(paused.stdout.contains("validate-streaks is paused by"))
        #expect(paused.stdout.contains("(bad copy)"))
        #expect(try await database.dump() == before)
        #expect(try await database.nudge(["runs"]).stdout.contains("PAUSED: validate-streaks"))
        #expect(try await database.nudge(["resume", "validate-streaks"]).status == 0)
        let resumed = try await database.nudge(["run", "validate-streaks", "--now", now])
        #expect(resumed.status == 0)
        #expect(try await database.count("select count(*) from user_streaks") == 20)
    }

    /// `nudge pause` is checked before every batch: a running job stops within one batch.
    @Test func aPauseStopsARunningJobBeforeItsNextBatch() async throws {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 30, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        let summary = try await database.withDatabase { db in
            let job = PausingAfterFirstBatch(inner: ValidateStreaksJob(definition: streaksDefinition()))
            let options = RunOptions(now: ISO8601DateFormatter().date(from: now)!, nowIsExplicit: true, batchSize: 5)
            return try await JobRunner(job: job, options: options, database: db, observer: SilentObserver()).run()
        }
        #expect(summary.status == "paused")
        #expect(summary.exitCode == 0)
        #expect(summary.counts.processed == 5)
        #expect(try await database.count("select count(*) from user_streaks") == 5)
        #expect(try await database.value("select status from job_runs") == "paused")
    }

    /// A run paused after a batch in which a user failed still exits 3: monitoring must see it.
    @Test func aPausedRunWithFailedUsersExitsThree() async throws {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 30, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        // The user with the lowest id, so in the first batch, has a zone nobody knows.
        try await database.psql("update users set timezone = 'Mars/Olympus' where id = (select id from users order by id limit 1)")
        let summary = try await database.withDatabase { db in
            let job = PausingAfterFirstBatch(inner: ValidateStreaksJob(definition: streaksDefinition()))
            let options = RunOptions(now: ISO8601DateFormatter().date(from: now)!, nowIsExplicit: true, batchSize: 5)
            return try await JobRunner(job: job, options: options, database: db, observer: SilentObserver()).run()
        }
        #expect(summary.status == "paused")
        #expect(summary.counts.failed == 1)
        #expect(summary.exitCode == 3)
    }
}

func streaksDefinition() -> JobDefinition {
    try! JobCatalog(directory: packageRoot.appendingPathComponent("jobs")).definition(named: "validate-streaks")!
}

/// validate-streaks, with an operator who runs `nudge pause` while the first batch is deciding.
struct PausingAfterFirstBatch: Job {
    let inner: ValidateStreaksJob
    var definition: JobDefinition { inner.definition }

    var source: DueSource { inner.source }

    func loadFacts(for users: [DueUser], run: RunContext, on connection: PostgresConnection) async throws -> [UUID: ValidateStreaksJob.Facts] {
        try await connection.query(
            "insert into job_pauses (job, paused_by) values ('validate-streaks', 'test') on conflict do nothing",
            logger: run.logger)
        return try await inner.loadFacts(for: users, run: run, on: connection)
    }

    func decide(for user: DueUser, facts: ValidateStreaksJob.Facts?, run: RunContext) throws -> Decision<ValidateStreaksJob.Change> {
        try inner.decide(for: user, facts: facts, run: run)
    }

    func writes(for changes: [PlannedChange<ValidateStreaksJob.Change>], run: RunContext) -> BatchWrites {
        inner.writes(for: changes, run: run)
    }
}

@Suite(.dropsItsDatabases) struct LockTests {
    /// Holds the run lock of a job and shard from another session, as a running job would.
    private func holdingLock(of shard: Shard, in database: TestDatabase, _ body: @escaping @Sendable () async throws -> Void) async throws {
        let key = RunLocks.jobKey("validate-streaks")
        try await database.withDatabase { db in
            try await db.client.withConnection { connection in
                for try await conflict in try await connection.query(
                    "select nudge_try_run_lock(\(key), \(Int32(shard.index)), \(Int32(shard.count)))", logger: db.logger
                ).decode(String?.self) {
                    guard conflict == nil else { throw TestFailure("the lock of \(shard) is taken: \(conflict!)") }
                }
                let release = {
                    try await connection.query(
                        "select nudge_release_run_lock(\(key), \(Int32(shard.index)), \(Int32(shard.count)))",
                        logger: db.logger)
                }
                do {
                    try await body()
                } catch {
                    _ = try? await release()
                    throw error
                }
                _ = try await release()
            }
        }
    }

    @Test func aSecondRunOfTheSameJobExits75AtOnce() async throws {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 10, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        try await holdingLock(of: .whole, in: database) {
            let result = try await database.nudge(["run", "validate-streaks", "--now", now])
            #expect(result.status == 75, "\(result.stderr)")
            #expect(result.stderr.contains("another run of validate-streaks (shard 0/1) holds the lock"))
            #expect(result.seconds < 10)
            #expect(try await database.count("select count(*) from user_streaks") == 0)
        }
    }

    /// An unsharded run and `--shard 0/4` would work on the same users: whichever comes second
    /// exits 75, and so do two shard counts that overlap (`0/2` and `0/4`).
    @Test func runsOverOverlappingUsersExcludeEachOther() async throws {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 10, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        try await holdingLock(of: .whole, in: database) {
            let sharded = try await database.nudge(["run", "validate-streaks", "--now", now, "--shard", "0/4"])
            #expect(sharded.status == 75, "\(sharded.stderr)")
            #expect(sharded.stderr.contains("a run of validate-streaks over overlapping users (another shard count) holds the lock"))
        }
        try await holdingLock(of: try Shard("3/4"), in: database) {
            let unsharded = try await database.nudge(["run", "validate-streaks", "--now", now])
            #expect(unsharded.status == 75, "\(unsharded.stderr)")
            let otherCount = try await database.nudge(["run", "validate-streaks", "--now", now, "--shard", "1/2"])
            #expect(otherCount.status == 75, "\(otherCount.stderr)")
            let sameCount = try await database.nudge(["run", "validate-streaks", "--now", now, "--shard", "0/4"])
            #expect(sameCount.status == 0, "\(sameCount.stderr)")
        }
        #expect(try await database.count("select count(*) from job_runs where shard_count <> 4") == 0)
    }

    @Test func differentShardsRunSideBySide() async throws {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 40, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        try await holdingLock(of: try Shard("0/2"), in: database) {
            let other = try await database.nudge(["run", "validate-streaks", "--now", now, "--shard", "1/2"])
            #expect(other.status == 0, "\(other.stderr)")
            let same = try await database.nudge(["run", "validate-streaks", "--now", now, "--shard", "0/2"])
            #expect(same.status == 75)
        }
        // Two shards started together cover every user once.
        let database2 = try await TestDatabase.fresh()
        try await Fixture.population(database2, count: 40, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        let shards = try (0..<2).map { try database2.startNudge(["run", "validate-streaks", "--now", now, "--shard", "\($0)/2", "--batch-size", "3"]) }
        for shard in shards {
            let result = await shard.finished()
            #expect(result.status == 0, "\(result.stderr)")
        }
        #expect(try await database2.count("select count(*) from user_streaks") == 40)
        #expect(try await database2.count("select sum(processed) from job_runs") == 40)
    }
}

@Suite(.dropsItsDatabases) struct InterruptionTests {
    private func populated() async throws -> TestDatabase {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 600, signup: "2026-02-01T00:00:00Z", from: "2026-01-31", to: "2026-03-20")
        return database
    }

    private static let arguments = ["run", "validate-streaks", "--now", now, "--batch-size", "2"]

    @Test(arguments: [SIGKILL, SIGTERM])
    func aStoppedRunResumedEndsAsOneUninterruptedRun(_ signal: Int32) async throws {
        let reference = try await populated()
        #expect(try await reference.nudge(Self.arguments).status == 0)

        let database = try await populated()
        let running = try database.startNudge(Self.arguments)
        // Stopped as soon as a checkpoint is recorded, with most of the run still to go.
        let stopper = try await atFirstCheckpoint(of: database, run: #"kill -"$2" "$3""#, "\(signal)", "\(running.pid)")
        #expect(stopper.status == 0, "the run was not stopped at its first checkpoint: \(stopper.stderr)")
        let stopped = await running.finished()
        if signal == SIGTERM {
            #expect(stopped.status == 1)
            #expect(try await database.value("select status from job_runs") == "interrupted")
        }
        let interrupted = try await database.count("select processed from job_runs")
        #expect(interrupted < 600, "the run finished before it could be stopped")

        let resumed = try await database.nudge(Self.arguments)
        #expect(resumed.status == 0, "\(resumed.stderr)")
        #expect(try await database.value("select resumed_from is not null from job_runs order by id desc limit 1") == "t")
        #expect(try await database.value("select status from job_runs order by id limit 1") == "interrupted")
        // The resumed run did only the users still due: no user twice (each user-day has one work
        // mark, as in the reference), none lost. A killed run's counts lag its batches by up to a
        // second (its progress is written once a second); a stopped one records them exactly.
        let resumedCount = try await database.count("select processed from job_runs order by id desc limit 1")
        if signal == SIGTERM {
            #expect(resumedCount == 600 - interrupted)
        } else {
            #expect(resumedCount <= 600 - interrupted && resumedCount > 0)
        }
        #expect(try await database.streakState() == reference.streakState())
    }
}

@Suite(.dropsItsDatabases) struct DatabaseLossTests {
    /// The server stops answering mid-run (its processes frozen: the sockets stay open, nothing
    /// comes back, as on a network partition). The run ends with exit 1 within its bound, never
    /// a hang; the next run resumes after the checkpoint and ends as one uninterrupted run would.
    /// (The time limit only stops a hang: started beside every other suite on a busy machine,
    /// it has taken over three minutes.)
    @Test(.timeLimit(.minutes(10))) func aDatabaseThatStopsAnsweringEndsTheRunAndTheNextResumes() async throws {
        let arguments = ["run", "validate-streaks", "--now", now, "--batch-size", "2"]
        let environment = ["NUDGE_DB_STATEMENT_TIMEOUT_SECONDS": "2"]
        let users = 1_000
        let reference = try await TestDatabase.fresh()
        try await Fixture.population(reference, count: users, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        #expect(try await reference.nudge(arguments, environment: environment).status == 0)

        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: users, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        let running = try database.startNudge(arguments, environment: environment)
        // Frozen as soon as a checkpoint is recorded (for the next run to resume from), with most
        // of the run still to go.
        let frozenBy = try await atFirstCheckpoint(
            of: database,
            run: """
                pids=$(psql -XAtq "$1" -c "select pid from pg_stat_activity where datname = current_database() and application_name = 'nudge run validate-streaks'")
                for pid in $pids; do kill -STOP "$pid"; done
                echo $pids
                """)
        let backends = frozenBy.stdout.split(whereSeparator: \.isWhitespace).compactMap { Int32($0) }
        #expect(!backends.isEmpty, "the run ended before it was frozen: \(frozenBy.stderr)")
        // A run that has not ended within the tests' budget hangs: killed, so that the test fails
        // rather than waits with it. That it ended by its own bound, not by chance, its message says.
        let ended = await running.endsWithinTheBudget()
        let stopped = await running.finished()
        for pid in backends { kill(pid, SIGCONT) }
        #expect(ended, "the run had not ended \(Int(TestBudget.seconds)) s after its database stopped answering: \(stopped.stderr)")
        #expect(stopped.status == 1, "\(stopped.stderr)")
        // The bound: the statement timeout (per statement of the batch's read) and ten seconds.
        #expect(stopped.stderr.contains("the database did not answer within 1"), "\(stopped.stderr)")
        #expect(try await database.value("select status from job_runs") == "aborted")
        #expect(try await database.count("select processed from job_runs") < users)

        // The frozen sessions end (their client is gone), and with them the run's lock; so does
        // any other the run had opened.
        try await processesEnded(backends, "the frozen sessions of the run to end")
        let others = try await database.psql(
            "select pid from pg_stat_activity where datname = current_database() and application_name like 'nudge%'"
        ).split(whereSeparator: \.isWhitespace).compactMap { Int32($0) }
        try await processesEnded(others, "the run's other sessions to end")
        #expect(
            try await database.count(
                """
                select count(*) from pg_stat_activity where datname = current_database() and application_name like 'nudge%'
                """) == 0)
        let resumed = try await database.nudge(arguments, environment: environment)
        #expect(resumed.status == 0, "\(resumed.stderr)")
        #expect(try await database.value("select resumed_from is not null from job_runs order by id desc limit 1") == "t")
        #expect(try await database.streakState() == reference.streakState())
    }
}

/// Runs the shell `command` (with the database's URL as `$1`, then `arguments`) as soon as the
/// database's run records its first checkpoint, from a shell of its own: polled from the test
/// process, whose threads other suites' psql calls may hold for seconds, a run could end before
/// it was seen. Exit status 1 when no checkpoint comes within two minutes.
func atFirstCheckpoint(of database: TestDatabase, run command: String, _ arguments: String...) async throws -> ProcessResult {
    let script = """
        deadline=$((SECONDS + 120))
        until [ "$(psql -XAtq "$1" -c 'select coalesce(max(processed), 0) > 0 from job_runs')" = t ]; do
          [ $SECONDS -lt $deadline ] || exit 1
          sleep 0.02
        done
        \(command)
        """
    return try await runProcessOffThePool("/bin/bash", ["-c", script, "at-first-checkpoint", database.url] + arguments)
}
