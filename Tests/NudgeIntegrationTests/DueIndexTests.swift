import Foundation
import NudgeStandIns
import Testing

@testable import NudgeCore

private func at(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }

/// Rows read across the tables of the database, by PostgreSQL's own counters (as a finished
/// `nudge` process has flushed them): those of the data (`ledger: false`), or those of the run's
/// own ledger and the migrations' check (`ledger: true`), which read a few rows at any size
/// (here by sequential scans, the tables being tiny).
private func rowsRead(_ database: TestDatabase, ledger: Bool = false) async throws -> Int {
    try await database.othersEnded()
    return try await database.count(
        """
        select coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)::int8 from pg_stat_user_tables
         where (relname in ('job_runs', 'nudge_migrations')) = \(ledger)
        """)
}

private func summary(_ result: ProcessResult) throws -> [String: Any] {
    guard result.status == 0, let json = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
    else { throw TestFailure("run failed (\(result.status)): \(result.stderr)") }
    return json
}

/// Runs `job` in this process at `now`, as cron would start it (`sweep`: the weekly sweep).
private func run(
    _ name: String, _ database: TestDatabase, at now: Date, sweep: Bool = false,
    allowFailures: Bool = false
) async throws -> RunSummary {
    try await database.withDatabase { db in try await run(name, on: db, at: now, sweep: sweep, allowFailures: allowFailures) }
}

/// `run`, on a pool the caller keeps across runs (a scenario's thousands of ticks).
private func run(
    _ name: String, on db: Database, at now: Date, sweep: Bool = false,
    allowFailures: Bool = false
) async throws -> RunSummary {
    do {
        var options = RunOptions(now: now, nowIsExplicit: true, batchSize: 50)
        options.sweep = sweep
        let summary: RunSummary
        switch name {
        case "validate-streaks":
            summary = try await JobRunner(
                job: ValidateStreaksJob(definition: jobDefinition(name)), options: options, database: db,
                observer: SilentObserver()
            ).run()
        case "generate-daily-goals":
            summary = try await JobRunner(
                job: GenerateDailyGoalsJob(definition: jobDefinition(name)), options: options, database: db,
                observer: SilentObserver()
            ).run()
        case "weekly-digest":
            let job = WeeklyDigestJob(definition: jobDefinition(name), email: try testEmailSetup(DigestEmail.template))
            summary = try await JobRunner(job: job, options: options, database: db, observer: SilentObserver()).run()
        default:
            throw TestFailure("no such job in this test: \(name)")
        }
        guard summary.exitCode == 0 || (allowFailures && summary.exitCode == 3) else { throw TestFailure("\(name) at \(now): \(summary)") }
        return summary
    }
}

