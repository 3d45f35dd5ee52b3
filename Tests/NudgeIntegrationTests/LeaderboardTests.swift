import Foundation
import Testing

@testable import NudgeCore

/// leaderboard-refresh against a real PostgreSQL, through the built binary.
extension TestDatabase {
    /// Runs leaderboard-refresh at `now` and returns its summary's tally.
    @discardableResult
    func refreshLeaderboards(_ now: String, _ extra: [String] = []) async throws -> [String: Int] {
        let result = try await nudge(["run", "leaderboard-refresh", "--now", now, "--json"] + extra)
        guard result.status == 0 else { throw TestFailure("leaderboard-refresh at \(now) exited \(result.status): \(result.stderr)") }
        let report = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        // A run for some users reports each decision too, beside its summary.
        let summary = report["summary"] as? [String: Any] ?? report
        return summary["tally"] as? [String: Int] ?? [:]
    }

    /// Runs scripts/bench/leaderboard-floor.sql at `now`: its boards in the table leaderboard_floor.
    func leaderboardFloor(_ now: String) async throws {
        let script = try String(contentsOf: packageRoot.appendingPathComponent("scripts/bench/leaderboard-floor.sql"), encoding: .utf8)
        try await psql(script.replacingOccurrences(of: ":now", with: "'\(now)'"))
    }

    /// The entries of `circle` whose place disagrees with the rule, read independently of Nudge's
    /// SQL: a member holds a place exactly when they have a value from the board's own days (its
    /// period within the challenge's): steps above 0 in a steps circle, a weigh-in in a weight-loss
    /// one. (For circles whose members all have a usable weight goal.)
    func placesWithoutAValueOfThePeriod(_ circle: String) async throws -> String {
        try await psql(
            """
            select e.period || ' ' || e.period_start || ' member ' || u.n || coalesce(' #' || e.rank, ' without a place')
                   || ' (steps ' || v.steps || ', weigh-ins ' || v.weigh_ins || ')'
              from fitcircle_leaderboard_entries e
              join fitcircles c on c.id = e.fitcircle_id
              join (select n, md5('user-' || n)::uuid as id from generate_series(1, 99) n) u on u.id = e.user_id
             cross join lateral (
                 select greatest(e.period_start, c.starts_on) as first_day,
                        least(case e.period when 'daily' then e.period_start
                                            when 'weekly' then e.period_start + 6
                                            when 'monthly' then (e.period_start + interval '1 month')::date - 1
                                            else c.ends_on end, c.ends_on) as last_day) d
             cross join lateral (
                 select coalesce(sum(s.steps), 0) as steps, count(s.weight) as weigh_ins
                   from fitcircle_data_submissions s
                  where s.fitcircle_id = e.fitcircle_id and s.user_id = e.user_id
                    and s.submission_date between d.first_day and d.last_day) v
             where e.fitcircle_id = '\(circle)'
               and (e.rank is not null) <> case c.challenge_type when 'steps' then v.steps > 0 else v.weigh_ins > 0 end
             order by 1
            """)
    }

    /// The entries the job and the floor disagree on, on the floor's boards (`periods` of them).
    func leaderboardDifferences(periods: [String] = ["daily", "weekly", "monthly", "all_time"]) async throws -> String {
        let list = periods.map { "'\($0)'" }.joined(separator: ",")
        return try await psql(
            """
            with job as (
                select e.fitcircle_id, e.user_id, e.period, e.period_start, e.metric_type, e.metric_value, e.rank, e.rank_change
                  from fitcircle_leaderboard_entries e
                 where e.period in (\(list))
                   and exists (select 1 from leaderboard_floor f where f.fitcircle_id = e.fitcircle_id and f.period = e.period
                                                                  and f.period_start = e.period_start)),
            floor as (select * from leaderboard_floor where period in (\(list)))
            (select 'job only', * from (select * from job except select * from floor) a)
            union all
            (select 'floor only', * from (select * from floor except select * from job) b)
            order by 3, 4, 5, 1 limit 20
            """)
    }
}

@Suite(.dropsItsDatabases) struct LeaderboardFloorTests {
    /// Over the seeded circles (24 zones, steps and weight-loss, members who joined late or left),
    /// at three instants, a first refresh writes exactly what the SQL floor computes: every
    /// entry's metric, rank and rank_change, on all four periods.
    @Test func theJobAgreesWithItsSQLFloorOverSeededData() async throws {
        let database = try await TestDatabase.fresh()
        let seed = try await database.nudge(["seed", "--users", "600", "--seed", "11", "--now", "2026-03-18T12:00:00Z"])
        #expect(seed.status == 0, "\(seed.stderr)")
        for now in ["2026-03-18T12:00:00Z", "2026-03-16T03:10:00Z", "2026-03-19T00:40:00Z"] {
            try await database.psql("delete from fitcircle_leaderboard_entries; delete from leaderboard_boards")
            let tally = try await database.refreshLeaderboards(now)
            try await database.leaderboardFloor(now)
            await #expect(try database.leaderboardDifferences() == "", "at \(now)")
            let entries = try await database.count("select count(*) from fitcircle_leaderboard_entries")
            #expect(entries == (try await database.count("select count(*) from leaderboard_floor")), "at \(now)")
            #expect(entries > 1_000)
            #expect(tally["entries_written"] == entries)
            // Every kind of board is there.
            #expect(
                try await database.value(
                    "select string_agg(distinct period || ':' || metric_type, ' ' order by period || ':' || metric_type) from fitcircle_leaderboard_entries")
                    == "all_time:steps all_time:weight_lost daily:steps daily:weight_loss_pct monthly:steps monthly:weight_lost weekly:steps weekly:weight_loss_pct"
            )
        }
    }
}

@Suite(.dropsItsDatabases) struct LeaderboardRefreshTests {
    static let steps = "00000000-0000-0000-0000-00000000a001"
    static let weight = "00000000-0000-0000-0000-00000000b001"

