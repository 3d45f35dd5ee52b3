import Foundation
import Testing

@testable import NudgeCore

private func at(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }

/// prune as jobs/prune.json defines it, but with every table kept only as long as its readers
/// allow: the most a configuration can take away.
private func shortestPrune() throws -> PruneJob {
    let shipped = jobDefinition("prune")
    let shortest = Dictionary(uniqueKeysWithValues: RetentionRule.all.map { ($0.table, $0.minimumDays) })
    let definition = JobDefinition(
        name: shipped.name, summary: shipped.summary, schedule: shipped.schedule, localTime: nil,
        retentionDays: shortest, killSwitch: shipped.killSwitch, enabledByDefault: true, batchSize: 500)
    return try PruneJob(definition: definition)
}

private func prune(_ database: TestDatabase, at now: Date, dryRun: Bool = false) async throws -> RunSummary {
    let job = try shortestPrune()
    return try await database.withDatabase { db in
        let options = RunOptions(now: now, nowIsExplicit: true, batchSize: 500, dryRun: dryRun)
        return try await JobRunner(job: job, options: options, database: db, observer: SilentObserver()).run()
    }
}

/// The jobs that read what prune deletes, each run as cron would start it at `now` (on `db`, the
/// scenario's pool; a job that reads the due index only when someone is due for it).
private func cronTick(_ database: TestDatabase, on db: Database, at now: Date) async throws {
    let options = RunOptions(now: now, nowIsExplicit: true, batchSize: 50)
    func run(_ job: some Job) async throws {
        let summary = try await JobRunner(job: job, options: options, database: db, observer: SilentObserver()).run()
        if summary.exitCode != 0 { throw TestFailure("\(summary.job) at \(now): \(summary)") }
    }
    let jobs: [any Job] = [
        ValidateStreaksJob(definition: jobDefinition("validate-streaks")),
        GenerateDailyGoalsJob(definition: jobDefinition("generate-daily-goals")),
        WeeklyDigestJob(definition: jobDefinition("weekly-digest"), email: try testEmailSetup(DigestEmail.template)),
        RemindersJob(definition: jobDefinition("reminders"), email: try testEmailSetup(ReminderEmail.template)),
    ]
    for job in jobs where try await database.anyoneDue(for: job.definition.name, at: now) {
        try await run(job)
    }
    try await run(LeaderboardRefreshJob(definition: jobDefinition("leaderboard-refresh")))
}

@Suite(.dropsItsDatabases) struct PruneTests {
    /// A week of cron, prune (every table at the shortest age its readers allow), another week:
    /// the second week decides exactly as in a copy that was never pruned.
    @Test func aWeekOfCronThenPruneThenAnotherWeekDecidesAsIfNothingHadBeenPruned() async throws {
        let kept = try await TestDatabase.fresh()
        let seeded = try await kept.nudge(["seed", "--users", "200", "--seed", "17", "--now", "2026-03-09T00:00:00Z"])
        #expect(seeded.status == 0, "\(seeded.stderr)")
        try await kept.withDatabase { db in
            try await kept.pinned { kept in
                var tick = at("2026-03-09T00:00:00Z")
                while tick < at("2026-03-16T00:00:00Z") {
                    try await cronTick(kept, on: db, at: tick)
                    tick = tick.addingTimeInterval(3600)
                }
            }
        }
        let pruned = try await kept.clone()
        let before = try await pruned.count("select count(*) from notification_logs") + pruned.count("select count(*) from notification_outbox")
        let run = try await prune(pruned, at: at("2026-03-16T00:30:00Z"))
        #expect(run.exitCode == 0, "\(run)")
        // It did prune: the seed's logs go back months. (The seed's outbox rows and leaderboards are
        // recent; the chunk test below prunes those tables.)
        for table in ["notification_logs", "push_log"] {
            #expect((run.tally["pruned:\(table)"] ?? 0) > 0, "\(table): \(run.tally)")
        }
        #expect(try await pruned.count("select count(*) from notification_logs") + pruned.count("select count(*) from notification_outbox") < before)

        for database in [kept, pruned] {
            try await database.withDatabase { db in
                try await database.pinned { database in
                    var tick = at("2026-03-16T01:00:00Z")
                    while tick < at("2026-03-23T01:00:00Z") {
                        try await cronTick(database, on: db, at: tick)
                        tick = tick.addingTimeInterval(3600)
                    }
                }
            }
        }
        // What the second week decided, in both.
        for query in [
            "select job, user_id, local_day, outcome, detail from job_work where local_day >= '2026-03-15' order by 1, 2, 3",
            "select dedupe_key, deliver_after, title, body, payload from notification_outbox where local_day >= '2026-03-15' order by 1",
            "select user_id, current_streak, longest_streak, last_checkin_date, settled_through, missed_days from user_streaks order by 1",
            "select user_id, badge, earned_at from user_badges order by 1, 2",
            "select user_id, date, goal_type, target_value, actual_value, completed from daily_goals where date >= '2026-03-15' order by 1, 2, 3",
            "select user_id, week_start, goal_type, target_value, actual_value, completed from weekly_goals where week_start >= '2026-03-09' order by 1, 2, 3",
            """
            select fitcircle_id, user_id, period, period_start, metric_value, rank, rank_change from fitcircle_leaderboard_entries
             where period_start >= '2026-03-14' or period <> 'daily' order by 1, 2, 3, 4
            """,
            "select user_id, fitcircle_id, percent, outcome from reminder_milestones order by 1, 2, 3",
        ] {
            #expect(try await pruned.psql(query) == kept.psql(query), "\(query)")
        }
    }

