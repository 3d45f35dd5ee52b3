import Foundation
import Logging
import PostgresNIO
import Testing

@testable import NudgeCore

private func at(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }

private func iso(_ date: Date) -> String { ISO8601DateFormatter().string(from: date) }

/// Runs reminders in this process at `now`, as cron would start it.
@discardableResult
func reminders(
    _ database: TestDatabase, at now: Date, window: DayWindow? = nil, users: [UUID] = [],
    batchSize: Int = 50
) async throws -> RunSummary {
    try await database.withDatabase { db in
        let job = RemindersJob(definition: jobDefinition("reminders"), email: try testEmailSetup(ReminderEmail.template))
        let options = RunOptions(now: now, nowIsExplicit: true, window: window, users: users, batchSize: batchSize, concurrency: 1)
        return try await JobRunner(job: job, options: options, database: db, observer: SilentObserver()).run()
    }
}

enum ReminderFixture {
    /// User n in `zone` with an address, signed up long ago, with an iPhone unless `device` is false.
    static func user(
        _ database: TestDatabase, _ n: Int, zone: String, locale: String = "en", device: Bool = true,
        signup: String = "2026-01-01T00:00:00Z"
    ) async throws {
        try await Outbox.user(database, n, zone: zone, locale: locale, ios: device ? 1 : 0, signup: signup)
        try await database.psql("update users set email = 'user\(n)@example.test' where id = '\(Fixture.userID(n))'")
    }
}