    /// Circle A: 'Work Warriors', steps, America/St_Johns, members 1–8 from the start, member 9
    /// joining on Wednesday 11 March at 15:00 UTC, when member 8 leaves. Circle B: weight loss,
    /// Pacific/Kiritimati, members 11–13 (13's target equals their start). Members 3 and 13 read French.
    static func circles(_ database: TestDatabase) async throws {
        try await database.psql(
            """
            begin;
            insert into users (id, timezone, locale, display_name, created_at)
            select md5('user-' || n)::uuid, case when n < 10 then 'America/St_Johns' else 'Pacific/Kiritimati' end,
                   case when n in (3, 13) then 'fr' else 'en' end, 'Member ' || n, '2026-02-01T00:00:00Z'
              from generate_series(1, 13) n where n not in (10);
            insert into fitcircles (id, name, challenge_type, timezone, starts_on, ends_on) values
              ('\(steps)', 'Work Warriors', 'steps', 'America/St_Johns', '2026-03-02', '2026-03-29'),
              ('\(weight)', 'Lean Team', 'weight_loss', 'Pacific/Kiritimati', '2026-03-02', '2026-03-29');
            insert into fitcircle_members (fitcircle_id, user_id, joined_at, left_at, starting_weight, target_weight)
            select '\(steps)', md5('user-' || n)::uuid,
                   case when n = 9 then timestamptz '2026-03-11T15:00:00Z' else timestamptz '2026-03-01T00:00:00Z' end,
                   case when n = 8 then timestamptz '2026-03-11T15:00:00Z' end, null, null
              from generate_series(1, 9) n;
            insert into fitcircle_members (fitcircle_id, user_id, joined_at, starting_weight, target_weight) values
              ('\(weight)', md5('user-11')::uuid, '2026-03-01T00:00:00Z', 90, 80),
              ('\(weight)', md5('user-12')::uuid, '2026-03-01T00:00:00Z', 100, 90),
              ('\(weight)', md5('user-13')::uuid, '2026-03-01T00:00:00Z', 80, 80);
            -- Circle A: every member's steps from the 2nd to the 9th, submitted at 20:00 local.
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, steps, submitted_at)
            select '\(steps)', md5('user-' || n)::uuid, d::date, 1000 * n + 10 * extract(day from d)::int,
                   (d::date + time '20:00') at time zone 'America/St_Johns'
              from generate_series(1, 8) n, generate_series('2026-03-02'::date, '2026-03-09'::date, '1 day') d;
            -- The 10th: members 1 and 2 tie at 5,000 steps; 2 submitted first.
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, steps, submitted_at)
            select '\(steps)', md5('user-' || n)::uuid, '2026-03-10',
                   case when n in (1, 2) then 5000 else 1000 * n end,
                   case n when 1 then timestamptz '2026-03-10T21:30:00Z' when 2 then timestamptz '2026-03-10T10:30:00Z'
                          else timestamptz '2026-03-10T22:00:00Z' end
              from generate_series(1, 8) n;
            -- Circle B: the 10th's weigh-ins at 10:00 local.
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, weight, submitted_at) values
              ('\(weight)', md5('user-11')::uuid, '2026-03-10', 88, '2026-03-09T20:00:00Z'),
              ('\(weight)', md5('user-12')::uuid, '2026-03-10', 97, '2026-03-09T20:00:00Z'),
              ('\(weight)', md5('user-13')::uuid, '2026-03-10', 78, '2026-03-09T20:00:00Z');
            commit;
            """)
    }

    /// A board as the app shows it: member number, rank, value, movement.
    func board(_ database: TestDatabase, _ circle: String, _ period: String, _ start: String) async throws -> String {
        try await database.psql(
            """
            select u.n || ' #' || coalesce(e.rank::text, '-') || ' ' || coalesce(trim_scale(e.metric_value)::text, '-') || ' '
                   || coalesce(e.rank_change::text, '-')
              from fitcircle_leaderboard_entries e
              join (select n, md5('user-' || n)::uuid as id from generate_series(1, 99) n) u on u.id = e.user_id
             where e.fitcircle_id = '\(circle)' and e.period = '\(period)' and e.period_start = '\(start)'
             order by e.rank nulls last, u.n
            """
        ).replacingOccurrences(of: "\n", with: ", ")
    }

    func expectBoard(
        _ database: TestDatabase, _ circle: String, _ period: String, _ start: String, _ expected: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let actual = try await board(database, circle, period, start)
        #expect(actual == expected, "\(period) \(start): \(actual)", sourceLocation: sourceLocation)
    }

    func isFinal(_ database: TestDatabase, _ circle: String, _ period: String, _ start: String) async throws -> String {
        try await database.value("select final from leaderboard_boards where fitcircle_id = '\(circle)' and period = '\(period)' and period_start = '\(start)'")
    }

    func setSteps(_ database: TestDatabase, member: Int, day: String, steps: Int, at: String) async throws {
        try await database.psql(
            """
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, steps, submitted_at)
            values ('\(Self.steps)', md5('user-\(member)')::uuid, '\(day)', \(steps), '\(at)')
            on conflict (fitcircle_id, user_id, submission_date) do update set steps = excluded.steps, submitted_at = excluded.submitted_at
            """)
    }

    func told(_ database: TestDatabase) async throws -> String {
        try await database.psql(
            """
            select u.n || ': ' || o.body from notification_outbox o
              join (select n, md5('user-' || n)::uuid as id from generate_series(1, 99) n) u on u.id = o.user_id
             where o.notification_type = 'leaderboard_change' order by o.deliver_after, u.n
            """)
    }

