import Foundation
import Testing

/// The goals a run leaves and the days it records, without the columns that depend on when and by which run they were
/// written, numbers without trailing zeros (-0.1 and -0.10 are the same goal).
private func goals(_ database: TestDatabase) async throws -> String {
    var parts: [String] = []
    for query in [
        """
        select user_id, date, goal_type, trim_scale(target_value), trim_scale(actual_value), completed
          from daily_goals order by 1, 2, 3
        """,
        """
        select user_id, week_start, goal_type, trim_scale(target_value), trim_scale(actual_value),
               (select coalesce(jsonb_object_agg(key, trim_scale(value::text::numeric)), '{}') from jsonb_each(daily_breakdown)),
               completed, fitcircle_id
          from weekly_goals order by 1, 2, 3
        """,
        "select user_id, local_day, outcome from job_work where job = 'generate-daily-goals' order by 1, 2",
    ] { parts.append(try await database.psql(query)) }
    return parts.joined(separator: "\n--\n")
}

/// Runs scripts/bench/goals-floor.sql, the same rules in SQL alone.
private func floor(_ database: TestDatabase, now: String, from: String = "", to: String = "") async throws {
    let result = try await database.runScript("scripts/bench/goals-floor.sql", variables: ["now": now, "from": from, "to": to])
    guard result.status == 0 else { throw TestFailure("goals-floor.sql failed: \(result.stderr)") }
}

@Suite(.dropsItsDatabases) struct GoalsJobTests {
    private let seedArguments = ["seed", "--users", "300", "--seed", "5", "--now", "2026-03-18T12:00:00Z"]

