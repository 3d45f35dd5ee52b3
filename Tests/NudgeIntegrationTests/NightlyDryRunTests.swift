import Foundation
import NudgeCore
import Testing

/// CI's nightly dry run (docs/operations.md, "The nightly dry run"): every enabled job against a
/// copy of the data, one report, nothing written or sent, a status that fails the build when a job
/// is broken.
@Suite(.dropsItsDatabases) struct NightlyDryRunTests {
    private let arguments = ["run", "--all", "--dry-run", "--json", "--now", "2026-03-20T10:30:00Z"]
    private let environment = ["PUSH_TRIGGER_ENABLED": "true"].merging(digestEnvironment()) { _, new in new }

    private func report(_ result: ProcessResult) throws -> (exitCode: Int, jobs: [String: [String: Any]]) {
        let object = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], "\(result.stdout)")
        let jobs = try #require(object["jobs"] as? [[String: Any]])
        #expect(object["dry_run"] as? Bool == true)
        return (
            try #require(object["exit_code"] as? Int),
            Dictionary(uniqueKeysWithValues: jobs.map { ($0["job"] as! String, $0) })
        )
    }

    @Test func everyJobRunsChangingNothingAndABrokenJobFailsTheNight() async throws {
        let database = try await TestDatabase.fresh()
        let seeded = try await database.nudge(["seed", "--users", "300", "--seed", "3", "--now", "2026-03-20T00:00:00Z"])
        #expect(seeded.status == 0, "\(seeded.stderr)")
        let ledger: Set<String> = ["job_runs", "job_run_failures"]
        let before = try await database.dump(excluding: ledger)
        // The jobs every user is due for once after a seed: those it gives a row of the due index.
        let indexed = Set(try await database.psql("select distinct job from job_due").split(separator: "\n").map(String.init))
        #expect(indexed.isSuperset(of: ["validate-streaks", "generate-daily-goals", "weekly-digest", "push-trigger", "reminders"]))

        let night = try await database.nudge(arguments, environment: environment)
        #expect(night.status == 0, "\(night.stderr)")
        let (exitCode, jobs) = try report(night)
        #expect(exitCode == 0)
        #expect(Set(jobs.keys) == JobRegistry.names)
        for (name, job) in jobs {
            #expect(job["dry_run"] as? Bool == true, "\(name)")
            // dispatch meets the users with notifications due, leaderboard-refresh the running
            // circles, preview-notifications the calls coming up, prune chunks of old rows; the
            // jobs of the due index every user (each is due once after a seed).
            if indexed.contains(name) { #expect((job["counts"] as? [String: Int])?["processed"] == 300, "\(name)") }
            #expect(job["status"] as? String == "succeeded", "\(name)")
        }
        // What would have changed is in the report; nothing changed.
        #expect(((jobs["generate-daily-goals"]?["counts"] as? [String: Int])?["succeeded"] ?? 0) > 0)
        #expect(((jobs["leaderboard-refresh"]?["counts"] as? [String: Int])?["succeeded"] ?? 0) > 0)
        #expect(try await database.dump(excluding: ledger) == before)
        #expect(try await database.psql("select distinct dry_run from job_runs") == "t")

        // A job that cannot read its data is broken: the night fails, the report says which and why,
        // and the other jobs still ran.
        try await database.psql("alter table user_badges rename to user_badges_away")
        let broken = try await database.nudge(arguments, environment: environment)
        try await database.psql("alter table user_badges_away rename to user_badges")
        #expect(broken.status == 1, "\(broken.stderr)")
        let (brokenCode, brokenJobs) = try report(broken)
        #expect(brokenCode == 1)
        #expect(brokenJobs["validate-streaks"]?["exit_code"] as? Int == 1)
        #expect((brokenJobs["validate-streaks"]?["message"] as? String)?.contains("user_badges") == true, "\(brokenJobs)")
        #expect(brokenJobs["generate-daily-goals"]?["exit_code"] as? Int == 0)
        #expect(brokenJobs["push-trigger"]?["exit_code"] as? Int == 0)
        #expect(brokenJobs["dispatch"]?["exit_code"] as? Int == 0)
        #expect(brokenJobs["leaderboard-refresh"]?["exit_code"] as? Int == 0)

        // Users failing with bad data fail the night too (exit 3), each with the reason.
        try await database.psql("update users set timezone = 'Mars/Olympus' where id = (select id from users order by id limit 1)")
        let partial = try await database.nudge(arguments, environment: environment)
        #expect(partial.status == 3, "\(partial.stderr)")
        let failures = try #require(try report(partial).jobs["validate-streaks"]?["failures"] as? [[String: Any]])
        #expect(failures.first?["reason"] as? String == "the user's unknown time zone 'Mars/Olympus'")
    }

    @Test func theShippedWorkflowIsAGitHubActionsWorkflowThatRunsIt() async throws {
        let workflow = packageRoot.appendingPathComponent("deploy/ci/nightly-dry-run.yml").path
        let result = try await runProcessOffThePool("/usr/bin/env", ["check-jsonschema", "--builtin-schema", "vendor.github-workflows", workflow])
        #expect(result.status == 0, "check-jsonschema: \(result.stdout)\(result.stderr) (scripts/test installs it from PyPI)")
        let text = try String(contentsOfFile: workflow, encoding: .utf8)
        #expect(text.contains("nudge run --all --dry-run --json"))
        #expect(text.contains("schedule:"))
    }
}
