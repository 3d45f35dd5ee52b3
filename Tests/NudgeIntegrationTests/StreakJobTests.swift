import Foundation
import Logging
import Testing

@testable import NudgeCore

@Suite(.dropsItsDatabases) struct DryRunTests {
    @Test func aDryRunLeavesEveryTableButTheLedgerUnchanged() async throws {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 120, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        try await database.psql("insert into users (id, timezone, created_at) values ('\(Fixture.userID(999))', 'Mars/Olympus', '2026-03-01T00:00:00Z')")
        let ledger: Set<String> = ["job_runs", "job_run_failures"]
        let before = try await database.dump(excluding: ledger)
        let result = try await database.nudge(["run", "validate-streaks", "--now", "2026-03-20T12:00:00Z", "--dry-run", "--json"])
        #expect(result.status == 3, "\(result.stderr)")
        #expect(try await database.dump(excluding: ledger) == before)
        #expect(try await database.value("select dry_run from job_runs") == "t")

        // The report says what would have changed, user by user.
        let report = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        let decisions = try #require(report["decisions"] as? [[String: Any]])
        #expect(decisions.count == 121)
        #expect(decisions.filter { $0["outcome"] as? String == "changed" }.count == 120)
        let summary = try #require(report["summary"] as? [String: Any])
        let tally = try #require(summary["tally"] as? [String: Int])
        #expect((tally["checked_in"] ?? 0) > 0)

        // The same run for real does what the dry run said.
        let real = try await database.nudge(["run", "validate-streaks", "--now", "2026-03-20T12:00:00Z", "--json"])
        let realSummary = try #require(try JSONSerialization.jsonObject(with: Data(real.stdout.utf8)) as? [String: Any])
        #expect(realSummary["tally"] as? [String: Int] == tally)
    }
}