    @Test func afterOneRunExactlyTheUsersWhoseDayHasBegunHaveGoalsForItAndARerunChangesNothing() async throws {
        let database = try await TestDatabase.fresh()
        #expect(try await database.nudge(seedArguments).status == 0)
        // 02:00 UTC on the 19th: the 19th has begun from UTC eastwards, not in the Americas.
        let now = "2026-03-19T02:00:00Z"
        let first = try await database.nudge(["run", "generate-daily-goals", "--now", now])
        #expect(first.status == 0, "\(first.stderr)")
        let localToday = "('\(now)'::timestamptz at time zone coalesce(u.timezone, 'UTC'))::date"
        #expect(
            try await database.count(
                """
                select count(*) from users u
                 where not exists (select 1 from daily_goals g where g.user_id = u.id and g.date = \(localToday) and g.goal_type = 'steps')
                    or not exists (select 1 from daily_goals g where g.user_id = u.id and g.date = \(localToday) and g.goal_type = 'checkin')
                """) == 0)
        #expect(try await database.count("select count(*) from daily_goals g join users u on u.id = g.user_id where g.date > \(localToday)") == 0)
        #expect(try await database.count("select count(*) from daily_goals where date = '2026-03-19'") > 0)
        #expect(try await database.count("select count(*) from users u where \(localToday) = '2026-03-18'") > 0)
        // Yesterday is closed for everyone: no goal of a day that is over is left without its result.
        #expect(
            try await database.count(
                """
                select count(*) from daily_goals g join users u on u.id = g.user_id
                 where g.date = \(localToday) - 1 and g.goal_type in ('steps', 'checkin') and g.actual_value is null
                """) == 0)

        let before = try await database.dump(excluding: ["job_runs", "job_run_failures"])
        let second = try await database.nudge(["run", "generate-daily-goals", "--now", now, "--json"])
        #expect(second.status == 0)
        #expect(second.stdout.contains(#""succeeded":0"#), "\(second.stdout)")
        #expect(try await database.dump(excluding: ["job_runs", "job_run_failures"]) == before)
    }

    @Test func aFourteenDayBackfillGivesWhatTheRulesGiveComputedInSQLAlone() async throws {
        let job = try await TestDatabase.fresh()
        let independent = try await TestDatabase.fresh()
        for database in [job, independent] {
            #expect(try await database.nudge(seedArguments).status == 0)
            try await database.psql("delete from daily_goals; delete from weekly_goals")
        }
        let now = "2026-03-18T12:00:00Z"
        let from = "2026-03-04"
        let to = "2026-03-17"
        let run = try await job.nudge(["run", "generate-daily-goals", "--from", from, "--to", to, "--now", now])
        #expect(run.status == 0, "\(run.stderr)")
        try await floor(independent, now: now, from: from, to: to)

        let computed = try await goals(job)
        await #expect(computed == (try goals(independent)))
        // One set of goals per user-day: every user-day of the window since sign-up, steps and check-in each once.
        let userDays = try await job.count(
            """
            select count(*) from users u, generate_series('\(from)'::date, '\(to)'::date, '1 day') d
             where d::date >= (u.created_at at time zone coalesce(u.timezone, 'UTC'))::date
            """)
        #expect(userDays > 0)
        await #expect(try job.count("select count(*) from daily_goals where goal_type = 'steps'") == userDays)
        await #expect(try job.count("select count(*) from daily_goals where goal_type = 'checkin'") == userDays)
        await #expect(try job.count("select count(*) from daily_goals where goal_type = 'weight'") > 0)
        await #expect(try job.count("select count(*) from weekly_goals where fitcircle_id is not null") > 0)
        await #expect(try job.count("select count(*) from job_work where job = 'generate-daily-goals' and outcome = 'baseline'") > 0)

        // The same backfill again changes nothing.
        let again = try await job.nudge(["run", "generate-daily-goals", "--from", from, "--to", to, "--now", now])
        #expect(again.status == 0)
        await #expect(try goals(job) == computed)
    }

    /// A backfill whose window ends mid-week after that week was closed leaves the week as it is:
    /// its progress still counts every day of the week that is over.
    @Test func aBackfillEndingMidWeekLeavesAClosedWeekAlone() async throws {
        let database = try await TestDatabase.fresh()
        #expect(try await database.nudge(seedArguments).status == 0)
        let now = "2026-03-18T12:00:00Z"
        #expect(try await database.nudge(["run", "generate-daily-goals", "--from", "2026-03-02", "--to", "2026-03-17", "--now", now]).status == 0)
        let closed = try await goals(database)
        let backfill = try await database.nudge(["run", "generate-daily-goals", "--date", "2026-03-11", "--now", now, "--json"])
        #expect(backfill.status == 0, "\(backfill.stderr)")
        #expect(backfill.stdout.contains(#""succeeded":0"#), "\(backfill.stdout)")
        await #expect(try goals(database) == closed)
    }

    @Test func corruptTrackingGivesThatUserTheDefaultsWithAReasonAndLeavesTheOthersAlone() async throws {
        let clean = try await TestDatabase.fresh()
        let dirty = try await TestDatabase.fresh()
        for database in [clean, dirty] {
            try await Fixture.population(
                database, count: 24, zones: ["Europe/Paris", "America/New_York", nil],
                signup: "2026-02-01T12:00:00Z", from: "2026-02-01", to: "2026-03-10")
        }
        let negative = Fixture.userID(4)
        let zeroWeight = Fixture.userID(5)
        try await dirty.psql(
            """
            update daily_tracking set steps = -500 where user_id = '\(negative)' and date = '2026-03-08';
            update daily_tracking set weight = 0 where user_id = '\(zeroWeight)' and date = '2026-03-09';
            """)
        for database in [clean, dirty] {
            let result = try await database.nudge(["run", "generate-daily-goals", "--now", "2026-03-10T15:00:00Z"])
            #expect(result.status == 0, "\(result.stderr)")
        }
        for user in [negative, zeroWeight] {
            #expect(
                try await dirty.value(
                    """
                    select target_value from daily_goals where user_id = '\(user)' and date = '2026-03-10' and goal_type = 'steps'
                    """) == "7000")
            #expect(
                try await dirty.value(
                    """
                    select outcome from job_work where user_id = '\(user)' and local_day = '2026-03-10'
                    """) == "defaults")
        }
        #expect(
            try await dirty.value("select detail from job_work where user_id = '\(negative)' and local_day = '2026-03-10'")
                == "daily_tracking 2026-03-08: steps -500 is outside 0-150000")
        #expect(
            try await dirty.value("select detail from job_work where user_id = '\(zeroWeight)' and local_day = '2026-03-10'")
                == "daily_tracking 2026-03-09: weight 0.0 is outside 0-1500 lb")
        let others = "where user_id not in ('\(negative)', '\(zeroWeight)') order by 1, 2, 3"
        let query = "select user_id, date, goal_type, target_value, actual_value, completed from daily_goals \(others)"
        #expect(try await dirty.psql(query) == clean.psql(query))
        #expect(try await clean.count("select count(*) from job_work where outcome = 'baseline'") > 0)
    }
}