    @Test func boardsAcrossMidnightsRostersTiesFinalRanksAndMovement() async throws {
        let database = try await TestDatabase.fresh()
        try await Self.circles(database)

        // St John's springs forward on Sunday the 8th: a 23-hour day, over at 02:30 UTC on the 9th.
        // At 00:15 local it waits for the grace; at 00:30 it gets its final ranks, as the floor does.
        try await database.refreshLeaderboards("2026-03-09T02:45:00Z")
        await #expect(try isFinal(database, Self.steps, "daily", "2026-03-08") == "")
        try await database.refreshLeaderboards("2026-03-09T03:00:00Z")
        await #expect(try isFinal(database, Self.steps, "daily", "2026-03-08") == "t")
        await #expect(try isFinal(database, Self.steps, "weekly", "2026-03-02") == "t")
        try await expectBoard(
            database, Self.steps, "daily", "2026-03-08",
            "8 #1 8080 0, 7 #2 7080 0, 6 #3 6080 0, 5 #4 5080 0, 4 #5 4080 0, 3 #6 3080 0, 2 #7 2080 0, 1 #8 1080 0")
        try await database.leaderboardFloor("2026-03-09T03:00:00Z")
        await #expect(try database.leaderboardDifferences() == "")

        // Kiritimati, 23:50 on the 10th: percentages of goal; 13's target equals their start, so
        // 13 has none and no place, with the reason logged. Nobody weighed in on the 9th: nobody
        // held a place there to move from, so no change is shown.
        let late = try await database.refreshLeaderboards("2026-03-10T09:50:00Z")
        #expect(late["members_without_goal"] ?? 0 >= 1)
        try await expectBoard(database, Self.weight, "daily", "2026-03-10", "12 #1 30 -, 11 #2 20 -, 13 #- - -")
        try await expectBoard(database, Self.weight, "monthly", "2026-03-01", "12 #1 3 -, 13 #2 2 -, 11 #3 2 -")
        // 11 weighs in again at 00:20 local for the 10th (within the grace for late submissions,
        // docs/jobs/leaderboard-refresh.md, "Cadence"): not counted at 00:25, while the 10th waits
        // for its final refresh, then counted at 00:31.
        try await database.psql("update fitcircle_data_submissions set weight = 85, submitted_at = '2026-03-10T10:20:00Z' where user_id = md5('user-11')::uuid")
        try await database.refreshLeaderboards("2026-03-10T10:25:00Z")
        try await expectBoard(database, Self.weight, "daily", "2026-03-10", "12 #1 30 -, 11 #2 20 -, 13 #- - -")
        await #expect(try isFinal(database, Self.weight, "daily", "2026-03-10") == "f")
        try await database.refreshLeaderboards("2026-03-10T10:31:00Z")
        try await expectBoard(database, Self.weight, "daily", "2026-03-10", "11 #1 50 -, 12 #2 30 -, 13 #- - -")
        await #expect(try isFinal(database, Self.weight, "daily", "2026-03-10") == "t")

        // St John's, 11:00 on Wednesday the 11th. The 10th is final: 1 and 2 tie at 5,000 and 2
        // submitted first; member 8 (still a member) is on it, member 9 (not yet) is not.
        try await database.refreshLeaderboards("2026-03-11T13:30:00Z")
        await #expect(try isFinal(database, Self.steps, "daily", "2026-03-10") == "t")
        try await expectBoard(
            database, Self.steps, "daily", "2026-03-10",
            "8 #1 8000 0, 7 #2 7000 0, 6 #3 6000 0, 2 #4 5000 3, 1 #5 5000 3, 5 #6 5000 -2, 4 #7 4000 -2, 3 #8 3000 -2")
        // Last week's board holds its final ranks; this week's has 8 and not 9.
        await #expect(try isFinal(database, Self.steps, "weekly", "2026-03-02") == "t")
        await #expect(try board(database, Self.steps, "weekly", "2026-03-02").hasPrefix("8 #1 "))
        await #expect(try board(database, Self.steps, "weekly", "2026-03-09").hasPrefix("8 #1 "))
        await #expect(!(try board(database, Self.steps, "weekly", "2026-03-09").contains("9 #")))
        // Everything computed now is what the SQL floor computes now.
        try await database.leaderboardFloor("2026-03-11T13:30:00Z")
        await #expect(try database.leaderboardDifferences() == "")
        // The 10th's submissions carry their rank on the 10th's board.
        #expect(
            try await database.value(
                """
                select count(*) from fitcircle_data_submissions where submission_date = '2026-03-10' and fitcircle_id = '\(Self.steps)'
                   and rank_after_submission = (select rank from fitcircle_leaderboard_entries e where e.fitcircle_id = '\(Self.steps)'
                                                 and e.period = 'daily' and e.period_start = '2026-03-10' and e.user_id = fitcircle_data_submissions.user_id)
                """) == "8")

        // 13:00 local: 8 has left and 9 has joined. 8 drops off this week's board and keeps last
        // week's; 9 joins this week's with their steps. The day's first submissions move nobody
        // who had something before: no notification.
        for member in [1, 2, 3, 4, 5, 6, 7, 9] {
            try await setSteps(database, member: member, day: "2026-03-11", steps: member == 1 ? 500 : 1000 * member, at: "2026-03-11T15:10:00Z")
        }
        try await database.refreshLeaderboards("2026-03-11T15:30:00Z")
        try await expectBoard(
            database, Self.steps, "daily", "2026-03-11",
            "9 #1 9000 -, 7 #2 7000 0, 6 #3 6000 0, 5 #4 5000 2, 4 #5 4000 2, 3 #6 3000 2, 2 #7 2000 -3, 1 #8 500 -3")
        await #expect(!(try board(database, Self.steps, "weekly", "2026-03-09").contains("8 #")))
        await #expect(try board(database, Self.steps, "weekly", "2026-03-09").contains("9 #"))
        await #expect(try board(database, Self.steps, "weekly", "2026-03-02").hasPrefix("8 #1 "))
        try await database.leaderboardFloor("2026-03-11T15:30:00Z")
        await #expect(try database.leaderboardDifferences(periods: ["daily", "weekly"]) == "")
        // This week, though, member 3 (French) climbed from #8 to #5 with real steps: told.
        let weekly = try await told(database)
        #expect(weekly == "3: 📈 Te voilà #5 au classement de la semaine dans « Work Warriors » ! Peux-tu décrocher la #4 ?")
        #expect(try await database.value("select payload->>'period' from notification_outbox") == "weekly")

