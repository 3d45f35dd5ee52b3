import Foundation
import Testing

@Suite(.dropsItsDatabases) struct SeedTests {
    private let seedArguments = ["seed", "--users", "300", "--seed", "11", "--now", "2026-03-18T12:00:00Z"]

    @Test func theSameArgumentsGiveTheSameRowsIdsIncluded() async throws {
        let first = try await TestDatabase.fresh()
        let second = try await TestDatabase.fresh()
        let other = try await TestDatabase.fresh()
        let result = try await first.nudge(seedArguments)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("seeded 300 users"))
        #expect(try await second.nudge(seedArguments).status == 0)
        #expect(try await other.nudge(["seed", "--users", "300", "--seed", "12", "--now", "2026-03-18T12:00:00Z"]).status == 0)
        let ledger: Set<String> = ["nudge_migrations"]
        #expect(try await first.dump(excluding: ledger) == second.dump(excluding: ledger))
        #expect(try await first.dump(excluding: ledger) != other.dump(excluding: ledger))
    }

    @Test func theDataIsSpreadOverTheZonesThatMatter() async throws {
        let database = try await TestDatabase.fresh()
        #expect(try await database.nudge(seedArguments).status == 0)
        #expect(try await database.count("select count(distinct timezone) from users") >= 30)
        for zone in [
            "America/New_York", "Europe/Paris", "Australia/Lord_Howe", "Asia/Kolkata", "Asia/Kathmandu",
            "Pacific/Kiritimati", "Pacific/Pago_Pago", "Pacific/Chatham",
        ] {
            #expect(try await database.count("select count(*) from users where timezone = '\(zone)'") > 0, "\(zone)")
        }
        #expect(try await database.psql("select string_agg(distinct locale, ',' order by locale) from users") == "en,fr")
        #expect(try await database.count("select count(*) from daily_tracking where checked_in_at > '2026-03-18T12:00:00Z'") == 0)
        for table in [
            "daily_tracking", "user_streaks", "fitcircles", "fitcircle_members", "user_push_tokens", "messages",
            "context_profiles", "pattern_cache", "scheduled_calls", "notification_preferences", "push_log",
        ] {
            #expect(try await database.count("select count(*) from \(table)") > 0, "\(table)")
        }
        #expect(try await database.count("select count(*) from job_runs") + database.count("select count(*) from notification_outbox") == 0)
        // The load runs without triggers: it writes each call's preview due time itself, as they would.
        #expect(
            try await database.count(
                """
                select count(*) from scheduled_calls c join users u on u.id = c.user_id
                 where c.preview_due_at is distinct from c.scheduled_at - make_interval(mins => u.notification_lead_min)
                """) == 0)
    }

    @Test func seedingRefusesADatabaseThatHasUsers() async throws {
        let database = try await TestDatabase.fresh()
        #expect(try await database.nudge(seedArguments).status == 0)
        let before = try await database.dump()
        let again = try await database.nudge(seedArguments)
        #expect(again.status == 1)
        #expect(again.stderr.contains("the database already has users"))
        #expect(try await database.dump() == before)
        #expect(try await database.nudge(["seed", "--users", "0"]).status == 64)
    }

    /// The seeded streak rows are validate-streaks' own: settling one more day on the seeded rows
    /// ends exactly where replaying every user's whole history from scratch ends.
    @Test func seededStreaksAreWhatTheJobWouldHaveComputed() async throws {
        let seeded = try await TestDatabase.fresh()
        let replayed = try await TestDatabase.fresh()
        #expect(try await seeded.nudge(seedArguments).status == 0)
        #expect(try await replayed.nudge(seedArguments).status == 0)
        // Back to a fresh streak row settled through the day before each user's local sign-up day.
        try await replayed.psql(
            """
            delete from user_badges;
            update daily_tracking set streak_day = null;
            update user_streaks s
               set current_streak = 0, longest_streak = 0, last_checkin_date = null, freeze_used_this_week = false,
                   week_start_date = null, missed_days = 0,
                   settled_through = (u.created_at at time zone coalesce(u.timezone, 'UTC'))::date - 1
              from users u where u.id = s.user_id;
            """)

        let run = ["run", "validate-streaks", "--now", "2026-03-18T12:00:00Z"]
        let incremental = try await seeded.nudge(run)
        #expect(incremental.status == 0, "\(incremental.stderr)")
        let full = try await replayed.nudge(run)
        #expect(full.status == 0, "\(full.stderr)")
        let streaks =
            "select user_id, current_streak, longest_streak, last_checkin_date, freeze_used_this_week, week_start_date, settled_through, missed_days from user_streaks order by user_id"
        #expect(try await seeded.psql(streaks) == replayed.psql(streaks))
        #expect(
            try await seeded.psql("select user_id, date, streak_day from daily_tracking order by 1, 2")
                == replayed.psql("select user_id, date, streak_day from daily_tracking order by 1, 2"))
        #expect(
            try await seeded.psql("select user_id, badge, earned_at from user_badges order by 1, 2")
                == replayed.psql("select user_id, badge, earned_at from user_badges order by 1, 2"))
        #expect(
            try await seeded.psql("select dedupe_key, deliver_after, title from notification_outbox order by 1")
                == replayed.psql("select dedupe_key, deliver_after, title from notification_outbox order by 1"))
        // The seeded run settled one local day per user whose day had ended.
        #expect(try await seeded.count("select count(*) from job_work") == seeded.count("select count(distinct user_id) from job_work"))
    }
}