@Suite(.dropsItsDatabases) struct ScheduleTests {
    /// Cron may run the job every hour, every 20 minutes or twice in the same minute, across the
    /// daylight-saving changes of both hemispheres (the US on 8 March, Europe on 29 March,
    /// Australia and Lord Howe on 5 April): every schedule ends in the same state.
    @Test func everyScheduleAcrossDaylightSavingEndsInTheSameState() async throws {
        // The three weekends of clock changes; between them every schedule catches up the same way.
        let weekends = ["2026-03-07T00:00:00Z", "2026-03-28T00:00:00Z", "2026-04-04T00:00:00Z"]
            .map { ISO8601DateFormatter().date(from: $0)! }
        let schedules: [(String, [Int])] = [("hourly", [7]), ("every 20 minutes", [5, 25, 45]), ("twice an hour", [0, 0, 30])]
        let states = try await withThrowingTaskGroup(of: (String, String, Int).self) { group in
            for (name, minutes) in schedules {
                group.addTask {
                    let database = try await TestDatabase.fresh()
                    try await Fixture.population(database, count: 36, signup: "2026-03-05T12:00:00Z", from: "2026-03-05", to: "2026-04-08")
                    try await database.withDatabase { db in
                        for hour in weekends.flatMap({ start in (0..<72).map { start.addingTimeInterval(Double($0) * 3600) } }) {
                            for minute in minutes {
                                let options = RunOptions(now: hour.addingTimeInterval(Double(minute) * 60), nowIsExplicit: true, batchSize: 50)
                                let summary = try await JobRunner(
                                    job: ValidateStreaksJob(definition: streaksDefinition()),
                                    options: options, database: db, observer: SilentObserver()
                                ).run()
                                guard summary.exitCode == 0 else { throw TestFailure("\(name): run failed: \(summary)") }
                            }
                        }
                    }
                    return (name, try await database.streakState(), try await database.count("select count(*) from job_work"))
                }
            }
            var states: [(String, String, Int)] = []
            for try await state in group { states.append(state) }
            return states
        }
        let reference = try #require(states.first)
        for state in states.dropFirst() {
            #expect(state.1 == reference.1, "\(state.0) and \(reference.0) differ")
        }
        // Each user-day settled exactly once: 36 users, from their local sign-up day to the last ended day.
        #expect(reference.2 >= 36 * 31)
        for state in states { #expect(state.2 == reference.2) }
    }
}

@Suite(.dropsItsDatabases) struct BadDataTests {
    @Test func badUsersAreSkippedWithTheirReasonAndTheOthersEndAsIfTheyWereNotThere() async throws {
        let now = "2026-03-20T12:00:00Z"
        let clean = try await TestDatabase.fresh()
        try await Fixture.population(clean, count: 60, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        #expect(try await clean.nudge(["run", "validate-streaks", "--now", now]).status == 0)

        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 60, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        let mars = Fixture.userID(901)
        let corrupt = Fixture.userID(902)
        let impossible = Fixture.userID(903)
        let zeroWeight = Fixture.userID(904)
        try await database.psql(
            """
            insert into users (id, timezone, created_at) values
              ('\(mars)', 'Mars/Olympus', '2026-03-01T00:00:00Z'), ('\(corrupt)', 'Europe/Paris', '2026-03-01T00:00:00Z'),
              ('\(impossible)', 'Asia/Kolkata', '2026-03-01T00:00:00Z'), ('\(zeroWeight)', null, '2026-03-01T00:00:00Z');
            insert into user_streaks (user_id, current_streak, longest_streak, settled_through) values ('\(corrupt)', 12, 4, '2026-03-10');
            insert into daily_tracking (user_id, date, mood, energy, steps) values ('\(impossible)', '2026-03-14', 3, 4, -200);
            insert into daily_tracking (user_id, date, mood, energy, weight) values ('\(zeroWeight)', '2026-03-16', 3, 4, 0);
            """)
        let result = try await database.nudge(["run", "validate-streaks", "--now", now])
        #expect(result.status == 3)
        #expect(result.stdout.contains("4 failed"))
        let reasons = try await database.psql("select item_id || ' ' || reason from job_run_failures order by item_id")
        #expect(reasons.contains("\(mars) the user's unknown time zone 'Mars/Olympus'"))
        #expect(reasons.contains("\(corrupt) user_streaks row is inconsistent: longest_streak 4 is below current_streak 12"))
        #expect(reasons.contains("\(impossible) daily_tracking 2026-03-14: steps -200 is outside 0-150000"))
        #expect(reasons.contains("\(zeroWeight) daily_tracking 2026-03-16: weight 0.0 is outside 0-1500 lb"))
        #expect(try await database.value("select status from job_runs") == "partial")

        // Nothing was written for the bad users, and everyone else is exactly as in the clean run.
        try await database.psql("delete from users where id in ('\(mars)', '\(corrupt)', '\(impossible)', '\(zeroWeight)')")
        #expect(try await database.streakState() == clean.streakState())
    }

    /// A value the decoder cannot read ('infinity', a NULL the job needs, a sign-up at
    /// -infinity) fails its user alone with the reason, run after run; the 50 others of the batch
    /// are settled each time as if the bad rows were not there.
    @Test func unreadableRowsFailTheirUserAloneRunAfterRun() async throws {
        let clean = try await TestDatabase.fresh()
        try await Fixture.population(clean, count: 50, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-21")
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 50, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-21")
        // Ids that sort first and among the others, so that they share a batch with good users.
        let infinite = "00000000-0000-4000-8000-000000000001"
        let weekless = "7fffffff-0000-4000-8000-000000000002"
        let unborn = "bfffffff-0000-4000-8000-000000000003"
        try await database.psql(
            """
            insert into users (id, timezone, created_at) values
              ('\(infinite)', 'Europe/Paris', '2026-03-01T00:00:00Z'), ('\(weekless)', 'Japan', '2026-03-01T00:00:00Z'),
              ('\(unborn)', 'GMT', '-infinity');
            insert into user_streaks (user_id, current_streak, longest_streak, last_checkin_date, settled_through)
            values ('\(infinite)', 3, 3, 'infinity', '2026-03-15');
            insert into user_streaks (user_id, current_streak, longest_streak, week_start_date, settled_through)
            values ('\(weekless)', 0, 0, '-infinity', '2026-03-15');
            """)
        for (day, now) in [("2026-03-19", "2026-03-20T12:00:00Z"), ("2026-03-20", "2026-03-21T12:00:00Z")] {
            #expect(try await clean.nudge(["run", "validate-streaks", "--now", now]).status == 0)
            let result = try await database.nudge(["run", "validate-streaks", "--now", now])
            #expect(result.status == 3, "\(result.stderr)")
            #expect(result.stdout.contains("3 failed"), "\(result.stdout)")
            let reasons = try await database.psql(
                """
                select item_id || ' ' || reason from job_run_failures where run_id = (select max(id) from job_runs) order by 1
                """)
            #expect(
                reasons.contains("\(infinite) cannot read the user's rows: unreadable row: column last_checkin_date holds a DATE value"),
                "\(reasons)")
            #expect(
                reasons.contains("\(weekless) cannot read the user's rows: unreadable row: column week_start_date holds a DATE value"),
                "\(reasons)")
            #expect(reasons.contains("\(unborn) users.created_at is not a sign-up time"), "\(reasons)")
            #expect(
                try await database.count(
                    """
                    select count(*) from user_streaks where user_id not in ('\(infinite)', '\(weekless)') and settled_through >= '\(day)'
                    """) == 50)
        }
        try await database.psql("delete from users where id in ('\(infinite)', '\(weekless)', '\(unborn)')")
        #expect(try await database.streakState() == clean.streakState())
    }

