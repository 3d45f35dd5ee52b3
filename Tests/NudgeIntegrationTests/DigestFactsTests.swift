import Foundation
import Testing

@testable import NudgeCore

private func at(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }

/// What the weekly digest tells is true: next week's goal is Monday's goal, a week the user was
/// barely signed up for and a long run of quiet weeks get none, and a place held by nobody's
/// effort is never told.
@Suite(.serialized, .dropsItsDatabases) struct DigestFactsTests {
    /// Sunday 22 March 2026, 20:00 in London (UTC).
    static let sunday = "2026-03-22T20:00:00Z"

    /// The week's steps sync late: at 20:00 on Sunday the phone has sent 1,000 of the day's
    /// steps, the other 14,000 arrive at 23:00. The digest's "next week" goal is the one
    /// generate-daily-goals gives on Monday (`weekly_goals.target_value`), not a number computed
    /// from a partial Sunday.
    @Test func nextWeeksGoalIsMondaysGoalWhenStepsSyncLate() async throws {
        let database = try await TestDatabase.fresh()
        try await DigestFixture.user(database, 1, zone: "Europe/London")
        try await DigestFixture.activity(database, 1, from: "2026-02-01", to: "2026-03-22")
        try await database.psql("update daily_tracking set steps = 1000 where user_id = '\(Fixture.userID(1))' and date = '2026-03-22'")
        let queued = try await weeklyDigest(database, at: at(Self.sunday))
        #expect(queued.counts.succeeded == 1, "\(queued.failures)")
        let told = try await database.value("select body from notification_outbox where channel = 'email'")

        try await database.psql("update daily_tracking set steps = 15000 where user_id = '\(Fixture.userID(1))' and date = '2026-03-22'")
        let goals = try await database.nudge(["run", "generate-daily-goals", "--now", "2026-03-23T00:15:00Z"])
        #expect(goals.status == 0, "\(goals.stderr)")
        let monday = try await database.count(
            """
            select target_value from weekly_goals where user_id = '\(Fixture.userID(1))' and week_start = '2026-03-23' and goal_type = 'steps'
            """)
        #expect(told.contains(DigestCopy(locale: "en").number(monday)), "Monday's goal is \(monday): \(told)")
        // The rules on the final Sunday would have given another number: the test is not vacuous.
        let final =
            await GoalRules.dailyTargets(
                on: LocalDate(iso8601: "2026-03-23")!, signedUpOn: LocalDate(iso8601: "2026-01-01")!,
                tracking: try trackingDays(database, user: 1), memberships: []
            ).steps * 7
        #expect(final != monday)
        // Monday's other goals are there as usual.
        #expect(try await database.count("select count(*) from weekly_goals where user_id = '\(Fixture.userID(1))' and week_start = '2026-03-23'") == 4)
    }

    /// The user's tracking as generate-daily-goals reads it.
    func trackingDays(_ database: TestDatabase, user n: Int) async throws -> [LocalDate: TrackingDay] {
        let rows = try await database.psql(
            """
            select date, coalesce(steps::text, '') from daily_tracking where user_id = '\(Fixture.userID(n))' order by date
            """
        ).split(separator: "\n")
        return Dictionary(
            uniqueKeysWithValues: rows.map { row in
                let fields = row.split(separator: "|", omittingEmptySubsequences: false).map(String.init)
                let date = LocalDate(iso8601: fields[0])!
                return (date, TrackingDay(date: date, mood: 3, energy: 4, steps: Int(fields[1]), weight: nil))
            })
    }

    /// Signed up at 19:30 on Sunday: no digest of a week they were not there for.
    @Test func aUserWhoSignedUpThatEveningGetsNoDigest() async throws {
        let database = try await TestDatabase.fresh()
        try await Outbox.user(database, 1, zone: "Europe/London", ios: 1, signup: "2026-03-22T19:30:00Z")
        try await database.psql("update users set email = 'user1@example.test' where id = '\(Fixture.userID(1))'")
        let summary = try await weeklyDigest(database, at: at(Self.sunday))
        #expect(summary.counts.succeeded == 0)
        #expect(try await database.count("select count(*) from notification_outbox") == 0)
        // Signed up on Thursday (3 days before): that week is theirs.
        try await database.psql("update users set created_at = '2026-03-19T19:00:00Z' where id = '\(Fixture.userID(1))'")
        let thursday = try await weeklyDigest(database, at: at(Self.sunday))
        #expect(thursday.counts.succeeded == 1)
    }