        // 13:05: member 1 submits 50,000 steps: from #8 to #1 on the daily board, told at once.
        try await setSteps(database, member: 1, day: "2026-03-11", steps: 50_000, at: "2026-03-11T15:33:00Z")
        try await database.psql(
            "update fitcircle_data_submissions set rank_after_submission = null, rank_change = null where user_id = md5('user-1')::uuid and submission_date = '2026-03-11'"
        )
        try await database.refreshLeaderboards("2026-03-11T15:35:00Z")
        let first = try await told(database)
        #expect(
            first == """
                3: 📈 Te voilà #5 au classement de la semaine dans « Work Warriors » ! Peux-tu décrocher la #4 ?
                1: 📈 You moved up to #1 on today's board in 'Work Warriors'! Can you stay on top?
                """)
        // The submission's rank after it, and the places the day gained against the day before (#5 on the 10th).
        #expect(
            try await database.value(
                "select rank_after_submission || ' ' || rank_change from fitcircle_data_submissions where user_id = md5('user-1')::uuid and submission_date = '2026-03-11'"
            ) == "1 4")

        // 13:10: 7, 3 and 2 pass member 1, who drops to #4: three places, but within the hour of
        // their last notification, so 1 is not told, nor is 3 (told at 13:00); 2 and 9 (down
        // three) are.
        try await setSteps(database, member: 7, day: "2026-03-11", steps: 62_000, at: "2026-03-11T15:38:00Z")
        try await setSteps(database, member: 3, day: "2026-03-11", steps: 61_000, at: "2026-03-11T15:38:00Z")
        try await setSteps(database, member: 2, day: "2026-03-11", steps: 60_000, at: "2026-03-11T15:38:00Z")
        let throttled = try await database.refreshLeaderboards("2026-03-11T15:40:00Z")
        #expect(throttled["moves_throttled"] == 2)
        let second = try await told(database)
        #expect(
            second == """
                3: 📈 Te voilà #5 au classement de la semaine dans « Work Warriors » ! Peux-tu décrocher la #4 ?
                1: 📈 You moved up to #1 on today's board in 'Work Warriors'! Can you stay on top?
                2: 📈 You moved up to #3 on today's board in 'Work Warriors'! Can you reach #2?
                9: 📉 You dropped to #5 on today's board in 'Work Warriors'. Time to win back #2!
                """)

        // 14:10, over an hour later: member 1 climbs back to #1 and is told again.
        try await setSteps(database, member: 1, day: "2026-03-11", steps: 100_000, at: "2026-03-11T16:38:00Z")
        try await database.refreshLeaderboards("2026-03-11T16:40:00Z")
        #expect(try await database.count("select count(*) from notification_outbox where user_id = md5('user-1')::uuid") == 2)
        #expect(
            try await database.value(
                "select payload->>'deep_link' from notification_outbox where user_id = md5('user-1')::uuid order by deliver_after desc limit 1")
                == "fitcircle://circles/\(Self.steps)/leaderboard?period=daily")

        // Running it again at the same instant changes no row and queues nothing.
        let ledger: Set<String> = ["job_runs", "job_run_failures"]
        let before = try await database.dump(excluding: ledger)
        let again = try await database.refreshLeaderboards("2026-03-11T16:40:00Z")
        #expect(try await database.dump(excluding: ledger) == before)
        #expect(again["notification:leaderboard_change"] == nil)
        // Five minutes later, with nothing new, the boards are looked at and nothing is written:
        // no entry, no submission, no notification, not even the boards' own state.
        let quiet = try await database.nudge(["run", "leaderboard-refresh", "--now", "2026-03-11T16:45:00Z"])
        #expect(quiet.status == 0)
        #expect(quiet.stdout.contains("circles: 2 processed, 0 changed, 2 nothing due"), "\(quiet.stdout)")
        #expect(try await database.dump(excluding: ledger) == before)

        // `--user` recomputes that user's circles and tells only them: member 4 (told of a weekly
        // drop at 14:10) passes three others on the day's board, and is not the user asked for.
        try await setSteps(database, member: 4, day: "2026-03-11", steps: 200_000, at: "2026-03-11T16:47:00Z")
        let limited = try await database.refreshLeaderboards("2026-03-11T16:50:00Z", ["--user", Fixture.userID(9)])
        let toldFour = try await database.psql("select deliver_after, body, payload from notification_outbox where user_id = md5('user-4')::uuid")
        #expect(limited["moves_of_other_users"] ?? 0 >= 1, "\(limited) \(toldFour)")
        #expect(try await database.count("select count(*) from notification_outbox where user_id = md5('user-4')::uuid") == 1)

        // Three a local day at most: member 1 has had two today, and a third queued at 12:00 local;
        // at 15:30 local they drop three places and are not told.
        try await database.psql(
            """
            insert into notification_outbox (dedupe_key, job, user_id, local_day, notification_type, deliver_after, title, body)
            values ('leaderboard-refresh:member-1:third', 'leaderboard-refresh', md5('user-1')::uuid, '2026-03-11',
                    'leaderboard_change', '2026-03-11T14:30:00Z', 'Work Warriors', 'third')
            """)
        for member in [5, 6, 7] {
            try await setSteps(database, member: member, day: "2026-03-11", steps: 300_000 + member, at: "2026-03-11T17:55:00Z")
        }
        let capped = try await database.refreshLeaderboards("2026-03-11T18:00:00Z")
        #expect(capped["moves_throttled"] ?? 0 >= 1)
        #expect(try await database.count("select count(*) from notification_outbox where user_id = md5('user-1')::uuid") == 3)

        // A backfill recomputes a final board whatever its state, and tells nobody.
        let tenth = try await board(database, Self.steps, "daily", "2026-03-10")
        try await database.psql(
            "update fitcircle_leaderboard_entries set rank = 99 where fitcircle_id = '\(Self.steps)' and period = 'daily' and period_start = '2026-03-10'")
        let outbox = try await database.count("select count(*) from notification_outbox")
        let backfill = try await database.refreshLeaderboards("2026-03-11T18:05:00Z", ["--date", "2026-03-10"])
        #expect((backfill["boards_refreshed"] ?? 0) >= 2)
        await #expect(try board(database, Self.steps, "daily", "2026-03-10") == tenth)
        #expect(try await database.count("select count(*) from notification_outbox") == outbox)
    }

    /// A Paris circle with members in Los Angeles and Tokyo (`submission_date` is each member's
    /// own day), another nobody submitted to, and a weight-loss circle weighing in on Mondays.
    static func zones(_ database: TestDatabase) async throws {
        try await database.psql(
            """
            begin;
            insert into users (id, timezone, locale, display_name, created_at) values
              (md5('user-21')::uuid, 'America/Los_Angeles', 'en', 'Member 21', '2026-02-01T00:00:00Z'),
              (md5('user-22')::uuid, 'Europe/Paris', 'fr', 'Member 22', '2026-02-01T00:00:00Z'),
              (md5('user-23')::uuid, 'Asia/Tokyo', 'en', 'Member 23', '2026-02-01T00:00:00Z'),
              (md5('user-24')::uuid, 'Europe/Paris', 'en', 'Member 24', '2026-02-01T00:00:00Z');
            insert into fitcircles (id, name, challenge_type, timezone, starts_on, ends_on) values
              ('00000000-0000-0000-0000-00000000c001', 'Paris Pacers', 'steps', 'Europe/Paris', '2026-03-02', '2026-03-29'),
              ('00000000-0000-0000-0000-00000000c002', 'Quiet Circle', 'steps', 'Europe/Paris', '2026-03-02', '2026-03-29'),
              ('00000000-0000-0000-0000-00000000c003', 'Monday Scales', 'weight_loss', 'Europe/Paris', '2026-03-02', '2026-03-29');
            insert into fitcircle_members (fitcircle_id, user_id, joined_at, starting_weight, target_weight)
            select c, md5('user-' || n)::uuid, '2026-03-01T00:00:00Z', 90 + n, 80 + n
              from unnest(array['00000000-0000-0000-0000-00000000c001'::uuid, '00000000-0000-0000-0000-00000000c002'::uuid,
                                '00000000-0000-0000-0000-00000000c003'::uuid]) c, generate_series(21, 24) n;
            -- Paris Pacers, Sunday the 15th: Paris and Tokyo members by day; 24 submits nothing.
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, steps, submitted_at) values
              ('00000000-0000-0000-0000-00000000c001', md5('user-22')::uuid, '2026-03-15', 12000, '2026-03-15T19:00:00Z'),
              ('00000000-0000-0000-0000-00000000c001', md5('user-23')::uuid, '2026-03-15', 9000, '2026-03-15T11:00:00Z');
            -- Monday Scales: weigh-ins on the Mondays only.
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, weight, submitted_at) values
              ('00000000-0000-0000-0000-00000000c003', md5('user-21')::uuid, '2026-03-02', 110, '2026-03-02T15:00:00Z'),
              ('00000000-0000-0000-0000-00000000c003', md5('user-21')::uuid, '2026-03-09', 109, '2026-03-09T15:00:00Z'),
              ('00000000-0000-0000-0000-00000000c003', md5('user-22')::uuid, '2026-03-09', 110, '2026-03-09T07:00:00Z');
            commit;
            """)
    }

    @Test func aMemberWestOfTheCircleHasTheirWholeSundayCounted() async throws {
        let database = try await TestDatabase.fresh()
        try await Self.zones(database)
        let paris = "00000000-0000-0000-0000-00000000c001"
        // 23:00 in Paris: Sunday's boards stand as they are; 24, with nothing, holds no place.
        try await database.refreshLeaderboards("2026-03-15T22:00:00Z")
        try await expectBoard(database, paris, "daily", "2026-03-15", "22 #1 12000 -, 23 #2 9000 -, 21 #- - -, 24 #- - -")
        // 00:35 Monday in Paris: the circle's Sunday has ended, but not Los Angeles's (16:35).
        try await database.refreshLeaderboards("2026-03-15T23:35:00Z")
        await #expect(try isFinal(database, paris, "daily", "2026-03-15") == "f")
        // 20:00 Sunday in Los Angeles: 21 submits the day's 30,000 steps, counted on Sunday's
        // daily board and on the week's, with the submission's rank.
        try await database.psql(
            """
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, steps, submitted_at)
            values ('\(paris)', md5('user-21')::uuid, '2026-03-15', 30000, '2026-03-16T03:00:00Z')
            """)
        try await database.refreshLeaderboards("2026-03-16T03:05:00Z")
        try await expectBoard(database, paris, "daily", "2026-03-15", "21 #1 30000 -, 22 #2 12000 -, 23 #3 9000 -, 24 #- - -")
        try await expectBoard(database, paris, "weekly", "2026-03-09", "21 #1 30000 -, 22 #2 12000 -, 23 #3 9000 -, 24 #- - -")
        #expect(
            try await database.value(
                "select rank_after_submission from fitcircle_data_submissions where user_id = md5('user-21')::uuid and fitcircle_id = '\(paris)'") == "1")
        // (The month's and all-time boards take her Sunday at their daily refresh, once it is over.)
        try await database.leaderboardFloor("2026-03-16T03:05:00Z")
        let differences03 = try await database.leaderboardDifferences(periods: ["daily", "weekly"])
        #expect(differences03 == "", "\(differences03)")
        // Her midnight (07:00 UTC), then the grace: the boards are final, with her steps.
        try await database.refreshLeaderboards("2026-03-16T07:10:00Z")
        await #expect(try isFinal(database, paris, "daily", "2026-03-15") == "f")
        try await database.refreshLeaderboards("2026-03-16T07:30:00Z")
        await #expect(try isFinal(database, paris, "daily", "2026-03-15") == "t")
        await #expect(try isFinal(database, paris, "weekly", "2026-03-09") == "t")
        try await expectBoard(database, paris, "weekly", "2026-03-09", "21 #1 30000 -, 22 #2 12000 -, 23 #3 9000 -, 24 #- - -")
        try await database.leaderboardFloor("2026-03-16T07:30:00Z")
        let differences07 = try await database.leaderboardDifferences()
        #expect(differences07 == "", "\(differences07)")
        // Nobody was told of a move on a day that had ended for the circle.
        await #expect(try told(database) == "")
    }

    @Test func aBoardNobodySubmittedToHasNoRanksAndWeighInsCarryForwardAsTheWeeksStart() async throws {
        let database = try await TestDatabase.fresh()
        try await Self.zones(database)
        let quiet = "00000000-0000-0000-0000-00000000c002"
        let scales = "00000000-0000-0000-0000-00000000c003"
        for now in ["2026-03-10T12:00:00Z", "2026-03-11T12:00:00Z", "2026-03-12T12:00:00Z"] {
            try await database.refreshLeaderboards(now)
        }
        // Nobody submitted: no ranks, no arrows, on any board, and nobody told anything.
        #expect(try await database.count("select count(*) from fitcircle_leaderboard_entries where fitcircle_id = '\(quiet)'") > 0)
        #expect(
            try await database.count(
                """
                select count(*) from fitcircle_leaderboard_entries
                 where fitcircle_id = '\(quiet)' and (rank is not null or rank_change is not null or metric_value is not null)
                """) == 0)
        await #expect(try told(database) == "")
        // Monday's daily board: 21 from 111 to 109 and 22 from 112 to 110, 20 % each of a 10 kg
        // goal; 22 reached it first, on Monday morning. Thursday's: nobody weighed in that day, and
        // Monday's weights carried forward are no place on it.
        try await expectBoard(database, scales, "daily", "2026-03-09", "22 #1 20 -, 21 #2 20 -, 23 #- - -, 24 #- - -")
        try await expectBoard(database, scales, "daily", "2026-03-12", "21 #- - -, 22 #- - -, 23 #- - -, 24 #- - -")
        // The week's board: from the weight before the week (110, or 22's starting 112) to Monday's,
        // of the week's goal (10 kg over the 3 weeks left from the 9th): 30 % and 60 %. Last week
        // 21 was first (1 kg of 10/4) and 22 had not weighed in.
        try await expectBoard(database, scales, "weekly", "2026-03-09", "22 #1 60 -, 21 #2 30 -1, 23 #- - -, 24 #- - -")
        await #expect(try database.placesWithoutAValueOfThePeriod(scales) == "")
        try await database.leaderboardFloor("2026-03-12T12:00:00Z")
        await #expect(try database.leaderboardDifferences() == "")
    }

    /// A circle's submissions are read again only when its change mark has moved: a refresh with
    /// nothing new reads none of them, and the job's own ranks move no mark; an insert, a change or
    /// a delete moves the circle's mark (once per statement and circle), and the boards then agree
    /// with the floor; a circle deleted with its submissions leaves no mark behind.
    @Test func submissionsAreReadAgainOnlyWhenTheyChanged() async throws {
        let database = try await TestDatabase.fresh()
        try await Self.circles(database)
        func mark(_ circle: String) async throws -> String {
            try await database.value("select change from fitcircle_submission_marks where fitcircle_id = '\(circle)'")
        }
        let weightLoaded = try await mark(Self.weight)
        #expect(!weightLoaded.isEmpty)
        // Member 1's steps of today (Thursday the 12th in St John's), which the refresh will rank.
        try await setSteps(database, member: 1, day: "2026-03-12", steps: 3_000, at: "2026-03-12T12:30:00Z")
        let loaded = try await mark(Self.steps)
        #expect(!loaded.isEmpty)

        // 09:30 in St John's: every board computed, today's submission ranked, the mark where it was.
        let first = try await database.refreshLeaderboards("2026-03-12T13:00:00Z")
        #expect(first["boards_refreshed", default: 0] > 0)
        #expect(try await database.count("select count(*) from fitcircle_data_submissions where rank_after_submission is not null") == 1)
        await #expect(try mark(Self.steps) == loaded)

        // An hour later nothing is new: the weekly and daily boards are looked at, no submission is read.
        let before = try await database.rowsRead(["fitcircle_data_submissions"])
        let quiet = try await database.refreshLeaderboards("2026-03-12T14:00:00Z")
        #expect(quiet["boards_refreshed"] == nil && quiet["boards_unchanged", default: 0] > 0, "\(quiet)")
        #expect(try await database.rowsRead(["fitcircle_data_submissions"]) == before)

        // Member 3 submits today's steps, then corrects them; member 4's submission is withdrawn
        // (today's days only: a final board is never computed again, so a change to a past day
        // is not what this compares). Each statement moves the mark; the next look recomputes.
        try await setSteps(database, member: 3, day: "2026-03-12", steps: 9_000, at: "2026-03-12T14:10:00Z")
        let inserted = try await mark(Self.steps)
        #expect(inserted != loaded)
        try await setSteps(database, member: 3, day: "2026-03-12", steps: 9_500, at: "2026-03-12T14:20:00Z")
        let corrected = try await mark(Self.steps)
        #expect(corrected != inserted)
        try await setSteps(database, member: 4, day: "2026-03-12", steps: 7_000, at: "2026-03-12T14:30:00Z")
        let withdrawnFrom = try await mark(Self.steps)
        try await database.psql(
            """
            delete from fitcircle_data_submissions
             where fitcircle_id = '\(Self.steps)' and user_id = md5('user-4')::uuid and submission_date = '2026-03-12'
            """)
        await #expect(try mark(Self.steps) != withdrawnFrom)
        let changed = try await database.refreshLeaderboards("2026-03-12T15:00:00Z")
        #expect(changed["boards_refreshed", default: 0] > 0, "\(changed)")
        try await database.leaderboardFloor("2026-03-12T15:00:00Z")
        await #expect(try database.leaderboardDifferences(periods: ["daily", "weekly"]) == "")

        // One statement over both circles moves each mark once.
        let sequence = try await database.count("select last_value from fitcircle_submission_change")
        try await database.psql(
            """
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, steps, weight, submitted_at) values
              ('\(Self.steps)', md5('user-5')::uuid, '2026-03-12', 4000, null, '2026-03-12T15:10:00Z'),
              ('\(Self.steps)', md5('user-6')::uuid, '2026-03-12', 6000, null, '2026-03-12T15:10:00Z'),
              ('\(Self.weight)', md5('user-11')::uuid, '2026-03-12', null, 87, '2026-03-12T15:10:00Z')
            """)
        #expect(try await database.count("select last_value from fitcircle_submission_change") == sequence + 2)

        // A truncate moves every circle's mark, a circle without one yet included.
        try await database.psql("delete from fitcircle_submission_marks where fitcircle_id = '\(Self.weight)'")
        let beforeTruncate = try await mark(Self.steps)
        try await database.psql("truncate fitcircle_data_submissions")
        await #expect(try mark(Self.steps) != beforeTruncate)
        await #expect(try mark(Self.weight) != "")

        // A circle deleted takes its submissions, and its mark, with it.
        try await database.psql("delete from fitcircles where id = '\(Self.weight)'")
        await #expect(try mark(Self.weight) == "")
        #expect(try await database.count("select count(*) from fitcircle_data_submissions where fitcircle_id = '\(Self.weight)'") == 0)
    }

    /// Two circles of one batch telling one member of a move in the same hour: one notification,
    /// and the run goes on (the batch queues that key twice; the outbox takes it once).
    @Test func twoCirclesTellingOneMemberOfAMoveQueueOneNotification() async throws {
        let database = try await TestDatabase.fresh()
        try await Self.circles(database)
        let twin = "00000000-0000-0000-0000-00000000a002"
        try await database.psql(
            """
            insert into fitcircles (id, name, challenge_type, timezone, starts_on, ends_on)
            select '\(twin)', 'Twin', challenge_type, timezone, starts_on, ends_on from fitcircles where id = '\(Self.steps)';
            insert into fitcircle_members (fitcircle_id, user_id, joined_at, left_at, starting_weight, target_weight)
            select '\(twin)', user_id, joined_at, left_at, starting_weight, target_weight from fitcircle_members where fitcircle_id = '\(Self.steps)';
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, steps, submitted_at)
            select '\(twin)', user_id, submission_date, steps, submitted_at from fitcircle_data_submissions where fitcircle_id = '\(Self.steps)';
            """)
        for now in ["2026-03-09T02:45:00Z", "2026-03-09T03:00:00Z", "2026-03-10T09:50:00Z", "2026-03-11T13:30:00Z"] {
            try await database.refreshLeaderboards(now)
        }
        try await database.psql(
            """
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, steps, submitted_at)
            select c, md5('user-' || n)::uuid, '2026-03-11', case when n = 1 then 500 else 1000 * n end, '2026-03-11T15:10:00Z'
              from generate_series(1, 9) n, unnest(array['\(Self.steps)'::uuid, '\(twin)'::uuid]) c where n <> 8
            on conflict (fitcircle_id, user_id, submission_date) do update set steps = excluded.steps, submitted_at = excluded.submitted_at
            """)
        let before = try await database.count("select count(*) from notification_outbox")
        let result = try await database.nudge(["run", "leaderboard-refresh", "--now", "2026-03-11T15:30:00Z"])
        #expect(result.status == 0, "\(result.stderr.suffix(600))")
        let queued = try await database.count("select count(*) from notification_outbox") - before
        #expect(queued > 0)
        #expect(
            try await database.count(
                """
                select count(*) from (select user_id from notification_outbox where notification_type = 'leaderboard_change'
                                       group by user_id, local_day, dedupe_key having count(*) > 1) twice
                """) == 0)
    }

    /// 'Scales', weight loss in Paris from 2 March: members 31–36 start at 90 kg for 80, and all
    /// weighed 89 on Tuesday 3 March, 31 first and 36 last.
    static let scales = "00000000-0000-0000-0000-00000000d001"

    static func scales(_ database: TestDatabase) async throws {
        try await database.psql(
            """
            begin;
            insert into users (id, timezone, locale, display_name, created_at)
            select md5('user-' || n)::uuid, 'Europe/Paris', 'en', 'Member ' || n, '2026-02-01T00:00:00Z'
              from generate_series(31, 36) n;
            insert into fitcircles (id, name, challenge_type, timezone, starts_on, ends_on)
            values ('\(scales)', 'Scales', 'weight_loss', 'Europe/Paris', '2026-03-02', '2026-04-26');
            insert into fitcircle_members (fitcircle_id, user_id, joined_at, starting_weight, target_weight)
            select '\(scales)', md5('user-' || n)::uuid, '2026-03-01T00:00:00Z', 90, 80 from generate_series(31, 36) n;
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, weight, submitted_at)
            select '\(scales)', md5('user-' || n)::uuid, '2026-03-03', 89, timestamptz '2026-03-03T06:00:00Z' + (n - 30) * interval '1 minute'
              from generate_series(31, 36) n;
            commit;
            """)
    }

    func weighIn(_ database: TestDatabase, member: Int, day: String, weight: Decimal, at: String) async throws {
        try await database.psql(
            """
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, weight, submitted_at)
            values ('\(Self.scales)', md5('user-\(member)')::uuid, '\(day)', \(weight), '\(at)')
            """)
    }

    /// A weight board places only the members who weighed in within its days: last week's weights
    /// carried forward hold no place this week (nor today, nor this month), so nobody is "dropped"
    /// from such a place when others weigh in; a member who held a place by weighing in and is
    /// passed is told.
    @Test func weightBoardsPlaceOnlyWhoWeighedInWithinThePeriodAndTellNoDropFromNoPlace() async throws {
        let database = try await TestDatabase.fresh()
        try await Self.scales(database)
        // 10:00 on Wednesday the 11th in Paris: nobody has weighed in this week or today.
        try await database.refreshLeaderboards("2026-03-11T09:00:00Z")
        try await expectBoard(database, Self.scales, "weekly", "2026-03-09", "31 #- - -, 32 #- - -, 33 #- - -, 34 #- - -, 35 #- - -, 36 #- - -")
        try await expectBoard(database, Self.scales, "daily", "2026-03-11", "31 #- - -, 32 #- - -, 33 #- - -, 34 #- - -, 35 #- - -, 36 #- - -")
        // March's board: everyone weighed in in March, from their starting 90.
        try await expectBoard(database, Self.scales, "monthly", "2026-03-01", "31 #1 1 -, 32 #2 1 -, 33 #3 1 -, 34 #4 1 -, 35 #5 1 -, 36 #6 1 -")
        await #expect(try database.placesWithoutAValueOfThePeriod(Self.scales) == "")

        // 34, 35 and 36 weigh in: they take places 1–3 of the week (1.5, 1 and 0.5 kg of the week's
        // 10/7 kg) and of the day; 31–33 hold none, so nobody moved from one, and nobody is told.
        for (member, weight) in [(34, Decimal(string: "87.5")!), (35, 88), (36, Decimal(string: "88.5")!)] {
            try await weighIn(database, member: member, day: "2026-03-11", weight: weight, at: "2026-03-11T09:30:00Z")
        }
        try await database.refreshLeaderboards("2026-03-11T10:00:00Z")
        try await expectBoard(database, Self.scales, "weekly", "2026-03-09", "34 #1 105 3, 35 #2 70 3, 36 #3 35 3, 31 #- - -, 32 #- - -, 33 #- - -")
        try await expectBoard(database, Self.scales, "daily", "2026-03-11", "34 #1 25 -, 35 #2 20 -, 36 #3 15 -, 31 #- - -, 32 #- - -, 33 #- - -")
        await #expect(try database.placesWithoutAValueOfThePeriod(Self.scales) == "")
        await #expect(try told(database) == "")
        // (The month's board takes the day's weigh-ins at its next daily refresh.)
        try await database.leaderboardFloor("2026-03-11T10:00:00Z")
        await #expect(try database.leaderboardDifferences(periods: ["daily", "weekly"]) == "")

        // Thursday: 31, 32 and 33 weigh in and pass them on the week's board: 34–36 held their
        // places with this week's weigh-ins, and are told of the drop. Thursday's board has 31–33
        // alone: Wednesday's weights are no place on it.
        for (member, weight) in [(31, Decimal(86)), (32, Decimal(string: "86.5")!), (33, 87)] {
            try await weighIn(database, member: member, day: "2026-03-12", weight: weight, at: "2026-03-12T08:00:00Z")
        }
        try await database.refreshLeaderboards("2026-03-12T09:00:00Z")
        try await expectBoard(
            database, Self.scales, "weekly", "2026-03-09",
            "31 #1 210 0, 32 #2 175 0, 33 #3 140 0, 34 #4 105 0, 35 #5 70 0, 36 #6 35 0")
        try await expectBoard(database, Self.scales, "daily", "2026-03-12", "31 #1 40 -, 32 #2 35 -, 33 #3 30 -, 34 #- - -, 35 #- - -, 36 #- - -")
        await #expect(try database.placesWithoutAValueOfThePeriod(Self.scales) == "")
        await #expect(
            try told(database) == """
                34: 📉 You dropped to #4 on this week's board in 'Scales'. Time to win back #1!
                35: 📉 You dropped to #5 on this week's board in 'Scales'. Time to win back #2!
                36: 📉 You dropped to #6 on this week's board in 'Scales'. Time to win back #3!
                """)
        // Each was told from the place they held at Wednesday's refresh with a weigh-in of the week.
        #expect(
            try await database.count(
                """
                select count(*) from notification_outbox o
                 where o.notification_type = 'leaderboard_change'
                   and not exists (select 1 from fitcircle_data_submissions s
                                    where s.fitcircle_id = '\(Self.scales)' and s.user_id = o.user_id and s.weight is not null
                                      and s.submission_date between '2026-03-09' and '2026-03-15'
                                      and s.submitted_at <= '2026-03-11T10:00:00Z')
                """) == 0)
        try await database.leaderboardFloor("2026-03-12T09:00:00Z")
        await #expect(try database.leaderboardDifferences() == "")
    }

    /// A member without a time zone lives in UTC: in a Tokyo circle, the day's and the week's boards
    /// wait for their midnight, so their Sunday evening (in UTC) counts on Sunday's boards.
    @Test func aMemberWithoutATimeZoneCountsUntilTheirUTCMidnight() async throws {
        let database = try await TestDatabase.fresh()
        let tokyo = "00000000-0000-0000-0000-00000000d002"
        try await database.psql(
            """
            begin;
            insert into users (id, timezone, locale, display_name, created_at) values
              (md5('user-41')::uuid, 'Asia/Tokyo', 'en', 'Member 41', '2026-02-01T00:00:00Z'),
              (md5('user-42')::uuid, null, 'en', 'Member 42', '2026-02-01T00:00:00Z'),
              (md5('user-43')::uuid, 'Asia/Tokyo', 'en', 'Member 43', '2026-02-01T00:00:00Z');
            insert into fitcircles (id, name, challenge_type, timezone, starts_on, ends_on)
            values ('\(tokyo)', 'Tokyo Trekkers', 'steps', 'Asia/Tokyo', '2026-03-02', '2026-03-29');
            insert into fitcircle_members (fitcircle_id, user_id, joined_at)
            select '\(tokyo)', md5('user-' || n)::uuid, '2026-03-01T00:00:00Z' from generate_series(41, 43) n;
            -- Sunday the 15th in Tokyo (UTC+9): 41 and 43 by day.
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, steps, submitted_at) values
              ('\(tokyo)', md5('user-41')::uuid, '2026-03-15', 8000, '2026-03-15T11:00:00Z'),
              ('\(tokyo)', md5('user-43')::uuid, '2026-03-15', 5000, '2026-03-15T10:00:00Z');
            commit;
            """)
        try await database.refreshLeaderboards("2026-03-15T14:00:00Z")
        try await expectBoard(database, tokyo, "daily", "2026-03-15", "41 #1 8000 -, 43 #2 5000 -, 42 #- - -")
        // 00:35 Monday in Tokyo, 15:35 Sunday for 42: the boards of Sunday and of the week are not final.
        try await database.refreshLeaderboards("2026-03-15T15:35:00Z")
        await #expect(try isFinal(database, tokyo, "daily", "2026-03-15") == "f")
        await #expect(try isFinal(database, tokyo, "weekly", "2026-03-09") == "f")
        // 20:00 Sunday in UTC: 42 submits the day's 12,000 steps, counted on Sunday's boards.
        try await database.psql(
            """
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, steps, submitted_at)
            values ('\(tokyo)', md5('user-42')::uuid, '2026-03-15', 12000, '2026-03-15T20:00:00Z')
            """)
        try await database.refreshLeaderboards("2026-03-15T20:05:00Z")
        try await expectBoard(database, tokyo, "daily", "2026-03-15", "42 #1 12000 -, 41 #2 8000 -, 43 #3 5000 -")
        try await database.leaderboardFloor("2026-03-15T20:05:00Z")
        await #expect(try database.leaderboardDifferences(periods: ["daily", "weekly"]) == "")
        // Their midnight, then the grace: final, with their steps.
        try await database.refreshLeaderboards("2026-03-16T00:10:00Z")
        await #expect(try isFinal(database, tokyo, "daily", "2026-03-15") == "f")
        try await database.refreshLeaderboards("2026-03-16T00:30:00Z")
        await #expect(try isFinal(database, tokyo, "daily", "2026-03-15") == "t")
        await #expect(try isFinal(database, tokyo, "weekly", "2026-03-09") == "t")
        // The final boards against the submissions, summed and ranked here.
        for (period, start, days) in [
            ("daily", "2026-03-15", "'2026-03-15' and '2026-03-15'"),
            ("weekly", "2026-03-09", "'2026-03-09' and '2026-03-15'"),
        ] {
            let expected = try await database.psql(
                """
                select u.n || ' #' || row_number() over (order by sum(s.steps) desc, max(s.submitted_at), s.user_id) || ' ' || sum(s.steps)
                  from fitcircle_data_submissions s
                  join (select n, md5('user-' || n)::uuid as id from generate_series(41, 43) n) u on u.id = s.user_id
                 where s.fitcircle_id = '\(tokyo)' and s.submission_date between \(days) and s.steps > 0
                 group by u.n, s.user_id order by 1
                """
            ).replacingOccurrences(of: "\n", with: ", ")
            let stored = try await database.psql(
                """
                select u.n || ' #' || e.rank || ' ' || trim_scale(e.metric_value)
                  from fitcircle_leaderboard_entries e
                  join (select n, md5('user-' || n)::uuid as id from generate_series(41, 43) n) u on u.id = e.user_id
                 where e.fitcircle_id = '\(tokyo)' and e.period = '\(period)' and e.period_start = '\(start)' and e.rank is not null
                 order by 1
                """
            ).replacingOccurrences(of: "\n", with: ", ")
            #expect(stored == expected, "\(period) \(start)")
            #expect(expected.hasPrefix("41 #2 8000, 42 #1 12000"), "\(expected)")
        }
        await #expect(try database.placesWithoutAValueOfThePeriod(tokyo) == "")
        try await database.leaderboardFloor("2026-03-16T00:30:00Z")
        await #expect(try database.leaderboardDifferences() == "")
    }

    @Test func aDryRunChangesNothingAndABadCircleFailsAlone() async throws {
        let database = try await TestDatabase.fresh()
        try await Self.circles(database)
        try await database.psql(
            """
            insert into fitcircles (id, name, challenge_type, timezone, starts_on, ends_on)
            values ('00000000-0000-0000-0000-00000000c001', 'Nowhere', 'steps', 'Mars/Olympus', '2026-03-02', '2026-03-29'),
                   ('00000000-0000-0000-0000-00000000c002', 'Forever', 'steps', 'UTC', '2026-03-02', 'infinity')
            """)
        let ledger: Set<String> = ["job_runs", "job_run_failures"]
        let before = try await database.dump(excluding: ledger)
        let dry = try await database.nudge(["run", "leaderboard-refresh", "--now", "2026-03-11T13:30:00Z", "--dry-run"])
        #expect(dry.status == 3, "\(dry.stdout)\n\(dry.stderr)")
        #expect(dry.stdout.contains("circles: 4 processed"))
        #expect(try await database.dump(excluding: ledger) == before)
        let real = try await database.nudge(["run", "leaderboard-refresh", "--now", "2026-03-11T13:30:00Z"])
        #expect(real.status == 3)
        #expect(real.stdout.contains("unknown time zone 'Mars/Olympus'"), "\(real.stdout)")
        #expect(try await database.count("select count(*) from fitcircle_leaderboard_entries where fitcircle_id = '\(Self.steps)'") > 0)
        let failed = try await database.value("select distinct item_id || ': ' || reason from job_run_failures order by 1")
        #expect(
            failed == """
                00000000-0000-0000-0000-00000000c001: the circle's unknown time zone 'Mars/Olympus'
                00000000-0000-0000-0000-00000000c002: starts_on or ends_on is not a day ('infinity')
                """)
    }
}