    /// A column of another type than Nudge reads is the schema, not a row: the run aborts with
    /// the reason instead of failing every user one by one.
    @Test func aChangedColumnTypeAbortsTheRunInsteadOfFailingEveryone() async throws {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 20, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        try await database.psql(
            """
            insert into user_streaks (user_id, current_streak, longest_streak, settled_through)
            select id, 1, 1, '2026-03-10' from users;
            alter table user_streaks alter column current_streak type text using current_streak::text
            """)
        let result = try await database.nudge(["run", "validate-streaks", "--now", "2026-03-20T12:00:00Z"])
        #expect(result.status == 1, "\(result.stderr)")
        #expect(result.stderr.contains("column current_streak is of type TEXT"), "\(result.stderr)")
        #expect(try await database.value("select status from job_runs") == "aborted")
        #expect(try await database.count("select count(*) from job_run_failures") == 0)
    }

    /// Every user of a batch failing the same way on the user-by-user retry (an app's trigger
    /// that refuses every write) is the run's trouble, not theirs: it aborts with its checkpoint.
    @Test func aWriteThatFailsForEveryUserTheSameWayAbortsTheRun() async throws {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 30, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        try await database.psql(
            """
            create function refuse_all() returns trigger language plpgsql as $$
            begin raise exception 'user_streaks is read-only during the migration'; end $$;
            create trigger refuse_all before insert on user_streaks for each row execute function refuse_all();
            """)
        let result = try await database.nudge(["run", "validate-streaks", "--now", "2026-03-20T12:00:00Z", "--batch-size", "10"])
        #expect(result.status == 1, "\(result.stderr)")
        #expect(result.stderr.contains("every user of the batch failed to write the same way"), "\(result.stderr)")
        #expect(try await database.value("select status || ' ' || processed from job_runs") == "aborted 0")
    }

    /// Bad values stay their users' failures however many share a batch: a full batch of them
    /// fails those users, and the run goes on to the next batch.
    @Test func aBatchOfBadValuesFailsItsUsersAndTheRunGoesOn() async throws {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 24, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        try await database.psql(
            """
            insert into user_streaks (user_id, current_streak, longest_streak, last_checkin_date, settled_through)
            select id, 1, 1, 'infinity', '2026-03-10' from users order by id limit 12
            """)
        let result = try await database.nudge(["run", "validate-streaks", "--now", "2026-03-20T12:00:00Z", "--batch-size", "12"])
        #expect(result.status == 3, "\(result.stderr)")
        #expect(try await database.psql("select status || ' ' || failed || ' ' || succeeded from job_runs") == "partial 12 12")
    }

    /// A batch whose write fails is retried user by user: only the guilty user fails.
    @Test func aFailingWriteFailsOnlyTheUserItBelongsTo() async throws {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 30, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        let guilty = Fixture.userID(7)
        try await database.psql(
            """
            create function refuse_guilty() returns trigger language plpgsql as $$
            begin raise exception 'streak rows of this user are frozen by support'; end $$;
            create trigger refuse_guilty before insert on user_streaks for each row
              when (new.user_id = '\(guilty)') execute function refuse_guilty();
            """)
        let result = try await database.nudge(["run", "validate-streaks", "--now", "2026-03-20T12:00:00Z"])
        #expect(result.status == 3)
        #expect(try await database.count("select count(*) from user_streaks") == 29)
        #expect(try await database.value("select reason from job_run_failures") == "database: streak rows of this user are frozen by support")
        #expect(try await database.count("select count(*) from job_work where user_id = '\(guilty)'") == 0)
    }
}

@Suite(.dropsItsDatabases) struct FirstRunTests {
    /// Nudge's first run on a database the app has filled for a year: each user's streak starts
    /// from at most 7 days back (catchUpDays), never from sign-up, and the history before is taken
    /// as it stands, with no badges or notifications about it.
    @Test func aFirstRunSettlesAtMostSevenDaysOfUnsettledHistory() async throws {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 24, signup: "2025-03-20T00:00:00Z", from: "2025-03-19", to: "2026-03-20")
        // One user's row the app keeps itself, without settled_through: its streak stands.
        let appKept = Fixture.userID(5)
        try await database.psql(
            """
            insert into user_streaks (user_id, current_streak, longest_streak, last_checkin_date)
            values ('\(appKept)', 40, 90, '2025-06-01')
            """)
        let result = try await database.nudge(["run", "validate-streaks", "--now", "2026-03-20T12:00:00Z"])
        #expect(result.status == 0, "\(result.stderr)")
        // Exactly the last 7 local days that have ended, per user, whatever their zone.
        #expect(
            try await database.psql(
                """
                select distinct count(*), max(local_day) - min(local_day) from job_work group by user_id
                """) == "7|6")
        #expect(try await database.count("select count(*) from job_work where local_day < '2026-03-13'") == 0)
        // No badge for a streak of more than the 7 days it saw, no notification about older days.
        #expect(try await database.count("select count(*) from user_badges where badge <> 'week_warrior'") == 0)
        #expect(try await database.count("select count(*) from notification_outbox where local_day < '2026-03-18'") == 0)
        // The app's own row kept its history: the longest streak stands, the current one went on from it.
        #expect(try await database.count("select longest_streak from user_streaks where user_id = '\(appKept)'") >= 90)
        #expect(try await database.value("select settled_through >= '2026-03-19' from user_streaks where user_id = '\(appKept)'") == "t")
    }
}

