import Foundation
import Testing

@Suite(.dropsItsDatabases) struct CommandLineTests {
    @Test func helpListAndRunsAreClear() async throws {
        let database = try await TestDatabase.fresh()
        let help = try await database.nudge(["--help"])
        #expect(help.status == 0)
        #expect(help.stdout.contains("Exit status: 0 success"))
        let list = try await database.nudge(["list"])
        #expect(list.status == 0)
        #expect(list.stdout.contains("validate-streaks       5,20,35,50 * * * *  00:05"))
        #expect(list.stdout.contains("generate-daily-goals   0,15,30,45 * * * *  00:00"))
        #expect(list.stdout.contains("preview-notifications  * * * * *           -"))
        #expect(list.stdout.contains("VALIDATE_STREAKS_ENABLED"))
        let disabled = try await database.nudge(["list"], environment: ["VALIDATE_STREAKS_ENABLED": "false"])
        #expect(disabled.stdout.contains("no (VALIDATE_STREAKS_ENABLED)"))
        let runs = try await database.nudge(["runs"])
        #expect(runs.status == 0)
        #expect(runs.stdout.contains("no runs yet"))
    }

    @Test(arguments: [
        (["run", "no-such-job"], "unknown job 'no-such-job'"),
        (["run", "validate-streaks", "--date", "2026-02-30"], "--date must be a real day"),
        (["run", "validate-streaks", "--from", "2026-03-10"], "--from and --to go together"),
        (["run", "validate-streaks", "--from", "2026-03-10", "--to", "2026-03-01"], "is after --to"),
        (["run", "validate-streaks", "--date", "2026-03-10", "--from", "2026-03-01", "--to", "2026-03-02"], "cannot be combined"),
        (["run", "validate-streaks", "--shard", "2/2"], "--shard must be i/n"),
        (["run", "validate-streaks", "--user", "not-a-uuid"], "--user must be a uuid"),
        (["run", "validate-streaks", "--now", "yesterday"], "--now must be an ISO 8601 instant"),
        (["run", "validate-streaks", "--batch-size", "0"], "--batch-size must be between"),
        (["run", "validate-streaks", "--user", "6f1c0000-0000-0000-0000-000000000000"], "no user with id"),
        (["pause", "no-such-job"], "unknown job"),
        (["frobnicate"], "Unexpected argument"),
    ])
    func badValuesAreUsageErrors(_ arguments: [String], _ message: String) async throws {
        let database = try await TestDatabase.fresh()
        let result = try await database.nudge(arguments)
        #expect(result.status == 64, "\(arguments): \(result.stderr)")
        #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
    }

    @Test func anUnreachableDatabaseExitsOneWithAClearMessage() async throws {
        let database = try await TestDatabase.fresh()
        let result = try await database.nudge(
            ["run", "validate-streaks"],
            environment: [
                "DATABASE_URL": "postgres://nudge:hunter2@localhost/nudge?host=/nonexistent&port=5999"
            ])
        #expect(result.status == 1)
        #expect(result.stderr.contains("cannot reach the database at nudge@/nonexistent/.s.PGSQL.5999/nudge"))
        #expect(!result.stderr.contains("hunter2"))
        #expect(result.seconds < 15)
        let missing = try await database.nudge(["migrate"], environment: ["DATABASE_URL": ""])
        #expect(missing.status == 1)
        #expect(missing.stderr.contains("DATABASE_URL is not set"))
    }

    @Test func cronGetsJSONLogLinesWithTheRunAndUser() async throws {
        let database = try await TestDatabase.fresh()
        try await database.psql("insert into users (id, timezone, created_at) values ('\(Fixture.userID(1))', 'Mars/Olympus', '2026-03-01T00:00:00Z')")
        let result = try await database.nudge(["run", "validate-streaks", "--now", "2026-03-05T00:00:00Z"])
        #expect(result.status == 3)
        let lines = result.stderr.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: String]
        }
        let failure = try #require(lines.first { $0["msg"] == "user failed" })
        #expect(failure["nudge.user_id"] == Fixture.userID(1))
        #expect(failure["nudge.job"] == "validate-streaks")
        #expect(failure["nudge.batch"] == "1")
        #expect(failure["nudge.run_id"] != nil)
    }
}

@Suite(.dropsItsDatabases) struct OutputTests {
    /// `nudge run … --json | head` closes the pipe early: the output stops, the run does not.
    @Test func aReaderThatClosesThePipeEndsTheOutputNotTheRun() async throws {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 300, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        var environment = database.nudgeEnvironment([:])
        environment["NUDGE_LOG_LEVEL"] = "error"
        let shell =
            "\(NudgeBinary.path) run validate-streaks --now 2026-03-20T12:00:00Z --dry-run --json --batch-size 5 | head -c 100 >/dev/null; exit ${PIPESTATUS[0]}"
        let result = try await runProcessOffThePool("/bin/bash", ["-c", shell], environment: environment)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(!result.stderr.contains("Fatal error"))
        #expect(try await database.psql("select status, processed from job_runs") == "succeeded|300")
    }

    @Test func failuresOfARunThatDoesNotExistIsAUsageError() async throws {
        let database = try await TestDatabase.fresh()
        let result = try await database.nudge(["runs", "--failures", "4242"])
        #expect(result.status == 64)
        #expect(result.stderr.contains("there is no run 4242"))
    }
}