@Suite(.dropsItsDatabases) struct DueIndexTests {
    /// The issue's pair: each job that acts at a user's local moment runs at 12:00 UTC (every
    /// user is due once after the seed), then at 12:15, when no user's moment falls between the
    /// two: the second run reads nobody, and fewer rows, across all tables, than 1 % of the users.
    @Test func aQuarterHourWithNobodysMomentReadsNextToNothing() async throws {
        let database = try await TestDatabase.fresh()
        // (Enough users that the run's fixed reads, the ledger's and the migrations' check, are
        // below 1 % of them, as they are far below at a million.)
        let users = 5_000
        let seeded = try await database.nudge(["seed", "--users", "\(users)", "--seed", "11", "--now", "2026-03-21T00:00:00Z"])
        #expect(seeded.status == 0, "\(seeded.stderr)")
        let llm = try await StandInLLM.start { _ in
            (.reply(#"{"title": "Thinking of you", "body": "How is your week going? I'm here if you want to talk it through."}"#), .zero)
        }
        defer { Task { await llm.shutdown() } }
        let environment = [
            "PUSH_TRIGGER_ENABLED": "true", "ANTHROPIC_BASE_URL": llm.baseURL,
            "ANTHROPIC_API_KEY": "sk-ant-test-not-a-real-key", "NUDGE_LLM_REQUESTS_PER_MINUTE": "100000",
        ]
        .merging(digestEnvironment()) { $1 }
        for job in ["validate-streaks", "generate-daily-goals", "weekly-digest", "push-trigger"] {
            let first = try summary(
                try await database.nudge(
                    ["run", job, "--now", "2026-03-21T12:00:00Z", "--json"],
                    environment: environment))
            #expect((first["counts"] as? [String: Int])?["processed"] == users, "\(job): \(first)")
            let before = try await rowsRead(database)
            let ledgerBefore = try await rowsRead(database, ledger: true)
            let quiet = try summary(
                try await database.nudge(
                    ["run", job, "--now", "2026-03-21T12:15:00Z", "--json"],
                    environment: environment))
            let read = try await rowsRead(database) - before
            let ledgerRead = try await rowsRead(database, ledger: true) - ledgerBefore
            #expect((quiet["counts"] as? [String: Int])?["processed"] == 0, "\(job): \(quiet)")
            #expect(read < users / 100, "\(job) read \(read) rows at 12:15")
            #expect(ledgerRead < 100, "\(job)'s ledger read \(ledgerRead) rows at 12:15")
        }
    }

    /// Cron every 15 minutes across Europe's clock change (Sunday 29 March 2026, the digest's
    /// day too), with six hours of runs skipped and a user moving from New York to Tokyo
    /// mid-week, ends in the state of the same cron without the gap: every user-day settled
    /// once, every goal and digest once. The weekly sweep then finds nothing the index missed.
    @Test func cronAcrossAClockChangeWithAGapEndsAsWithoutItAndTheSweepFindsNothingMissed() async throws {
        let seed = ["seed", "--users", "300", "--seed", "29", "--now", "2026-03-27T12:00:00Z"]
        let steady = try await TestDatabase.fresh()
        let gapped = try await TestDatabase.fresh()
        #expect(try await steady.nudge(seed).status == 0)
        #expect(try await gapped.nudge(seed).status == 0)
        let mover = try await steady.value("select id from users where timezone = 'America/New_York' order by id limit 1")
        let moveAt = at("2026-03-29T15:00:00Z")
        let gap = at("2026-03-29T02:00:00Z")..<at("2026-03-29T08:00:00Z")

        for (database, skipping) in [(steady, false), (gapped, true)] {
            try await database.withDatabase { db in
                try await database.pinned { database in
                    var tick = at("2026-03-27T12:00:00Z")
                    var skipped = 0
                    while tick < at("2026-03-31T12:00:00Z") {
                        if tick == moveAt { try await database.psql("update users set timezone = 'Asia/Tokyo' where id = '\(mover)'") }
                        if !(skipping && gap.contains(tick)) {
                            for job in ["validate-streaks", "generate-daily-goals", "weekly-digest"] {
                                if try await database.anyoneDue(for: job, at: tick) {
                                    _ = try await run(job, on: db, at: tick)
                                } else {
                                    // One in eight of the runs skipped as reading nobody is run: it does read nobody.
                                    skipped += 1
                                    if skipped % 8 == 0 { #expect(try await run(job, on: db, at: tick).counts.processed == 0, "\(job) at \(tick)") }
                                }
                            }
                        }
                        tick = tick.addingTimeInterval(15 * 60)
                    }
                }
            }
        }
        // Every user-day settled once, every week digested once, the same in both.
        let settled = "select job, user_id, local_day, outcome from job_work order by 1, 2, 3"
        #expect(try await gapped.psql(settled) == steady.psql(settled))
        #expect(try await gapped.streakState() == steady.streakState())
        let queued = "select dedupe_key, deliver_after from notification_outbox order by 1"
        #expect(try await gapped.psql(queued) == steady.psql(queued))
        let goals = """
            select user_id, date, goal_type, target_value, actual_value, completed from daily_goals order by 1, 2, 3;
            select user_id, week_start, goal_type, target_value, actual_value, daily_breakdown, completed from weekly_goals order by 1, 2, 3
            """
        #expect(try await gapped.psql(goals) == steady.psql(goals))
        // Every user has each day's goals, once, through the last day begun.
        let missing = """
            select u.id, u.timezone, u.created_at from users u
             where not exists (select 1 from daily_goals g where g.user_id = u.id and g.goal_type = 'checkin'
                                 and g.date = (timestamptz '2026-03-31T11:45:00Z' at time zone coalesce(u.timezone, 'UTC'))::date)
            """
        let unplanned = try await steady.psql(missing)
        #expect(unplanned == "", "\(unplanned)")
        #expect(
            try await steady.count(
                """
                select count(*) from (select user_id, local_day from job_work where job = 'validate-streaks'
                                      group by 1, 2 having count(*) > 1) twice
                """) == 0)
        #expect(
            try await steady.count(
                """
                select count(*) from job_work where job = 'weekly-digest' and local_day = '2026-03-29'
                """) > 0)
        // The mover's days were settled in New York, then in Tokyo, none twice and none skipped.
        let moverDays = try await steady.psql(
            """
            select min(local_day), max(local_day), count(*), count(distinct local_day) from job_work
             where job = 'validate-streaks' and user_id = '\(mover)' and local_day >= '2026-03-27'
            """)
        #expect(moverDays == "2026-03-27|2026-03-30|4|4", "\(moverDays)")

        // The sweep reads everyone and finds nothing due that the index had not.
        for database in [steady, gapped] {
            for job in ["validate-streaks", "generate-daily-goals", "weekly-digest"] {
                let sweep = try await run(job, database, at: at("2026-03-31T12:05:00Z"), sweep: true)
                #expect(sweep.counts.processed == 300)
                #expect(sweep.tally["index_missed"] == nil, "\(job): \(sweep.tally)")
            }
        }
    }

    /// Steps synced after the user's midnight close their yesterday again at the next run; a
    /// check-in for today makes nobody due (today closes at the user's next midnight anyway).
    /// (The triggers read PostgreSQL's clock: this test runs at the real time, in a zone where it
    /// is about noon, so that no user's midnight passes while it runs.)
    @Test func lateStepsCloseYesterdayAgainAndTodaysCheckInsCostNothing() async throws {
        let database = try await TestDatabase.fresh()
        let now = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
        let hour = Calendar(identifier: .gregorian).dateComponents(in: TimeZone(identifier: "UTC")!, from: now).hour!
        let east = 12 - hour   // hours east of UTC where it is noon: -11 to 12
        let noon = east == 0 ? "Etc/UTC" : "Etc/GMT\(east > 0 ? "-" : "+")\(abs(east))"   // (the sign of Etc/GMT names is POSIX's, west positive)
        let days = DateFormatter()
        days.dateFormat = "yyyy-MM-dd"
        days.timeZone = TimeZone(identifier: "UTC")
        let signup = ISO8601DateFormatter().string(from: now.addingTimeInterval(-20 * 86_400))
        try await Fixture.population(
            database, count: 10, zones: [noon], signup: signup,
            from: days.string(from: now.addingTimeInterval(-21 * 86_400)),
            to: days.string(from: now.addingTimeInterval(-2 * 86_400)))
        _ = try await run("generate-daily-goals", database, at: now)
        let user = Fixture.userID(2)
        let local = "(now() at time zone (select coalesce(timezone, 'UTC') from users where id = '\(user)'))::date"
        try await database.psql(
            """
            insert into daily_tracking (user_id, date, steps) values ('\(user)', \(local), 4000)
            on conflict (user_id, date) do update set steps = 4000
            """)
        #expect(try await database.count("select count(*) from job_due where job = 'generate-daily-goals' and due_at <= now()") == 0)
        try await database.psql(
            """
            insert into daily_tracking (user_id, date, steps) values ('\(user)', \(local) - 1, 23456)
            on conflict (user_id, date) do update set steps = 23456
            """)
        let late = try await run("generate-daily-goals", database, at: now.addingTimeInterval(1))
        #expect(late.counts.processed == 1 && late.counts.succeeded == 1, "\(late)")
        #expect(
            try await database.value(
                """
                select actual_value::int from daily_goals where user_id = '\(user)' and date = \(local) - 1 and goal_type = 'steps'
                """) == "23456")
    }