extension FirstRunTests {
    /// A backfill names where a never-settled user's history starts: its first day, not
    /// catchUpDays before its last.
    @Test func aBackfillOfNeverSettledUsersSettlesItsWholeWindow() async throws {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 12, signup: "2025-06-01T00:00:00Z", from: "2025-05-31", to: "2026-03-20")
        let result = try await database.nudge([
            "run", "validate-streaks", "--now", "2026-03-20T12:00:00Z",
            "--from", "2026-01-01", "--to", "2026-02-28",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(
            try await database.psql("select distinct count(*) || ' ' || min(local_day) || ' ' || max(local_day) from job_work group by user_id")
                == "59 2026-01-01 2026-02-28")
        #expect(try await database.psql("select distinct settled_through from user_streaks") == "2026-02-28")
    }
}

@Suite(.dropsItsDatabases) struct ScopeTests {
    private let now = "2026-03-20T12:00:00Z"

    private func populated() async throws -> TestDatabase {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 40, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        return database
    }

    @Test func userLimitsTheRunToThoseUsers() async throws {
        let database = try await populated()
        let result = try await database.nudge(["run", "validate-streaks", "--now", now, "--user", Fixture.userID(3), "--user", Fixture.userID(9)])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(
            try await database.psql("select user_id from user_streaks order by 1") == [Fixture.userID(3), Fixture.userID(9)].sorted().joined(separator: "\n"))
    }

    @Test func dateAndFromToSettleThoseDaysAndNoOthers() async throws {
        let database = try await populated()
        // Users in Kiritimati (UTC+14) and Pago Pago (UTC-11) sign up on different local days:
        // settle everyone's first days through 2026-03-05, then one more day with --date.
        let first = try await database.nudge(["run", "validate-streaks", "--now", now, "--from", "2026-02-28", "--to", "2026-03-05"])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(try await database.value("select max(settled_through) from user_streaks") == "2026-03-05")
        let oneDay = try await database.nudge(["run", "validate-streaks", "--now", now, "--date", "2026-03-06"])
        #expect(oneDay.status == 0)
        #expect(try await database.psql("select distinct settled_through from user_streaks") == "2026-03-06")
        #expect(try await database.count("select count(*) from job_work where local_day > '2026-03-06'") == 0)
        // Again: nothing to do, nothing written twice.
        let again = try await database.nudge(["run", "validate-streaks", "--now", now, "--date", "2026-03-06"])
        #expect(again.stdout.contains("0 changed"))
        // A backfill that skips unsettled days says where to start.
        let gap = try await database.nudge(["run", "validate-streaks", "--now", now, "--date", "2026-03-10"])
        #expect(gap.status == 3)
        #expect(
            try await database.value("select reason from job_run_failures limit 1")
                == "days 2026-03-07 to 2026-03-09 are not settled yet; backfill from 2026-03-07")
    }

    @Test func shardsSplitTheUsersIntoRangesOfTheirIds() async throws {
        let database = try await populated()
        for index in 0..<3 {
            let result = try await database.nudge(["run", "validate-streaks", "--now", now, "--shard", "\(index)/3"])
            #expect(result.status == 0)
            let mine = try await database.count(
                """
                select count(*) from user_streaks
                 where ('x' || left(user_id::text, 8))::bit(32)::bigint * 3 / 4294967296 <> \(index)
                   and updated_at = (select clock from job_runs order by id desc limit 1)
                   and user_id not in (select user_id from job_work w join job_runs r on r.id = w.run_id where r.shard_index <> \(index))
                """)
            #expect(mine == 0)
        }
        #expect(try await database.count("select count(*) from user_streaks") == 40)
        let perShard = try await database.psql("select processed from job_runs order by id").split(separator: "\n").compactMap { Int($0) }
        #expect(perShard.reduce(0, +) == 40)
        #expect(perShard.allSatisfy { $0 > 0 })
    }
}