@Suite(.serialized, .dropsItsDatabases) struct RemindersScheduleTests {
    /// Two weeks of cron every 15 minutes over the end of daylight saving time in Europe (25
    /// October) and the United States (1 November), for users in Paris, New York, Kolkata and
    /// Auckland. Check-ins are written as the app writes them, when they are made: user 1 checks in
    /// at 19:59 every day, user 2 at 20:01, user 3 on even days only at 12:00, user 4 (no device)
    /// never, user 5 (Auckland) never. Each local 20:00 is worked out by PostgreSQL's own time zone
    /// rules, not Nudge's calendar.
    @Test func fourteenDaysOfCronSendEachReminderWhenAndAsOftenAsItsRuleSays() async throws {
        let database = try await TestDatabase.fresh()
        let zones = [1: "Europe/Paris", 2: "America/New_York", 3: "Asia/Kolkata", 4: "Europe/Paris", 5: "Pacific/Auckland"]
        for (n, zone) in zones.sorted(by: { $0.key < $1.key }) {
            try await ReminderFixture.user(database, n, zone: zone, device: n != 4)
        }
        let first = "2026-10-20"
        let last = "2026-11-02"
        // The check-ins to come, written as their time passes.
        try await database.psql(
            """
            create table planned_checkins as
            select u.id as user_id, d::date as date,
                   ((d::date + case u.n when 1 then time '19:59' when 2 then time '20:01' else time '12:00' end) at time zone u.tz) as at
              from (values ('\(Fixture.userID(1))'::uuid, 1, 'Europe/Paris'), ('\(Fixture.userID(2))'::uuid, 2, 'America/New_York'),
                           ('\(Fixture.userID(3))'::uuid, 3, 'Asia/Kolkata')) u(id, n, tz)
             cross join generate_series('\(first)'::date, '\(last)'::date, '1 day') d
             where u.n <> 3 or extract(day from d)::int % 2 = 0
            """)
        var now = at("2026-10-20T00:00:00Z")
        let end = at("2026-11-03T00:00:00Z")
        var written = Date.distantPast
        var skipped = 0
        let checkIns = try await database.value("select string_agg(extract(epoch from at)::bigint::text, ',') from planned_checkins")
            .split(separator: ",").compactMap { Double($0) }.map { Date(timeIntervalSince1970: $0) }
        try await database.pinned { database in
            while now < end {
                if checkIns.contains(where: { $0 > written && $0 <= now }) {
                    try await database.psql(
                        """
                        insert into daily_tracking (user_id, date, mood, energy, steps, checked_in_at)
                        select user_id, date, 4, 3, 6000, at from planned_checkins where at <= '\(iso(now))' and at > '\(iso(written))'
                        """)
                    written = now
                }
                if try await database.anyoneDue(for: "reminders", at: now) {
                    let summary = try await reminders(database, at: now)
                    #expect(summary.counts.failed == 0)
                } else {
                    // One in eight of the runs skipped as reading nobody is run: it does read nobody.
                    skipped += 1
                    if skipped % 8 == 0 { #expect(try await reminders(database, at: now).counts.processed == 0, "\(now)") }
                }
                now = now.addingTimeInterval(15 * 60)
            }
        }
        // The days whose 20:00 (21:00 for the email) fell inside the two weeks, by PostgreSQL.
        func expected(_ n: Int, at time: String, when condition: String = "true") async throws -> String {
            try await database.value(
                """
                select string_agg(to_char((d::date + time '\(time)') at time zone '\(zones[n]!)', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), ',' order by d)
                  from generate_series('2026-10-19'::date, '2026-11-03'::date, '1 day') d
                 where (d::date + time '\(time)') at time zone '\(zones[n]!)' >= '2026-10-20T00:00:00Z'
                   and (d::date + time '\(time)') at time zone '\(zones[n]!)' < '2026-11-03T00:00:00Z' and \(condition)
                """)
        }
        func queued(_ n: Int, channel: String = "push") async throws -> String {
            try await database.value(
                """
                select coalesce(string_agg(to_char(deliver_after at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), ',' order by deliver_after), '')
                  from notification_outbox where user_id = '\(Fixture.userID(n))' and notification_type = 'daily_checkin' and channel = '\(channel)'
                """)
        }
        // 19:59: never reminded; 20:01: reminded every day, at 20:00 in their zone, across the change.
        await #expect(try queued(1) == "")
        #expect(
            try await database.count(
                "select count(*) from job_work where user_id = '\(Fixture.userID(1))' and job = 'reminders:daily_checkin' and outcome = 'not_needed'") == 14)
        await #expect(try queued(2) == (try expected(2, at: "20:00")))
        await #expect(try queued(2).split(separator: ",").count == 14)
        // Every other day: the odd days of Kolkata, and only them.
        await #expect(try queued(3) == (try expected(3, at: "20:00", when: "extract(day from d)::int % 2 = 1")))
        // No device: the email at 21:00 and no push.
        await #expect(try queued(4) == "")
        await #expect(try queued(4, channel: "email") == (try expected(4, at: "21:00")))
        await #expect(try queued(5) == (try expected(5, at: "20:00")))
        // Never two for one day, whatever the number of runs.
        #expect(
            try await database.count(
                """
                select count(*) from (select user_id, local_day, channel from notification_outbox where notification_type = 'daily_checkin'
                                       group by 1, 2, 3 having count(*) > 1) d
                """) == 0)
        // Wednesday 18:00: no weekly goal, nothing queued, and the mark says why.
        #expect(try await database.count("select count(*) from notification_outbox where notification_type = 'weekly_goal_progress'") == 0)
        #expect(try await database.count("select count(*) from job_work where job = 'reminders:weekly_goal_progress' and outcome = 'no_goal'") == 10)
    }

    /// A 6-hour gap in cron: the reminder of 20:00 goes at the next run, still inside its day, once;
    /// a gap past midnight leaves yesterday's unsent.
    @Test func aGapInCronIsCaughtUpInsideItsDayAndNeverForThePast() async throws {
        let database = try await TestDatabase.fresh()
        try await ReminderFixture.user(database, 1, zone: "Europe/Paris")
        try await ReminderFixture.user(database, 2, zone: "America/New_York")
        try await reminders(database, at: at("2026-11-10T16:00:00Z"))   // 17:00 in Paris, 11:00 in New York
        try await reminders(database, at: at("2026-11-10T22:00:00Z"))   // 23:00 in Paris, 17:00 in New York
        #expect(
            try await database.value(
                """
                select deliver_after at time zone 'Europe/Paris' from notification_outbox
                 where user_id = '\(Fixture.userID(1))' and notification_type = 'daily_checkin'
                """) == "2026-11-10 20:00:00")
        try await reminders(database, at: at("2026-11-10T22:15:00Z"))
        #expect(try await database.count("select count(*) from notification_outbox where notification_type = 'daily_checkin'") == 1)
        // New York's 20:00 (01:00 UTC) passes in a gap until 06:00 UTC, past its midnight: not sent.
        try await reminders(database, at: at("2026-11-11T06:00:00Z"))
        #expect(try await database.count("select count(*) from notification_outbox where user_id = '\(Fixture.userID(2))'") == 0)
        // …and its next instant is ahead, not in the past.
        #expect(try await database.count("select count(*) from job_due where job = 'reminders' and due_at <= '2026-11-11T06:00:00Z'") == 0)
    }

    /// A run in which nobody's moment has come reads nobody; a trigger makes a changed user due at once.
    @Test func aRunReadsOnlyTheUsersWhoseMomentHasCome() async throws {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 300, signup: "2026-01-01T00:00:00Z", from: "2026-10-20", to: "2026-11-10")
        let first = try await reminders(database, at: at("2026-11-10T12:00:00Z"))
        #expect(first.counts.processed == 300)
        let quiet = try await reminders(database, at: at("2026-11-10T12:05:00Z"))
        #expect(quiet.counts.processed == 0)
        try await database.psql("update users set timezone = 'Asia/Tokyo' where id = '\(Fixture.userID(7))'")
        let changed = try await reminders(database, at: at("2026-11-10T12:06:00Z"))
        #expect(changed.counts.processed == 1)
        // The whole table agrees with the rule: nobody due before the next instant the job set.
        #expect(try await database.count("select count(*) from job_due where job = 'reminders' and due_at <= '2026-11-10T12:06:00Z'") == 0)
    }

    /// A change made while a run decides the user (after its page read them) is not lost: every
    /// trigger moves the instant, even for a user due at once already, so the run's compare-and-set
    /// finds it changed and leaves the user due; joining a circle makes the user due too.
    @Test func aChangeDuringADecisionLeavesTheUserDue() async throws {
        let database = try await TestDatabase.fresh()
        try await ReminderFixture.user(database, 1, zone: "Europe/Paris")
        let id = Fixture.userID(1)
        let read = try await database.value("select due_at from job_due where job = 'reminders' and user_id = '\(id)'")
        try await database.psql("update users set timezone = 'Asia/Tokyo' where id = '\(id)'")
        #expect(
            try await database.count(
                """
                with moved as (update job_due set due_at = '2026-11-11T19:00:00Z' where job = 'reminders' and user_id = '\(id)' and due_at = '\(read)' returning 1)
                select count(*) from moved
                """) == 0)
        #expect(try await database.count("select count(*) from job_due where job = 'reminders' and user_id = '\(id)' and due_at < 'epoch'") == 1)
        try await reminders(database, at: at("2026-11-10T12:00:00Z"))
        #expect(try await database.count("select count(*) from job_due where job = 'reminders' and user_id = '\(id)' and due_at > '2026-11-10T12:00:00Z'") == 1)
        try await database.psql(
            """
            insert into fitcircles (id, name, challenge_type, timezone, starts_on, ends_on, challenge_step_goal)
            values ('00000000-0000-0000-0000-0000000000c2', 'Night Owls', 'steps', 'Asia/Tokyo', '2026-11-01', '2026-11-30', 70000);
            insert into fitcircle_members (fitcircle_id, user_id) values ('00000000-0000-0000-0000-0000000000c2', '\(id)');
            """)
        #expect(try await database.count("select count(*) from job_due where job = 'reminders' and user_id = '\(id)' and due_at = 'epoch'") == 1)
    }

    /// Backfills never send reminders about the past.
    @Test func aBackfillOfPastDaysSendsNothing() async throws {
        let database = try await TestDatabase.fresh()
        try await ReminderFixture.user(database, 1, zone: "Europe/Paris")
        let summary = try await reminders(
            database, at: at("2026-11-10T21:00:00Z"), window: try DayWindow(from: LocalDate(iso8601: "2026-11-01")!, to: LocalDate(iso8601: "2026-11-09")!))
        #expect(summary.counts.succeeded == 0)
        #expect(try await database.count("select count(*) from notification_outbox") == 0)
        #expect(try await database.count("select count(*) from job_work") == 0)
        // …and leaves the user due: the normal run after it decides them.
        #expect(try await database.count("select count(*) from job_due where job = 'reminders' and due_at <= 'epoch'") == 1)
        try await reminders(database, at: at("2026-11-10T21:00:00Z"))
        #expect(try await database.count("select count(*) from job_due where job = 'reminders' and due_at <= 'epoch'") == 0)
    }

    /// `--user` reads those users whatever their instant, once each, and ends; a user Nudge
    /// cannot place in time is skipped with the reason, once a day.
    @Test func aRunForSomeUsersReadsEachOnceAndEnds() async throws {
        let database = try await TestDatabase.fresh()
        try await ReminderFixture.user(database, 1, zone: "Europe/Paris")
        try await ReminderFixture.user(database, 2, zone: "Mars/Olympus")
        try await ReminderFixture.user(database, 3, zone: "Asia/Tokyo")
        let ids = [1, 2].map { UUID(uuidString: Fixture.userID($0))! }
        // (One user a page: the pages follow the ids, whatever the decisions do to the instants.)
        let first = try await reminders(database, at: at("2026-11-10T12:00:00Z"), users: ids, batchSize: 1)
        #expect(first.counts.processed == 2)
        let again = try await reminders(database, at: at("2026-11-10T12:01:00Z"), users: ids, batchSize: 1)
        #expect(again.counts.processed == 2)
        #expect(
            try await database.value("select outcome || ': ' || detail from job_work where job = 'reminders:unplaced'")
                == "skipped: the user's unknown time zone 'Mars/Olympus'")
        #expect(
            try await database.count(
                "select count(*) from job_due where job = 'reminders' and user_id = '\(Fixture.userID(2))' and due_at = '2026-11-11T12:01:00Z'") == 1)
        // The others' instants are untouched by a run for some users.
        #expect(
            try await database.count("select count(*) from job_due where job = 'reminders' and user_id = '\(Fixture.userID(3))' and due_at <= 'epoch'") == 1)
    }

    /// A user the job failed waits an hour instead of failing again at every run (one due at once
    /// after a change too: failing, they would fail the same way a quarter hour later).
    @Test func aFailedUserIsLookedAtAgainAnHourLater() async throws {
        let database = try await TestDatabase.fresh()
        try await ReminderFixture.user(database, 1, zone: "Europe/Paris")
        try await ReminderFixture.user(database, 2, zone: "Europe/Paris")
        try await ReminderFixture.user(database, 3, zone: "Europe/Paris")
        try await database.psql("update job_due set due_at = '2026-11-10T11:45:00Z' where job = 'reminders' and user_id <> '\(Fixture.userID(2))'")
        let now = at("2026-11-10T12:00:00Z")
        let users = [1, 2, 3].map { UUID(uuidString: Fixture.userID($0))! }
        let release = DueSource(job: "reminders").release(
            page: users, changed: [users[2]], failed: [(users[0], "a reason"), (users[1], "a reason")],
            run: RunContext(
                definition: jobDefinition("reminders"), runID: 1, now: now, startedAt: now, clock: FixedClock(now),
                window: nil, dryRun: false, logger: .init(label: "test"), concurrency: 1))
        try await database.withDatabase { db in
            try await db.client.withConnection { connection in
                _ = try await connection.query(try release.statement.query(), logger: db.logger)
            }
        }
        func due(_ n: Int) async throws -> String {
            try await database.value(
                """
                select to_char(due_at at time zone 'UTC', 'YYYY-MM-DD HH24:MI') || ' ' || coalesce(to_char(planned_at at time zone 'UTC', 'HH24:MI'), '-')
                  from job_due where job = 'reminders' and user_id = '\(Fixture.userID(n))'
                """)
        }
        // Both wait an hour; the instant the job had set is kept for the retry to catch up from.
        await #expect(try due(1) == "2026-11-10 13:00 11:45")
        await #expect(try due(2) == "2026-11-10 13:00 -")
        await #expect(try due(3) == "2026-11-10 11:45 -")
    }

    /// A reminder time in the last quarter hour of the day (23:50) is decided by the run of 23:45
    /// and queued for 23:50: the run after it would find its day over. Two days, one each.
    @Test func aReminderTimeInTheLastQuarterHourIsSentEveryDay() async throws {
        let database = try await TestDatabase.fresh()
        try await ReminderFixture.user(database, 1, zone: "Europe/Paris")
        try await database.psql("insert into notification_preferences (user_id, daily_reminder_time) values ('\(Fixture.userID(1))', '23:50')")
        var now = at("2026-11-10T00:00:00Z")
        while now < at("2026-11-12T00:00:00Z") {
            try await reminders(database, at: now)
            now = now.addingTimeInterval(15 * 60)
        }
        #expect(
            try await database.value(
                """
                select string_agg((deliver_after at time zone 'Europe/Paris')::text, ',' order by deliver_after) from notification_outbox
                 where notification_type = 'daily_checkin'
                """) == "2026-11-10 23:50:00,2026-11-11 23:50:00")
        #expect(try await database.count("select count(*) from job_runs where job = 'reminders' and processed > 0") <= 8)
    }

    /// A change that brings a moment long before the instant the job had set into the past does not
    /// send it late (a reminder time moved from 20:00 to 07:00 at 10:00: from tomorrow); the
    /// job's instant is kept across changes and cleared once the job sets the next. A moment that
    /// moved earlier without a change the job hears of is still caught up that day.
    @Test func aChangeDoesNotSendAMomentItBroughtIntoThePast() async throws {
        let database = try await TestDatabase.fresh()
        try await ReminderFixture.user(database, 1, zone: "Europe/Paris")
        try await ReminderFixture.user(database, 2, zone: "Europe/Paris")
        let one = Fixture.userID(1)
        let two = Fixture.userID(2)
        try await reminders(database, at: at("2026-11-10T08:45:00Z"))   // 09:45 in Paris: next, 20:00
        try await database.psql("insert into notification_preferences (user_id, daily_reminder_time) values ('\(one)', '07:00')")
        try await database.psql("update notification_preferences set daily_reminder_time = '07:15' where user_id = '\(one)'")
        #expect(
            try await database.value("select planned_at at time zone 'UTC' from job_due where job = 'reminders' and user_id = '\(one)'")
                == "2026-11-10 19:00:00")
        try await reminders(database, at: at("2026-11-10T09:00:00Z"))
        #expect(try await database.count("select count(*) from notification_outbox where user_id = '\(one)'") == 0)
        #expect(
            try await database.value(
                "select (due_at at time zone 'Europe/Paris')::text || ' ' || coalesce(planned_at::text, '-') from job_due where job = 'reminders' and user_id = '\(one)'"
            )
                == "2026-11-11 07:15:00 -")
        // User 2's reminder time changes without the job hearing of it (the row is written with
        // triggers off, as a bulk load may): read at the instant it had set, the day is caught up.
        try await database.psql(
            """
            set session_replication_role = replica;
            insert into notification_preferences (user_id, daily_reminder_time, reminder_time_set_at) values ('\(two)', '07:00', now());
            """)
        try await reminders(database, at: at("2026-11-10T19:00:00Z"))
        #expect(
            try await database.value("select (deliver_after at time zone 'Europe/Paris')::text from notification_outbox where user_id = '\(two)'")
                == "2026-11-10 07:00:00")
        try await reminders(database, at: at("2026-11-11T06:15:00Z"))
        #expect(
            try await database.value("select (deliver_after at time zone 'Europe/Paris')::text from notification_outbox where user_id = '\(one)'")
                == "2026-11-11 07:15:00")
    }

}