    /// Chunks of at most the batch size; a notification still on its way, a running run and the
    /// run a later one resumed are never pruned; a dry run deletes nothing; a second run finds
    /// nothing left.
    @Test func prunesInBoundedChunksAndOnlyWhatMayGo() async throws {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 3, signup: "2025-01-01T00:00:00Z", from: "2025-01-01", to: "2025-01-02")
        let user = Fixture.userID(1)
        try await database.psql(
            """
            insert into notification_logs (user_id, notification_type, channel, status, created_at)
            select '\(user)', 'daily_checkin', 'push', 'sent', timestamptz '2025-01-01' + n * interval '1 minute'
              from generate_series(1, 1800) n;
            insert into notification_logs (user_id, notification_type, channel, status, created_at)
            values ('\(user)', 'daily_checkin', 'push', 'sent', '2026-03-15');
            insert into notification_outbox (dedupe_key, job, user_id, local_day, notification_type, deliver_after, status,
                                             next_attempt_at, created_at)
            values ('old-sent', 'reminders', '\(user)', '2025-01-01', 'daily_checkin', '2025-01-01', 'sent', 'infinity', '2025-01-01'),
                   ('old-pending', 'reminders', '\(user)', '2025-01-01', 'daily_checkin', '2025-01-01', 'pending', null, '2025-01-01');
            insert into fitcircles (id, name, challenge_type, starts_on, ends_on)
            select md5('circle' || n)::uuid, 'Circle ' || n, 'steps', '2024-12-01', '2025-01-31' from generate_series(1, 400) n;
            insert into fitcircle_leaderboard_entries (fitcircle_id, user_id, period, period_start, metric_type, metric_value, rank)
            select c.id, u.id, 'daily', '2025-01-01', 'steps', 1000, 1 from fitcircles c cross join users u;
            insert into fitcircle_leaderboard_entries (fitcircle_id, user_id, period, period_start, metric_type, metric_value, rank)
            select c.id, u.id, 'weekly', '2024-12-30', 'steps', 7000, 1 from fitcircles c cross join users u;
            insert into job_runs (job, scope_key, clock, host, pid, started_at, ended_at, status)
            values ('validate-streaks', 'x', '2024-01-01', 'h', 1, '2024-01-01', '2024-01-01', 'succeeded'),
                   ('validate-streaks', 'x', '2024-01-01', 'h', 1, '2024-01-02', null, 'running'),
                   ('validate-streaks', 'x', '2024-01-01', 'h', 1, '2024-01-03', '2024-01-03', 'interrupted');
            insert into job_runs (job, scope_key, clock, host, pid, started_at, ended_at, status, resumed_from)
            select 'validate-streaks', 'x', '2026-03-01', 'h', 1, '2026-03-15', '2026-03-15', 'succeeded', max(id)
              from job_runs where status = 'interrupted';
            """)
        let dry = try await prune(database, at: at("2026-03-20T03:40:00Z"), dryRun: true)
        #expect(dry.exitCode == 0, "\(dry)")
        #expect(dry.tally["pruned:notification_logs"] == 1800)
        #expect(try await database.count("select count(*) from notification_logs") == 1801)

        let real = try await prune(database, at: at("2026-03-20T03:40:00Z"))
        #expect(real.exitCode == 0, "\(real)")
        #expect(real.tally["pruned:notification_logs"] == 1800)
        // 1,800 logs in chunks of at most 500: four chunks, each its own batch; the 1,200 daily
        // entries of one day, three chunks (a day's rows are many: they are split by their id);
        // the weekly entries stay.
        #expect(real.tally["pruned:fitcircle_leaderboard_entries"] == 1200)
        #expect(try await database.value("select processed from job_runs where job = 'prune' and not dry_run") == "9")
        #expect(try await database.value("select string_agg(distinct period, ',') from fitcircle_leaderboard_entries") == "weekly")
        #expect(try await database.value("select created_at::date from notification_logs") == "2026-03-15")
        #expect(try await database.psql("select dedupe_key from notification_outbox order by 1") == "old-pending")
        #expect(
            try await database.psql(
                """
                select status from job_runs where job = 'validate-streaks' order by started_at
                """) == "running\ninterrupted\nsucceeded")

        let again = try await prune(database, at: at("2026-03-20T03:45:00Z"))
        #expect(again.counts.processed == 0, "\(again)")
    }

    /// prune's command line: it runs over whole tables, and its ages are checked when the job
    /// definitions are read.
    @Test func pruneRefusesWhatItCannotDo() async throws {
        let database = try await TestDatabase.fresh()
        let shard = try await database.nudge(["run", "prune", "--shard", "0/2", "--now", "2026-03-20T03:40:00Z"])
        #expect(shard.status == 64, "\(shard.stderr)")
        #expect(shard.stderr.contains("prune runs over whole tables"), "\(shard.stderr)")
        #expect(throws: NudgeError.self) { try RetentionRule.configured(["job_work": 400]) }
        var days = Dictionary(uniqueKeysWithValues: RetentionRule.all.map { ($0.table, 90) })
        days["job_work"] = 30
        #expect(throws: NudgeError.self) { try RetentionRule.configured(days) }
        days["job_work"] = 400
        days["users"] = 1
        #expect(throws: NudgeError.self) { try RetentionRule.configured(days) }
    }
}