    /// A user that fails every run is tried again an hour later, not every quarter hour, and is
    /// in the ledger once a day: the run's count still says they failed, `nudge runs --failures`
    /// says an earlier run of the day recorded why.
    @Test func aUserFailingEveryRunIsRecordedOnceADay() async throws {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 5, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        let mars = Fixture.userID(901)
        try await database.psql("insert into users (id, timezone, created_at) values ('\(mars)', 'Mars/Olympus', '2026-03-01T00:00:00Z')")
        var failedRuns = 0
        for now in ["2026-03-20T12:00:00Z", "2026-03-20T12:15:00Z", "2026-03-20T13:05:00Z", "2026-03-21T12:30:00Z"] {
            let summary = try await run("validate-streaks", database, at: at(now), allowFailures: true)
            failedRuns += summary.counts.failed
        }
        // Failed at 12:00, waited an hour (12:15 did not read them), failed at 13:05 and the next day.
        #expect(failedRuns == 3)
        #expect(
            try await database.psql(
                """
                select to_char(r.clock at time zone 'UTC', 'MM-DD HH24:MI') from job_run_failures f join job_runs r on r.id = f.run_id
                 where f.item_id = '\(mars)' order by r.clock
                """) == "03-20 12:00\n03-21 12:30")
        let thirteen = try await database.value("select id from job_runs where clock = '2026-03-20T13:05:00Z'")
        let listed = try await database.nudge(["runs", "--failures", thirteen])
        #expect(listed.stdout.contains("1 more failed as an earlier run of the day recorded"), "\(listed.stdout)")
    }

    /// An index that is wrong (a user's instant moved far away by hand) is what the sweep is
    /// for: the normal run does not see the user, the sweep settles them, counts the miss and
    /// says so in its last log line.
    @Test func theSweepFindsAndDoesWhatTheIndexMissed() async throws {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 20, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        #expect(try await database.nudge(["run", "validate-streaks", "--now", "2026-03-19T12:00:00Z"]).status == 0)
        let lost = Fixture.userID(3)
        try await database.psql("update job_due set due_at = '2099-01-01' where job = 'validate-streaks' and user_id = '\(lost)'")
        #expect(try await database.nudge(["run", "validate-streaks", "--now", "2026-03-20T12:00:00Z"]).status == 0)
        let settledThrough = "select settled_through from user_streaks where user_id = '\(lost)'"
        let behind = try await database.value(settledThrough)

        let sweep = try await database.nudge(["run", "validate-streaks", "--sweep", "--now", "2026-03-20T12:05:00Z", "--json"])
        let report = try summary(sweep)
        #expect((report["counts"] as? [String: Int])?["processed"] == 20)
        #expect((report["tally"] as? [String: Int])?["index_missed"] == 1)
        #expect(sweep.stderr.contains("sweep finished: the due index missed 1 users"), "\(sweep.stderr)")
        #expect(try await database.value(settledThrough) > behind)
        #expect(
            try await database.count(
                """
                select count(*) from job_due where job = 'validate-streaks' and user_id = '\(lost)' and due_at < '2099-01-01'
                """) == 1)
        // A sweep is for the jobs that read the index, and reads everyone at the run's instant.
        let misuse = try await database.nudge(["run", "validate-streaks", "--sweep", "--date", "2026-03-19"])
        #expect(misuse.status == 64)
        let other = try await database.nudge(["run", "dispatch", "--sweep", "--now", "2026-03-20T12:05:00Z"])
        #expect(other.status == 64, "\(other.stderr)")
    }
}