@Suite(.serialized, .dropsItsDatabases) struct RemindersContentTests {
    /// The copy's numbers are the user's, as an independent query reads them, in their language.
    @Test func theCopyCarriesTheUsersNumbersInTheirLanguage() async throws {
        let database = try await TestDatabase.fresh()
        try await ReminderFixture.user(database, 1, zone: "Europe/Paris")
        try await ReminderFixture.user(database, 2, zone: "Europe/Paris", locale: "fr")
        for n in [1, 2] {
            let id = Fixture.userID(n)
            // A 14-day streak settled through yesterday (Tuesday 10 November), a circle running, a
            // weekly goal, Monday's and Tuesday's steps, today's steps synced but not submitted.
            try await database.psql(
                """
                insert into user_streaks (user_id, current_streak, longest_streak, last_checkin_date, settled_through)
                values ('\(id)', 14, 20, '2026-11-10', '2026-11-10');
                insert into weekly_goals (user_id, week_start, goal_type, target_value) values ('\(id)', '2026-11-09', 'steps', 50000);
                insert into daily_tracking (user_id, date, steps) values ('\(id)', '2026-11-09', 6000 + \(n)), ('\(id)', '2026-11-10', 5123),
                       ('\(id)', '2026-11-11', 8234);
                insert into fitcircles (id, name, challenge_type, timezone, starts_on, ends_on, challenge_step_goal)
                values (gen_random_uuid(), 'Work Warriors \(n)', 'steps', 'Europe/Paris', '2026-11-01', '2026-11-30', 70000);
                insert into fitcircle_members (fitcircle_id, user_id, joined_at) select id, '\(id)', '2026-11-01T00:00:00Z'
                  from fitcircles where name = 'Work Warriors \(n)';
                """)
        }
        // Wednesday 11 November, 18:00 in Paris (the goal), then 20:00.
        try await reminders(database, at: at("2026-11-11T17:00:00Z"))
        try await reminders(database, at: at("2026-11-11T19:00:00Z"))
        func body(_ n: Int, _ type: String) async throws -> String {
            try await database.value(
                "select body from notification_outbox where user_id = '\(Fixture.userID(n))' and notification_type = '\(type)' and channel = 'push'")
        }
        for n in [1, 2] {
            let id = Fixture.userID(n)
            let kept = try await database.value("select current_streak from user_streaks where user_id = '\(id)'")
            let steps = try await database.value("select to_char(steps, 'FM999,999') from daily_tracking where user_id = '\(id)' and date = '2026-11-11'")
            let percent = try await database.value(
                """
                select floor(100 * sum(t.steps) / g.target_value)::int from daily_tracking t join weekly_goals g on g.user_id = t.user_id
                 where t.user_id = '\(id)' and t.date between '2026-11-09' and '2026-11-11' group by g.target_value
                """)
            if n == 1 {
                await #expect(try body(n, "daily_checkin") == "Complete your check-in to keep your \(kept)-day streak alive!")
                await #expect(try body(n, "data_submission") == "Submit today's \(steps) steps to your FitCircles before midnight!")
                await #expect(try body(n, "weekly_goal_progress") == "The week is 39% gone and you're at \(percent)% of your step goal. You've got this!")
            } else {
                let french = steps.replacingOccurrences(of: ",", with: "\u{202F}")
                await #expect(try body(n, "daily_checkin") == "Fais ton check-in pour garder ta série de \(kept) jours !")
                await #expect(try body(n, "data_submission") == "Envoie tes \(french) pas du jour à tes FitCircles avant minuit !")
                await #expect(try body(n, "weekly_goal_progress").contains("\(percent)\u{00A0}%"))
            }
        }
    }