    /// Active until 8 February: four quiet digests, then none until the user is back.
    @Test func afterFourQuietWeeksTheDigestRestsUntilTheUserIsActiveAgain() async throws {
        let database = try await TestDatabase.fresh()
        try await DigestFixture.user(database, 1, zone: "Europe/London")
        try await DigestFixture.activity(database, 1, from: "2026-01-05", to: "2026-02-08")
        var pushes: [String] = []
        for sunday in ["2026-02-15", "2026-02-22", "2026-03-01", "2026-03-08", "2026-03-15", "2026-03-22"] {
            if sunday == "2026-03-22" {
                // Back on Wednesday the 18th.
                try await database.psql(
                    "insert into daily_tracking (user_id, date, steps, mood, energy) values ('\(Fixture.userID(1))', '2026-03-18', 6000, 3, 4)")
            }
            let summary = try await weeklyDigest(database, at: at("\(sunday)T20:00:00Z"))
            #expect(summary.counts.failed == 0)
            pushes.append(
                try await database.value(
                    """
                    select coalesce(string_agg(body, ''), 'none') from notification_outbox where local_day = '\(sunday)' and channel = 'push'
                    """))
        }
        #expect(pushes.prefix(4).allSatisfy { $0.contains("a quiet week") }, "\(pushes)")
        #expect(pushes[4] == "none")
        #expect(try await database.value("select outcome from job_work where job = 'weekly-digest' and local_day = '2026-03-15'") == "resting")
        #expect(pushes[5].contains("6,000 steps"), "\(pushes[5])")
    }

