import Foundation
import NudgeStandIns
import Testing

@testable import NudgeCore

private func at(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }

/// Runs validate-streaks in this process at `now`, as cron would start it.
@discardableResult
func validateStreaks(_ database: TestDatabase, at now: Date) async throws -> RunSummary {
    try await database.withDatabase { db in
        let options = RunOptions(now: now, nowIsExplicit: true, batchSize: 50)
        return try await JobRunner(
            job: ValidateStreaksJob(definition: jobDefinition("validate-streaks")), options: options,
            database: db, observer: SilentObserver()
        ).run()
    }
}

/// Each user gets what is right for them at the edges (docs/jobs/reminders.md, dispatch.md):
/// nothing after the check-in it asks for, the email when the push reached no device, a weekly
/// pace that is true, a reminder time that is theirs when they wrote it.
@Suite(.dropsItsDatabases) struct ForEachUserTests {
    /// A reminder decided at 20:00 and a check-in made before dispatch sent it; a streak-at-risk
    /// push and email queued at 00:05 for 09:00 and a check-in at 07:30; a submission reminder and
    /// the submission seconds later: none of them is sent, each ends `answered` with why.
    @Test func nothingIsSentAfterTheCheckInOrSubmissionItAsksFor() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start()
        let email = try await ResendStandIn.start()
        defer {
            Task {
                await push.shutdown()
                await email.resend.shutdown()
            }
        }
        let environment = push.environment.merging(email.environment) { mine, _ in mine }
        for n in 1...3 { try await ReminderFixture.user(database, n, zone: "Europe/Paris") }
        let (checker, risky, submitter) = (Fixture.userID(1), Fixture.userID(2), Fixture.userID(3))
        // User 2: a 5-day streak through Sunday 8 November, this week's freeze already used.
        try await database.psql(
            """
            insert into user_streaks (user_id, current_streak, longest_streak, last_checkin_date, freeze_used_this_week,
                                      week_start_date, settled_through, missed_days)
            values ('\(risky)', 5, 5, '2026-11-08', true, '2026-11-09', '2026-11-08', 0);
            insert into daily_tracking (user_id, date, mood, energy, checked_in_at)
            select '\(risky)', d::date, 3, 3, d::date + time '12:00' from generate_series('2026-11-04'::date, '2026-11-08', '1 day') d;
            insert into fitcircles (id, name, challenge_type, timezone, starts_on, ends_on, challenge_step_goal)
            values ('00000000-0000-4000-8000-00000000c001', 'Work Warriors', 'steps', 'Europe/Paris', '2026-11-01', '2026-11-30', 70000);
            insert into fitcircle_members (fitcircle_id, user_id, joined_at)
            values ('00000000-0000-4000-8000-00000000c001', '\(submitter)', '2026-11-01T00:00:00Z');
            """)
        // 00:05 on Tuesday 10 November in Paris: Monday is missed, and at risk.
        try await validateStreaks(database, at: at("2026-11-09T23:05:00Z"))
        try await reminders(database, at: at("2026-11-09T23:15:00Z"))
        #expect(
            try await database.value(
                """
                select string_agg(notification_type || ':' || channel || ':' || local_day, ',' order by channel)
                  from notification_outbox where user_id = '\(risky)'
                """) == "streak_at_risk:email:2026-11-10,streak_at_risk:push:2026-11-10")
        // 07:30: user 2 checks in; 09:00, dispatch.
        try await database.psql(
            """
            insert into daily_tracking (user_id, date, mood, energy, checked_in_at) values ('\(risky)', '2026-11-10', 4, 4, '2026-11-10T06:30:00Z')
            """)
        _ = try await dispatch(database, environment: environment, at: at("2026-11-10T08:00:00Z"))
        // 20:00: the check-in and submission reminders; a check-in and a submission seconds later.
        try await reminders(database, at: at("2026-11-10T19:00:00Z"))
        #expect(try await database.count("select count(*) from notification_outbox where notification_type in ('daily_checkin', 'data_submission')") >= 2)
        try await database.psql(
            """
            insert into daily_tracking (user_id, date, mood, energy, checked_in_at) values ('\(checker)', '2026-11-10', 4, 4, '2026-11-10T19:00:30Z');
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, steps, submitted_at)
            values ('00000000-0000-4000-8000-00000000c001', '\(submitter)', '2026-11-10', 9000, '2026-11-10T19:00:20Z');
            """)
        _ = try await dispatch(database, environment: environment, at: at("2026-11-10T19:01:00Z"))
        #expect(
            try await database.value(
                """
                select string_agg(notification_type || ':' || channel, ',' order by notification_type, channel)
                  from notification_outbox where status = 'suppressed' and last_error like 'answered: %'
                """) == "daily_checkin:push,data_submission:push,streak_at_risk:email,streak_at_risk:push")
        #expect(
            try await database.value("select last_error from notification_outbox where user_id = '\(risky)' and channel = 'push'")
                == "answered: the user checked in for 2026-11-10 at 2026-11-10T06:30:00Z, which it asks for")
        // User 3's check-in reminder still went: only the submission was made.
        #expect(
            try await database.value("select string_agg(notification_type, ',') from notification_outbox where status = 'sent'")
                == "daily_checkin")
        #expect(push.apns.requests.count == 1)
        #expect(email.resend.requestCount == 0)
    }

    /// The check-in push decided at 20:00 ends without reaching a device: user 1's only iPhone is
    /// unregistered, user 2 turned push off before it went. Each gets the email at 21:00; user 3,
    /// whose push went, does not.
    @Test func aCheckInPushThatReachedNoDeviceIsFollowedByTheEmailAt21() async throws {
        let database = try await TestDatabase.fresh()
        let gone = Outbox.iosToken(1)
        let push = try await PushStandIns.start(apns: { $0.deviceToken == gone ? .reject(status: 410, reason: "Unregistered") : .accept })
        let email = try await ResendStandIn.start()
        defer {
            Task {
                await push.shutdown()
                await email.resend.shutdown()
            }
        }
        let environment = push.environment.merging(email.environment) { mine, _ in mine }
        for n in 1...3 { try await ReminderFixture.user(database, n, zone: "Europe/Paris") }
        try await reminders(database, at: at("2026-11-10T19:00:00Z"))   // 20:00 in Paris
        try await database.psql("insert into notification_preferences (user_id, push_enabled) values ('\(Fixture.userID(2))', false)")
        _ = try await dispatch(database, environment: environment, at: at("2026-11-10T19:01:00Z"))
        #expect(
            try await database.value(
                """
                select string_agg(status, ',' order by user_id) from notification_outbox where notification_type = 'daily_checkin'
                """
            ).split(separator: ",").map(String.init)
                == ["failed", "suppressed", "sent"].sortedLike(
                    [Fixture.userID(1), Fixture.userID(2), Fixture.userID(3)]))
        // Dispatch's update made users 1 and 2 due; their email waits for 21:00.
        try await reminders(database, at: at("2026-11-10T19:15:00Z"))
        #expect(try await database.count("select count(*) from notification_outbox where channel = 'email' and notification_type = 'daily_checkin'") == 0)
        try await reminders(database, at: at("2026-11-10T20:00:00Z"))   // 21:00
        #expect(
            try await database.value(
                """
                select string_agg(user_id::text || ' ' || (deliver_after at time zone 'Europe/Paris')::text, ',' order by user_id)
                  from notification_outbox where channel = 'email' and notification_type = 'daily_checkin'
                """) == [1, 2].map { "\(Fixture.userID($0)) 2026-11-10 21:00:00" }.sorted().joined(separator: ","))
        #expect(
            try await database.value("select detail from job_work where job = 'reminders:daily_checkin_email' and user_id = '\(Fixture.userID(2))'")
                .hasPrefix("21:00 after the push reached no device (preferences: push notifications are off"))
        _ = try await dispatch(database, environment: environment, at: at("2026-11-10T20:01:00Z"))
        #expect(Set(email.resend.sent.flatMap(\.to)) == ["user1@example.test", "user2@example.test"])
        // Nothing twice: the next runs decide nothing more.
        try await reminders(database, at: at("2026-11-10T21:00:00Z"))
        #expect(try await database.count("select count(*) from notification_outbox where channel = 'email'") == 2)
    }

    /// Wednesday 18:00 is 39 % of the week: 40 % of the goal is on pace (nothing), 30 % is behind
    /// (told, truthfully), and a user with no steps this week is told nothing.
    @Test func weeklyProgressIsMeasuredAgainstTheShareOfTheWeekGone() async throws {
        let database = try await TestDatabase.fresh()
        for (n, steps) in [(1, 20_000), (2, 15_000), (3, 0)] {
            try await ReminderFixture.user(database, n, zone: "Europe/Paris")
            let id = Fixture.userID(n)
            try await database.psql(
                """
                insert into weekly_goals (user_id, week_start, goal_type, target_value) values ('\(id)', '2026-11-09', 'steps', 50000);
                insert into daily_tracking (user_id, date, steps) values ('\(id)', '2026-11-09', \(steps / 2)), ('\(id)', '2026-11-10', \(steps - steps / 2));
                """)
        }
        try await reminders(database, at: at("2026-11-11T17:00:00Z"))   // Wednesday 18:00 in Paris
        #expect(
            try await database.value(
                """
                select string_agg(w.outcome || ': ' || w.detail, ' | ' order by u.n)
                  from job_work w join (values ('\(Fixture.userID(1))'::uuid, 1), ('\(Fixture.userID(2))'::uuid, 2), ('\(Fixture.userID(3))'::uuid, 3)) u(id, n)
                    on u.id = w.user_id
                 where w.job = 'reminders:weekly_goal_progress'
                """) == "not_needed: on pace: 40% of 50000 steps with 39% of the week gone | push: behind: 30% of 50000 steps with 39% of the week gone"
                + " | no_steps: no steps recorded this week (since 2026-11-09)")
        #expect(
            try await database.value("select user_id || ' ' || body from notification_outbox where notification_type = 'weekly_goal_progress'")
                == "\(Fixture.userID(2)) The week is 39% gone and you're at 30% of your step goal. You've got this!")
    }

    /// validate-streaks catching up two days in one write (a check-in, then a miss at risk) leaves
    /// `missed_days` at 1 as it was: the user is due for reminders all the same, and the email goes
    /// for 09:00.
    @Test func aCatchUpThatLeavesMissedDaysAtOneStillMakesTheStreakEmailDue() async throws {
        let database = try await TestDatabase.fresh()
        try await ReminderFixture.user(database, 1, zone: "Europe/Paris")
        let id = Fixture.userID(1)
        try await database.psql(
            """
            insert into user_streaks (user_id, current_streak, longest_streak, last_checkin_date, freeze_used_this_week,
                                      week_start_date, settled_through, missed_days)
            values ('\(id)', 5, 5, '2026-11-07', true, '2026-11-02', '2026-11-08', 1);
            insert into daily_tracking (user_id, date, mood, energy, checked_in_at) values ('\(id)', '2026-11-09', 3, 3, '2026-11-09T12:00:00Z');
            """)
        // 20:00 on the 10th: the day's reminder, and the user's next instant is tomorrow evening.
        try await reminders(database, at: at("2026-11-10T19:00:00Z"))
        #expect(try await database.count("select count(*) from job_due where job = 'reminders' and due_at > '2026-11-11T12:00:00Z'") == 1)
        // This week's freeze went already; validate-streaks runs late, at 01:00 on the 11th, and
        // settles the 9th (a check-in) and the 10th (missed: at risk) in one write.
        try await database.psql("update user_streaks set freeze_used_this_week = true, week_start_date = '2026-11-09' where user_id = '\(id)'")
        try await validateStreaks(database, at: at("2026-11-11T00:00:00Z"))
        #expect(
            try await database.value(
                """
                select string_agg(local_day || ' ' || outcome, ',' order by local_day) from job_work where job = 'validate-streaks'
                """) == "2026-11-09 checked_in,2026-11-10 at_risk")
        #expect(try await database.value("select missed_days from user_streaks") == "1")
        #expect(try await database.count("select count(*) from job_due where job = 'reminders' and due_at <= 'epoch'") == 1)
        try await reminders(database, at: at("2026-11-11T00:15:00Z"))
        #expect(
            try await database.value(
                """
                select (deliver_after at time zone 'Europe/Paris')::text from notification_outbox where channel = 'email' and notification_type = 'streak_at_risk'
                """) == "2026-11-11 09:00:00")
    }

    /// Every write of `daily_reminder_time` is the user's choice, 20:00 included; writing null
    /// goes back to Nudge's time; a row written back unchanged keeps when the choice was made.
    @Test func everyWriteOfAReminderTimeIsTheUsersChoice() async throws {
        let database = try await TestDatabase.fresh()
        for n in 1...3 { try await ReminderFixture.user(database, n, zone: "UTC") }
        let (a, b, c) = (Fixture.userID(1), Fixture.userID(2), Fixture.userID(3))
        try await database.psql(
            """
            insert into notification_preferences (user_id, daily_reminder_time) values ('\(a)', '20:00');
            insert into notification_preferences (user_id) values ('\(b)');
            insert into notification_preferences (user_id, daily_reminder_time) values ('\(c)', default);
            """)
        func chosen() async throws -> String {
            try await database.value(
                """
                select string_agg(to_char(daily_reminder_time, 'HH24:MI') || ' ' || (reminder_time_set_at is not null), ',' order by user_id)
                  from notification_preferences where user_id in ('\(a)', '\(b)', '\(c)')
                """)
        }
        func inOrder(_ values: [String]) -> String {
            zip([a, b, c], values).sorted { $0.0 < $1.0 }.map(\.1).joined(separator: ",")
        }
        await #expect(try chosen() == inOrder(["20:00 true", "20:00 false", "20:00 false"]))
        // The app writes 20:00 for user 2: a choice. A whole row written back unchanged keeps its instant.
        try await database.psql("update notification_preferences set daily_reminder_time = '20:00' where user_id = '\(b)'")
        let stamp = try await database.value("select reminder_time_set_at from notification_preferences where user_id = '\(b)'")
        try await database.psql("update notification_preferences set daily_reminder_time = '20:00', push_enabled = true where user_id = '\(b)'")
        #expect(try await database.value("select reminder_time_set_at from notification_preferences where user_id = '\(b)'") == stamp)
        // User 1 goes back to Nudge's time.
        try await database.psql("update notification_preferences set daily_reminder_time = null where user_id = '\(a)'")
        await #expect(try chosen() == inOrder(["20:00 false", "20:00 true", "20:00 false"]))
        // Another column written: nothing chosen.
        try await database.psql("update notification_preferences set push_enabled = true where user_id = '\(c)'")
        await #expect(try chosen() == inOrder(["20:00 false", "20:00 true", "20:00 false"]))
        // User 2's 20:00 is theirs: their morning check-ins do not move it; user 1's are learned from.
        try await database.psql(
            """
            insert into daily_tracking (user_id, date, mood, energy, checked_in_at)
            select u, d::date, 3, 3, d::date + time '09:00' from unnest(array['\(a)', '\(b)']::uuid[]) u,
                   generate_series('2026-10-13'::date, '2026-11-09', '1 day') d
            """)
        try await reminders(database, at: at("2026-11-10T08:15:00Z"))
        try await reminders(database, at: at("2026-11-10T20:00:00Z"))
        #expect(
            try await database.value("select detail from job_work where job = 'reminders:daily_checkin' and user_id = '\(b)'")
                == "20:00: the user's own reminder time")
        #expect(
            try await database.value("select detail from job_work where job = 'reminders:daily_checkin' and user_id = '\(a)'")
                == "08:15: 45 min before the user's median check-in 09:00 over 28 days")
        #expect(
            try await database.value("select detail from job_work where job = 'reminders:daily_checkin' and user_id = '\(c)'")
                .hasPrefix("20:00: the default"))
    }

    /// Check-ins read in the zone each was made in: a user who moved from New York to Paris ten
    /// days ago and checks in at 21:00 wherever they are is reminded at 20:15; one who checks in
    /// around midnight has a median at midnight, not at noon.
    @Test func learnedTimesFollowEachCheckInsZoneAndWrapMidnight() async throws {
        let database = try await TestDatabase.fresh()
        try await ReminderFixture.user(database, 1, zone: "America/New_York")
        try await ReminderFixture.user(database, 2, zone: "UTC")
        let (mover, owl) = (Fixture.userID(1), Fixture.userID(2))
        // The trigger keeps the zone left; the test puts the move at its simulated instant.
        try await database.psql("update users set timezone = 'Europe/Paris' where id = '\(mover)'")
        #expect(try await database.value("select timezone from user_timezone_history where user_id = '\(mover)'") == "America/New_York")
        try await database.psql(
            """
            update user_timezone_history set valid_until = '2026-10-31T12:00:00Z' where user_id = '\(mover)';
            insert into daily_tracking (user_id, date, mood, energy, checked_in_at)
            select '\(mover)', d::date, 3, 3,
                   (d::date + time '21:00') at time zone case when d < '2026-10-31' then 'America/New_York' else 'Europe/Paris' end
              from generate_series('2026-10-13'::date, '2026-11-09', '1 day') d;
            insert into notification_preferences (user_id, dnd_start, dnd_end) values ('\(owl)', '00:00', '00:00');
            insert into daily_tracking (user_id, date, mood, energy, checked_in_at)
            select '\(owl)', d::date, 3, 3,
                   case when extract(doy from d)::int % 2 = 0 then d::date + time '00:10' else d::date + time '23:50' end
              from generate_series('2026-10-13'::date, '2026-11-09', '1 day') d;
            """)
        try await reminders(database, at: at("2026-11-10T19:30:00Z"))   // 20:30 in Paris, 19:30 in UTC
        try await reminders(database, at: at("2026-11-10T22:00:00Z"))
        #expect(
            try await database.value("select detail from job_work where job = 'reminders:daily_checkin' and user_id = '\(mover)'")
                == "20:15: 45 min before the user's median check-in 21:00 over 28 days")
        let owlsTime = try await database.value("select detail from job_work where job = 'reminders:daily_checkin' and user_id = '\(owl)'")
        #expect(owlsTime.hasPrefix("22:00: 45 min before the user's median check-in 00:00 over 28 days"), "\(owlsTime)")
    }

    /// Reminded at 07:00 every morning, a user whose habit moved to 21:00 (14 hours after the
    /// reminder, no answer to it) is followed there, and so is one who now checks in at 07:55 (in
    /// the hour after it, but later than it aimed at); another who answers it within minutes keeps
    /// 07:00.
    @Test func aHabitThatMovesLaterIsFollowedAndAPromptAnswerIsNot() async throws {
        let database = try await TestDatabase.fresh()
        for n in 1...3 { try await ReminderFixture.user(database, n, zone: "UTC") }
        let (mover, answerer, later) = (Fixture.userID(1), Fixture.userID(2), Fixture.userID(3))
        let everyone = "array['\(mover)', '\(answerer)', '\(later)']::uuid[]"
        try await database.psql(
            """
            insert into notification_preferences (user_id, dnd_start, dnd_end) select u, '00:00', '00:00' from unnest(\(everyone)) u;
            -- 13 days at 07:45 before any reminder, then 15 days reminded at 07:00.
            insert into daily_tracking (user_id, date, mood, energy, checked_in_at)
            select u, d::date, 3, 3,
                   case when d < '2026-10-27' then d::date + time '07:45'
                        when u = '\(mover)' then d::date + time '21:00'
                        when u = '\(later)' then d::date + time '07:55' else d::date + time '07:03' end
              from unnest(\(everyone)) u, generate_series('2026-10-14'::date, '2026-11-10', '1 day') d;
            insert into notification_outbox (dedupe_key, job, user_id, local_day, notification_type, deliver_after, title, body, payload,
                                             status, sent_at, next_attempt_at)
            select 'reminders:' || u || ':' || d::date || ':daily_checkin', 'reminders', u, d::date, 'daily_checkin',
                   d::date + time '07:00', 't', 'b', '{}', 'sent', d::date + time '07:00:30', 'infinity'
              from unnest(\(everyone)) u, generate_series('2026-10-27'::date, '2026-11-10', '1 day') d;
            """)
        try await reminders(database, at: at("2026-11-11T06:00:00Z"))
        try await reminders(database, at: at("2026-11-11T07:00:00Z"))
        try await reminders(database, at: at("2026-11-11T07:15:00Z"))
        try await reminders(database, at: at("2026-11-11T20:15:00Z"))
        #expect(
            try await database.value("select detail from job_work where job = 'reminders:daily_checkin' and user_id = '\(mover)'")
                == "20:15: 45 min before the user's median check-in 21:00 over 28 days")
        #expect(
            try await database.value("select detail from job_work where job = 'reminders:daily_checkin' and user_id = '\(later)'")
                == "07:10: 45 min before the user's median check-in 07:55 over 28 days")
        #expect(
            try await database.value("select detail from job_work where job = 'reminders:daily_checkin' and user_id = '\(answerer)'")
                == "07:00: 45 min before the user's median check-in 07:45 over 28 days "
                + "(15 prompted by the reminder, counted at the time it aimed at)")
    }

    /// A user with no row in the due index (a load that bypassed the triggers): `nudge runs` counts
    /// them, the weekly sweep reads them, gives them a row and says so; and the sweep sends
    /// nothing late to a user whose reminder time a change moved into the past.
    @Test func aUserTheDueIndexLacksIsCountedAndTheSweepGivesThemARow() async throws {
        let database = try await TestDatabase.fresh()
        try await ReminderFixture.user(database, 1, zone: "Asia/Tokyo")
        try await ReminderFixture.user(database, 2, zone: "Asia/Tokyo")
        try await database.psql(
            """
            set session_replication_role = replica;
            insert into users (id, timezone, locale, created_at, email) values ('\(Fixture.userID(3))', 'Asia/Tokyo', 'en', '2026-01-01', 'user3@example.test');
            insert into user_push_tokens (user_id, device_token, platform) values ('\(Fixture.userID(3))', '\(Outbox.iosToken(3))', 'ios');
            """)
        let now = "2026-11-11T04:50:00Z"   // a Wednesday, 13:50 in Tokyo
        try await reminders(database, at: at("2026-11-11T01:00:00Z"))   // 10:00: everyone indexed is decided
        // User 2 moves their reminder time to 07:00 at 10:05: decided again, 07:00 is not sent late.
        try await database.psql("insert into notification_preferences (user_id, daily_reminder_time) values ('\(Fixture.userID(2))', '07:00')")
        try await reminders(database, at: at("2026-11-11T01:15:00Z"))
        let runs = try await database.nudge(["runs"])
        #expect(runs.stdout.contains("NOT INDEXED: 1 users have no row in the due index of reminders,"), "\(runs.stdout)\(runs.stderr)")
        let sweep = try await database.nudge(["run", "reminders", "--sweep", "--now", now, "--json"], environment: digestEnvironment())
        #expect(sweep.status == 0, "\(sweep.stderr)")
        let summary = try JSONSerialization.jsonObject(with: Data(sweep.stdout.utf8)) as? [String: Any]
        #expect((summary?["tally"] as? [String: Int])?["index_row_added"] == 1, "\(sweep.stdout)")
        #expect(sweep.stderr.contains("1 users had no row in it and have one now"))
        #expect(sweep.stderr.contains("the due index missed nothing"))
        #expect(try await database.count("select count(*) from job_due where job = 'reminders'") == 3)
        #expect(try await database.count("select count(*) from notification_outbox where user_id = '\(Fixture.userID(2))'") == 0)
        let after = try await database.nudge(["runs"])
        #expect(!after.stdout.contains("due index of reminders"))
        #expect(after.stdout.contains("NOT INDEXED: 1 users have no row in the due index of validate-streaks,"))
    }
}

extension Array where Element == String {
    /// These values in the order their keys sort in.
    fileprivate func sortedLike(_ keys: [String]) -> [String] { zip(keys, self).sorted { $0.0 < $1.0 }.map(\.1) }
}