    /// The streak-at-risk email goes beside validate-streaks' push, for 09:00, once validate-streaks
    /// has found the miss (its write makes the user due), where the user's email switch allows.
    @Test func theStreakAtRiskEmailGoesBesideThePushWhereItsSwitchAllows() async throws {
        let database = try await TestDatabase.fresh()
        try await ReminderFixture.user(database, 1, zone: "Europe/Paris")
        try await ReminderFixture.user(database, 2, zone: "Europe/Paris", locale: "fr")
        try await ReminderFixture.user(database, 3, zone: "Europe/Paris")
        try await database.psql("insert into email_preferences (user_id, streak_at_risk) values ('\(Fixture.userID(3))', false)")
        for n in [1, 2, 3] {
            try await database.psql(
                """
                insert into user_streaks (user_id, current_streak, longest_streak, last_checkin_date, freeze_used_this_week,
                                          week_start_date, settled_through, missed_days)
                values ('\(Fixture.userID(n))', \(20 + n), 30, '2026-11-09', true, '2026-11-09', '2026-11-09', 0);
                """)
        }
        try await reminders(database, at: at("2026-11-10T22:00:00Z"))
        #expect(try await database.count("select count(*) from job_due where job = 'reminders' and due_at <= 'epoch'") == 0)
        for n in [1, 2, 3] {
            // What validate-streaks writes at 00:05 on the 11th for a miss on the 10th.
            try await database.psql(
                """
                update user_streaks set settled_through = '2026-11-10', missed_days = 1 where user_id = '\(Fixture.userID(n))';
                insert into job_work (job, user_id, local_day, outcome) values ('validate-streaks', '\(Fixture.userID(n))', '2026-11-10', 'at_risk');
                """)
        }
        #expect(try await database.count("select count(*) from job_due where job = 'reminders' and due_at <= 'epoch'") == 3)
        try await reminders(database, at: at("2026-11-10T23:15:00Z"))
        let english = try await database.value("select current_streak from user_streaks where user_id = '\(Fixture.userID(1))'")
        let french = try await database.value("select current_streak from user_streaks where user_id = '\(Fixture.userID(2))'")
        #expect(
            try await database.value(
                """
                select string_agg(u.locale || ' ' || (o.deliver_after at time zone 'Europe/Paris')::text || ' ' || o.title, ',' order by u.locale)
                  from notification_outbox o join users u on u.id = o.user_id where o.notification_type = 'streak_at_risk'
                """) == "en 2026-11-11 09:00:00 ⚠️ Your \(english)-day streak is at risk!,fr 2026-11-11 09:00:00 ⚠️ Ta série de \(french) jours est en danger !")
        #expect(
            try await database.value("select outcome from job_work where job = 'reminders:streak_at_risk_email' and user_id = '\(Fixture.userID(3))'")
                == "no_channel")
        try await reminders(database, at: at("2026-11-11T08:00:00Z"), users: [1, 2, 3].map { UUID(uuidString: Fixture.userID($0))! })
        #expect(try await database.count("select count(*) from notification_outbox where notification_type = 'streak_at_risk'") == 2)
    }

    /// The monthly report on the 1st at 09:00 tells the month before, as an independent query
    /// sums it; a quiet month gets none; the switch holds it.
    @Test func theMonthlyReportTellsTheMonthBefore() async throws {
        let database = try await TestDatabase.fresh()
        for n in 1...3 { try await ReminderFixture.user(database, n, zone: "Europe/Paris") }
        try await database.psql("insert into notification_preferences (user_id, email_monthly_report) values ('\(Fixture.userID(3))', false)")
        for n in [1, 3] {
            try await database.psql(
                """
                insert into daily_tracking (user_id, date, steps, mood, energy)
                select '\(Fixture.userID(n))', d::date, 4000 + extract(day from d)::int * 37, case when extract(day from d)::int % 3 = 0 then 3 end, 3
                  from generate_series('2026-10-01'::date, '2026-10-31'::date, '1 day') d
                """)
        }
        try await reminders(database, at: at("2026-11-01T07:00:00Z"))   // 08:00 in Paris
        try await reminders(database, at: at("2026-11-01T08:00:00Z"))   // 09:00
        let steps = try await database.value(
            "select to_char(sum(steps), 'FM999,999,999') from daily_tracking where user_id = '\(Fixture.userID(1))' and date between '2026-10-01' and '2026-10-31'"
        )
        #expect(
            try await database.value("select title from notification_outbox where notification_type = 'monthly_report'")
                == "📅 Your October 2026 report: \(steps) steps")
        let text = try await database.value("select body from notification_outbox where notification_type = 'monthly_report'")
        let checkIns = try await database.value(
            "select count(*) from daily_tracking where user_id = '\(Fixture.userID(1))' and mood is not null and energy is not null and date between '2026-10-01' and '2026-10-31'"
        )
        #expect(text.contains("- Check-ins: \(checkIns)"))
        #expect(text.contains("- Active days: 31"))
        #expect(
            try await database.value("select string_agg(outcome, ',' order by user_id) from job_work where job = 'reminders:monthly_report'")
                .split(separator: ",").sorted() == ["email", "no_channel", "quiet_month"])
    }

    /// The job's own reading of the switches: a user without a device whose daily check-in email is
    /// off (in either table) gets neither the push nor the email, and the ledger says why; the
    /// welcome email is required and goes with every type switched off.
    @Test func theCheckInEmailObeysItsSwitchesAndTheWelcomeEmailIgnoresThem() async throws {
        let database = try await TestDatabase.fresh()
        try await ReminderFixture.user(database, 1, zone: "Europe/Paris", device: false)
        try await ReminderFixture.user(database, 2, zone: "Europe/Paris", device: false)
        try await ReminderFixture.user(database, 3, zone: "Europe/Paris", device: false, signup: "2026-11-10T19:55:00Z")
        try await database.psql(
            """
            insert into notification_preferences (user_id, email_daily_checkin) values ('\(Fixture.userID(1))', false);
            insert into email_preferences (user_id, daily_checkin_reminder) values ('\(Fixture.userID(2))', false);
            insert into email_preferences (user_id, daily_checkin_reminder, streak_at_risk, weekly_digest, monthly_report,
                                           fitcircle_invites, challenge_milestones)
            values ('\(Fixture.userID(3))', false, false, false, false, false, false);
            """)
        try await reminders(database, at: at("2026-11-10T19:00:00Z"))
        try await reminders(database, at: at("2026-11-10T20:00:00Z"))   // 21:00 in Paris
        #expect(try await database.value("select string_agg(notification_type || ':' || channel, ',') from notification_outbox") == "welcome:email")
        #expect(
            try await database.value(
                "select string_agg(outcome, ',') from job_work where job = 'reminders:daily_checkin' and user_id <> '\(Fixture.userID(3))'")
                == "no_channel,no_channel")
    }

    /// A user who checks in at about 07:10 every day, without a reminder time of their own: 45
    /// minutes before is 06:25, inside the default quiet hours (22:00–08:00), so the reminder
    /// goes at 08:00, their end, and not at all to a second such user who checked in at 07:30;
    /// the ledger says which time and why. Writing 20:00 is a choice like any other time.
    @Test func aLearnedReminderTimeInsideQuietHoursGoesAtTheirEnd() async throws {
        let database = try await TestDatabase.fresh()
        for n in [1, 2] {
            try await ReminderFixture.user(database, n, zone: "America/New_York")
            try await database.psql(
                """
                insert into daily_tracking (user_id, date, mood, energy, checked_in_at)
                select '\(Fixture.userID(n))', d::date, 4, 4,
                       (d::date + time '07:05' + (extract(day from d)::int % 13) * interval '1 minute') at time zone 'America/New_York'
                  from generate_series('2026-10-21'::date, '2026-11-10'::date, '1 day') d
                """)
        }
        let id = Fixture.userID(1)
        // A row inserted without a reminder time: the default, not a choice.
        try await database.psql("insert into notification_preferences (user_id) values ('\(id)')")
        #expect(try await database.value("select daily_reminder_time from notification_preferences") == "20:00:00")
        #expect(try await database.count("select count(*) from notification_preferences where reminder_time_set_at is null") == 1)
        try await reminders(database, at: at("2026-11-11T11:00:00Z"))   // 06:00 in New York
        try await reminders(database, at: at("2026-11-11T11:30:00Z"))   // 06:30: past the learned 06:25
        #expect(try await database.count("select count(*) from notification_outbox") == 0)
        // User 2 checks in at 07:30, before the end of the quiet hours.
        try await database.psql(
            """
            insert into daily_tracking (user_id, date, mood, energy, checked_in_at)
            values ('\(Fixture.userID(2))', '2026-11-11', 3, 3, '2026-11-11T12:30:00Z')
            """)
        try await reminders(database, at: at("2026-11-11T13:00:00Z"))   // 08:00
        #expect(
            try await database.value(
                """
                select user_id || ' ' || (deliver_after at time zone 'America/New_York') || ' ' || (payload->>'reminder_time')
                  from notification_outbox where notification_type = 'daily_checkin'
                """) == "\(id) 2026-11-11 08:00:00 learned")
        let median = try await database.value(
            """
            select to_char(percentile_disc(0.5) within group (order by (checked_in_at at time zone 'America/New_York')::time), 'HH24:MI')
              from daily_tracking where user_id = '\(id)' and date between '2026-10-14' and '2026-11-10'
            """)
        #expect(median == "07:10")
        #expect(
            try await database.value("select detail from job_work where job = 'reminders:daily_checkin' and user_id = '\(id)'")
                == "08:00: the end of the user's quiet hours (22:00–08:00); 45 min before the user's median check-in 07:10 over 21 days "
                + "is 06:25, inside them")
        #expect(
            try await database.value("select outcome || ': ' || detail from job_work where user_id = '\(Fixture.userID(2))'")
                .hasPrefix("not_needed: checked in at 07:30 before the reminder (08:00: the end of the user's quiet hours"))
        // Their own time wins once they choose it, 20:00 too: a trigger records the choice, and makes them due.
        try await database.psql("update notification_preferences set daily_reminder_time = '20:00' where user_id = '\(id)'")
        #expect(try await database.count("select count(*) from notification_preferences where reminder_time_set_at is null") == 0)
        #expect(try await database.count("select count(*) from job_due where job = 'reminders' and due_at <= 'epoch'") == 1)
        try await reminders(database, at: at("2026-11-11T14:00:00Z"))
        try await reminders(database, at: at("2026-11-13T01:00:00Z"))   // 20:00 on the 12th
        #expect(
            try await database.value(
                """
                select string_agg((deliver_after at time zone 'America/New_York') || ' ' || (payload->>'reminder_time'), ',' order by deliver_after)
                  from notification_outbox where user_id = '\(id)'
                """) == "2026-11-11 08:00:00 learned,2026-11-12 20:00:00 chosen")
    }

    /// The welcome email once, within 15 minutes of sign-up; a badge's celebration the morning
    /// after; a challenge's milestones once each, the highest of a jump told.
    @Test func welcomeBadgesAndMilestonesAreToldOnce() async throws {
        let database = try await TestDatabase.fresh()
        try await ReminderFixture.user(database, 1, zone: "Europe/Paris", signup: "2026-11-10T10:07:00Z")
        try await ReminderFixture.user(database, 2, zone: "Europe/Paris", locale: "fr", signup: "2025-11-10T10:07:00Z")
        try await reminders(database, at: at("2026-11-10T10:15:00Z"))
        try await reminders(database, at: at("2026-11-10T10:30:00Z"))
        #expect(
            try await database.value("select user_id || ' ' || channel || ' ' || title from notification_outbox where notification_type = 'welcome'")
                == "\(Fixture.userID(1)) email Welcome to FitCircle! Let's get started 🎉")
        let html = try await database.value("select payload->>'html' from notification_outbox where notification_type = 'welcome'")
        #expect(html.contains("cannot be turned off"))
        #expect(
            try await database.value("select coalesce(payload->>'unsubscribe_url', 'none') from notification_outbox where notification_type = 'welcome'")
                == "none")

        // validate-streaks grants the 7-day badge at 00:05 on the 11th: told at 09:00 that day.
        try await database.psql("insert into user_badges (user_id, badge, earned_at) values ('\(Fixture.userID(2))', 'week_warrior', '2026-11-10T23:05:00Z')")
        try await reminders(database, at: at("2026-11-10T23:15:00Z"))
        #expect(
            try await database.value(
                """
                select (deliver_after at time zone 'Europe/Paris')::text || ' ' || body from notification_outbox where notification_type = 'streak_milestone'
                """) == "2026-11-11 09:00:00 Tu l'as fait ! Série de 7 jours réussie. Tes objectifs du jour sont maintenant calculés sur ta moyenne.")

        // A steps circle of 4 weeks at 10,000 a week: 40,000 in all. 11,000 steps (27 %), then 21,000 more (80 %).
        let id = Fixture.userID(2)
        try await database.psql(
            """
            insert into fitcircles (id, name, challenge_type, timezone, starts_on, ends_on, challenge_step_goal)
            values ('00000000-0000-0000-0000-0000000000c1', 'Work Warriors', 'steps', 'Europe/Paris', '2026-11-02', '2026-11-29', 10000);
            insert into fitcircle_members (fitcircle_id, user_id, joined_at) values ('00000000-0000-0000-0000-0000000000c1', '\(id)', '2026-11-01T00:00:00Z');
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, steps, submitted_at)
            values ('00000000-0000-0000-0000-0000000000c1', '\(id)', '2026-11-11', 11000, '2026-11-11T09:00:00Z');
            """)
        try await reminders(database, at: at("2026-11-11T09:15:00Z"))
        try await database.psql(
            """
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, steps, submitted_at)
            values ('00000000-0000-0000-0000-0000000000c1', '\(id)', '2026-11-12', 21000, '2026-11-12T09:00:00Z');
            """)
        try await reminders(database, at: at("2026-11-12T09:15:00Z"))
        try await reminders(database, at: at("2026-11-12T09:30:00Z"))
        #expect(
            try await database.value(
                """
                select string_agg(channel || ' ' || coalesce(payload->>'percent', payload->'tags'->>'percent'), ',' order by id) from notification_outbox where notification_type = 'challenge_milestone'
                """) == "push 25,push 75,email 50")
        #expect(
            try await database.value("select string_agg(percent || ' ' || outcome, ',' order by percent) from reminder_milestones")
                == "25 told: push,50 told: email,75 told: push")
    }
}