    /// A circle nobody submitted to: the member holds no place, and the digest names none.
    @Test func aBoardNobodySubmittedToGivesTheDigestNoRank() async throws {
        let database = try await TestDatabase.fresh()
        try await DigestFixture.user(database, 1, zone: "Europe/London")
        try await DigestFixture.activity(database, 1, from: "2026-03-01", to: "2026-03-22")
        try await database.psql(
            """
            insert into fitcircles (id, name, challenge_type, timezone, starts_on, ends_on)
            values ('00000000-0000-0000-0000-0000000000c1', 'Work Warriors', 'steps', 'Europe/London', '2026-03-01', '2026-04-30');
            insert into fitcircle_members (fitcircle_id, user_id, joined_at)
            select '00000000-0000-0000-0000-0000000000c1', id, '2026-03-01T00:00:00Z' from users;
            """)
        let refresh = try await database.nudge(["run", "leaderboard-refresh", "--now", "2026-03-22T19:55:00Z"])
        #expect(refresh.status == 0, "\(refresh.stderr)")
        #expect(
            try await database.count(
                "select count(*) from fitcircle_leaderboard_entries where period = 'weekly' and period_start = '2026-03-16' and rank is null") == 1)
        let summary = try await weeklyDigest(database, at: at(Self.sunday))
        #expect(summary.counts.succeeded == 1)
        let told = try await database.psql("select body from notification_outbox")
        #expect(!told.contains("#1") && !told.contains("Work Warriors"), "\(told)")
    }

    /// A weight-loss circle where user 1 last weighed in the week before and user 2, this week, put
    /// on weight: user 1 holds no place on the week's board, and the digest names none ("#1" for
    /// a week with no weigh-in was the weight carried forward, ranked above user 2's gain).
    @Test func aWeighInFromBeforeTheWeekGivesTheDigestNoRank() async throws {
        let database = try await TestDatabase.fresh()
        for n in 1...2 {
            try await DigestFixture.user(database, n, zone: "Europe/London")
            try await DigestFixture.activity(database, n, from: "2026-03-01", to: "2026-03-22")
        }
        try await database.psql(
            """
            insert into fitcircles (id, name, challenge_type, timezone, starts_on, ends_on)
            values ('00000000-0000-0000-0000-0000000000c2', 'Lean Team', 'weight_loss', 'Europe/London', '2026-03-02', '2026-04-26');
            insert into fitcircle_members (fitcircle_id, user_id, joined_at, starting_weight, target_weight)
            select '00000000-0000-0000-0000-0000000000c2', id, '2026-03-01T00:00:00Z', 180, 170 from users;
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, weight, submitted_at) values
              ('00000000-0000-0000-0000-0000000000c2', '\(Fixture.userID(1))', '2026-03-12', 178, '2026-03-12T08:00:00Z'),
              ('00000000-0000-0000-0000-0000000000c2', '\(Fixture.userID(2))', '2026-03-12', 178, '2026-03-12T09:00:00Z'),
              ('00000000-0000-0000-0000-0000000000c2', '\(Fixture.userID(2))', '2026-03-18', 178.5, '2026-03-18T08:00:00Z');
            """)
        let refresh = try await database.nudge(["run", "leaderboard-refresh", "--now", "2026-03-22T19:55:00Z"])
        #expect(refresh.status == 0, "\(refresh.stderr)")
        #expect(
            try await database.value(
                """
                select string_agg(coalesce(rank::text, '-'), ' ' order by user_id = '\(Fixture.userID(1))' desc)
                  from fitcircle_leaderboard_entries where period = 'weekly' and period_start = '2026-03-16'
                """) == "- 1")
        let summary = try await weeklyDigest(database, at: at(Self.sunday))
        #expect(summary.counts.succeeded == 2)
        let toOne = try await database.psql("select body from notification_outbox where user_id = '\(Fixture.userID(1))'")
        #expect(!toOne.isEmpty && !toOne.contains("#1") && !toOne.contains("#2") && !toOne.contains("Lean Team"), "\(toOne)")
        let toTwo = try await database.psql("select body from notification_outbox where user_id = '\(Fixture.userID(2))' and channel = 'push'")
        #expect(toTwo.contains("#1"), "\(toTwo)")
    }

    /// Weekly boards an earlier version stored (final, so never computed again) ranked users 1 and
    /// 2 first with a weight from before the week, and with 0 steps: the digest names none of
    /// those places but user 2's, who weighed in within the week.
    @Test func aPlaceStoredWithoutAValueOfTheWeekIsNotToldByTheDigest() async throws {
        let database = try await TestDatabase.fresh()
        for n in 1...2 {
            try await DigestFixture.user(database, n, zone: "Europe/London")
            try await DigestFixture.activity(database, n, from: "2026-03-01", to: "2026-03-22")
        }
        try await database.psql(
            """
            insert into fitcircles (id, name, challenge_type, timezone, starts_on, ends_on) values
              ('00000000-0000-0000-0000-0000000000c2', 'Lean Team', 'weight_loss', 'Europe/London', '2026-03-02', '2026-04-26'),
              ('00000000-0000-0000-0000-0000000000c3', 'Idle Walkers', 'steps', 'Europe/London', '2026-03-02', '2026-04-26');
            insert into fitcircle_members (fitcircle_id, user_id, joined_at, starting_weight, target_weight)
            select c, u.id, '2026-03-01T00:00:00Z', 180, 170
              from unnest(array['00000000-0000-0000-0000-0000000000c2', '00000000-0000-0000-0000-0000000000c3']::uuid[]) c, users u;
            -- Both weighed in the week before; only user 2 within the week.
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, weight, submitted_at)
            select '00000000-0000-0000-0000-0000000000c2', id, '2026-03-12', 178, '2026-03-12T08:00:00Z' from users;
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, weight, submitted_at)
            values ('00000000-0000-0000-0000-0000000000c2', '\(Fixture.userID(2))', '2026-03-19', 178, '2026-03-19T08:00:00Z');
            insert into fitcircle_leaderboard_entries (fitcircle_id, user_id, period, period_start, metric_type, metric_value, rank)
            select '00000000-0000-0000-0000-0000000000c2'::uuid, id, 'weekly', '2026-03-16'::date, 'weight_loss_pct', 0, 1 from users
            union all
            select '00000000-0000-0000-0000-0000000000c3'::uuid, id, 'weekly', '2026-03-16'::date, 'steps', 0, 1 from users;
            """)
        let summary = try await weeklyDigest(database, at: at(Self.sunday))
        #expect(summary.counts.succeeded == 2)
        let toOne = try await database.psql("select body from notification_outbox where user_id = '\(Fixture.userID(1))'")
        #expect(!toOne.isEmpty && !toOne.contains("#1") && !toOne.contains("Lean Team") && !toOne.contains("Idle Walkers"), "\(toOne)")
        let toTwo = try await database.psql("select body from notification_outbox where user_id = '\(Fixture.userID(2))' and channel = 'push'")
        #expect(toTwo.contains("#1 in Lean Team") && !toTwo.contains("Idle Walkers"), "\(toTwo)")
    }
}
