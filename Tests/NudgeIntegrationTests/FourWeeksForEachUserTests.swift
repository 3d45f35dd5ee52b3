import Foundation
import NudgeStandIns
import Testing

@testable import NudgeCore

private func at(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }
private func iso(_ date: Date) -> String { ISO8601DateFormatter().string(from: date) }

/// Four weeks of cron (Monday 19 October to Monday 16 November 2026, over the end of summer time
/// in Europe on 25 October and in the United States on 1 November), for the users the rules are
/// hardest on, with what the app writes written as its time comes. Independent SQL then checks
/// what reached each of them.
@Suite(.serialized, .dropsItsDatabases) struct FourWeeksForEachUserTests {
    /// The users, by number.
    enum Who {
        /// Paris, checks in at about 07:12 but on Sundays: learned 06:25 is in quiet hours, so 08:00.
        static let earlyRiser = 1
        /// New York, checks in 3 minutes after each reminder reaches them (before: at 21:00).
        static let answerer = 2
        /// New York, flies to Tokyo late on Sunday 25 October; never checks in (20:00 every day).
        static let eastbound = 3
        /// Paris, moves to New York on 2 November; checks in at 19:00 wherever they are.
        static let westbound = 4
        /// Kolkata, a 10-day streak; misses twice in a week (a freeze, then at risk) and checks in at 07:30 the day after.
        static let atRisk = 5
        /// Paris, in a steps challenge; submits before 20:00, just after the reminder, or later.
        static let submitter = 6
        /// New York, quiet hours 23:00–06:30, checks in at 07:00 but on Saturdays: 06:30.
        static let ownQuietHours = 7
    }

    static let start = "2026-10-19T00:00:00Z", end = "2026-11-16T00:00:00Z"
    static let circle = "00000000-0000-4000-8000-00000000c0de"

    @Test func fourWeeksOfCronGiveEachUserWhatTheirDayCallsFor() async throws {
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
        try await setUp(database)

        // Cron every 15 minutes: the app's writes up to the tick, validate-streaks and reminders at
        // the tick, the app's writes of the next minute, dispatch a minute after the tick (as its
        // every-minute schedule meets what was queued), and the answerer's check-in 3 minutes after
        // each reminder reaches them. A tick at which no job has anything due is skipped: a run
        // there reads nothing and writes nothing.
        var tick = at(Self.start)
        let last = at(Self.end)
        var runs = 0
        try await database.pinned { database in
            while tick < last {
                try await happen(database, through: tick)
                if try await database.anyoneDue(for: "validate-streaks", at: tick) {
                    #expect(try await validateStreaks(database, at: tick).counts.failed == 0)
                    runs += 1
                }
                if try await database.anyoneDue(for: "reminders", at: tick) {
                    #expect(try await reminders(database, at: tick).counts.failed == 0)
                    runs += 1
                }
                let minute = tick.addingTimeInterval(60)
                try await happen(database, through: minute)
                if try await database.count(
                    """
                    select count(*) from notification_outbox where status = 'pending' and coalesce(next_attempt_at, deliver_after) <= '\(iso(minute))'
                    """) > 0
                {
                    #expect(try await dispatch(database, environment: environment, at: minute).exitCode == 0)
                    runs += 1
                }
                try await database.psql(
                    """
                    insert into sim_events (user_id, kind, day, at)
                    select o.user_id, 'checkin', o.local_day, o.sent_at + interval '3 minutes' from notification_outbox o
                     where o.user_id = '\(Fixture.userID(Who.answerer))' and o.notification_type = 'daily_checkin' and o.sent_at is not null
                    on conflict do nothing
                    """)
                tick = try await nextTick(database, after: tick)
            }
        }
        #expect(runs > 100)

        // 1. No push of a learned reminder time inside the quiet hours the user had, in the zone
        //    they were in when it reached them; and some did go (the checks below see real traffic).
        let learned = try await database.count(
            """
            select count(*) from notification_outbox o where o.notification_type = 'daily_checkin' and o.channel = 'push'
               and o.payload->>'reminder_time' = 'learned' and o.sent_at is not null
            """)
        #expect(learned >= 8)
        #expect(
            try await database.value(
                """
                select coalesce(string_agg(o.user_id || ' ' || o.sent_at, ', '), '')
                  from notification_outbox o
                  join users u on u.id = o.user_id
                  left join notification_preferences p on p.user_id = o.user_id
                  cross join lateral (select coalesce((select h.timezone from user_timezone_history h
                                                        where h.user_id = o.user_id and h.valid_until > o.sent_at
                                                        order by h.valid_until limit 1), u.timezone) as zone) z
                  cross join lateral (select (o.sent_at at time zone z.zone)::time as local,
                                             coalesce(p.dnd_start, '22:00') as qs, coalesce(p.dnd_end, '08:00') as qe) t
                 where o.notification_type = 'daily_checkin' and o.channel = 'push' and o.payload->>'reminder_time' = 'learned'
                   and o.sent_at is not null
                   and case when t.qs < t.qe then t.local >= t.qs and t.local < t.qe
                            when t.qs > t.qe then t.local >= t.qs or t.local < t.qe else false end
                """) == "")
        // The early riser's Sundays: at 08:00, the end of their quiet hours; never on a day they checked in.
        #expect(
            try await database.value(
                """
                select string_agg(distinct (sent_at at time zone 'Europe/Paris')::time::text, ',')
                  from notification_outbox where user_id = '\(Fixture.userID(Who.earlyRiser))' and notification_type = 'daily_checkin'
                   and sent_at is not null
                """) == "08:01:00")
        #expect(
            try await database.count(
                """
                select count(*) from notification_outbox where user_id = '\(Fixture.userID(Who.earlyRiser))'
                   and notification_type = 'daily_checkin' and sent_at is not null
                """) == 4)
        #expect(
            try await database.value(
                """
                select string_agg(distinct (sent_at at time zone 'America/New_York')::time::text, ',')
                  from notification_outbox where user_id = '\(Fixture.userID(Who.ownQuietHours))' and notification_type = 'daily_checkin'
                   and sent_at is not null
                """) == "06:31:00")

        // 2. Nothing that asks for a check-in or a submission reached the user after they made it.
        #expect(
            try await database.value(
                """
                select coalesce(string_agg(o.notification_type || ' ' || o.channel || ' ' || o.user_id || ' ' || o.local_day, ', '), '')
                  from notification_outbox o
                 where o.sent_at is not null
                   and (o.notification_type in ('daily_checkin', 'streak_at_risk', 'streak_freeze_used')
                        and exists (select 1 from daily_tracking t where t.user_id = o.user_id and t.date = o.local_day
                                       and t.mood is not null and t.energy is not null and t.checked_in_at <= o.sent_at)
                        or o.notification_type = 'data_submission'
                        and exists (select 1 from fitcircle_data_submissions s where s.user_id = o.user_id and s.submission_date = o.local_day
                                       and s.submitted_at <= o.sent_at))
                """) == "")
        // …and the rule had work to do: the at-risk mornings (push and email, twice), the
        // submissions made while their reminder was on its way, and the freezes spent on the early
        // risers' skipped Sunday (told on Monday) and Saturday (told on Sunday), who checked in
        // before 09:00 the next morning.
        let answered = try await database.value(
            """
            select string_agg(u.n || ' ' || notification_type || ' ' || channel || ' ' || local_day, ', '
                              order by local_day, u.n, notification_type, channel)
              from notification_outbox o
              join (values \([Who.earlyRiser, Who.atRisk, Who.submitter, Who.ownQuietHours]
                                .map { "('\(Fixture.userID($0))'::uuid, \($0))" }.joined(separator: ", "))) u(id, n) on u.id = o.user_id
             where status = 'suppressed' and last_error like 'answered:%'
            """)
        let expected = [
            "5 streak_at_risk email 2026-10-23", "5 streak_at_risk push 2026-10-23", "7 streak_freeze_used push 2026-10-25",
            "1 streak_freeze_used push 2026-10-26", "6 data_submission push 2026-10-28", "7 streak_freeze_used push 2026-11-01",
            "1 streak_freeze_used push 2026-11-02", "6 data_submission push 2026-11-04", "5 streak_at_risk email 2026-11-07",
            "5 streak_at_risk push 2026-11-07", "7 streak_freeze_used push 2026-11-08", "1 streak_freeze_used push 2026-11-09",
            "6 data_submission push 2026-11-11", "7 streak_freeze_used push 2026-11-15",
        ]
        #expect(answered == expected.joined(separator: ", "), "\(answered)")
        #expect(
            try await database.count("select count(*) from notification_outbox where status = 'suppressed' and last_error like 'answered:%'")
                == expected.count)
        #expect(
            try await database.count(
                """
                select count(*) from notification_outbox where user_id = '\(Fixture.userID(Who.atRisk))'
                   and notification_type = 'streak_freeze_used' and sent_at is not null
                """) == 2)

        // 3. No required reminder suppressed by a cap: the eastbound traveller got one every local
        //    day, the day after the flight too, when yesterday's went at 09:00 Tokyo time.
        #expect(
            try await database.count(
                """
                select count(*) from notification_outbox where notification_type = 'daily_checkin' and status = 'suppressed'
                   and last_error like 'caps:%'
                """) == 0)
        #expect(
            try await database.value(
                """
                select string_agg(local_day::text, ',' order by local_day) from notification_outbox
                 where user_id = '\(Fixture.userID(Who.eastbound))' and notification_type = 'daily_checkin' and sent_at is not null
                   and local_day between '2026-10-25' and '2026-10-27'
                """) == "2026-10-25,2026-10-26,2026-10-27")

        // 4. The answerer's reminder stays at 20:15 in New York for four weeks, though every
        //    check-in of them comes 3 minutes after it.
        #expect(
            try await database.value(
                """
                select string_agg(distinct (deliver_after at time zone 'America/New_York')::time::text, ',')
                  from notification_outbox where user_id = '\(Fixture.userID(Who.answerer))' and notification_type = 'daily_checkin'
                """) == "20:15:00")
        #expect(
            try await database.count(
                """
                select count(*) from notification_outbox where user_id = '\(Fixture.userID(Who.answerer))'
                   and notification_type = 'daily_checkin' and sent_at is not null
                """) == 28)

        // 5. The westbound user's time is learned in each check-in's own zone: 18:15, before and after the move.
        #expect(
            try await database.value(
                """
                select string_agg(distinct substr(detail, 1, 5), ',') from job_work
                 where user_id = '\(Fixture.userID(Who.westbound))' and job = 'reminders:daily_checkin'
                """) == "18:15")
    }

    // MARK: The users and their four weeks

    private func setUp(_ database: TestDatabase) async throws {
        let zones = [
            Who.earlyRiser: "Europe/Paris", Who.answerer: "America/New_York", Who.eastbound: "America/New_York",
            Who.westbound: "Europe/Paris", Who.atRisk: "Asia/Kolkata", Who.submitter: "Europe/Paris",
            Who.ownQuietHours: "America/New_York",
        ]
        for (n, zone) in zones.sorted(by: { $0.key < $1.key }) {
            try await ReminderFixture.user(database, n, zone: zone, signup: "2026-06-01T00:00:00Z")
        }
        func id(_ n: Int) -> String { Fixture.userID(n) }
        // The app's writes to come (check-ins, submissions, zone moves), written as their time passes.
        try await database.psql(
            """
            create table sim_events (user_id uuid not null, kind text not null, day date not null, at timestamptz not null,
                                     zone text, done boolean not null default false, primary key (user_id, kind, day));
            create function pg_temp.local(d date, t time, zone text) returns timestamptz language sql as $$ select (d + t) at time zone zone $$;
            -- Four weeks of history before the simulation, then the simulation's own days.
            insert into sim_events (user_id, kind, day, at)
            select '\(id(Who.earlyRiser))', 'checkin', d::date,
                   pg_temp.local(d::date, time '07:09' + (extract(doy from d)::int % 7) * interval '1 minute', 'Europe/Paris')
              from generate_series('2026-09-21'::date, '2026-11-15', '1 day') d
             where d < '2026-10-19' or extract(isodow from d) <> 7;
            insert into sim_events (user_id, kind, day, at)
            select '\(id(Who.answerer))', 'checkin', d::date, pg_temp.local(d::date, '21:00', 'America/New_York')
              from generate_series('2026-09-21'::date, '2026-10-18', '1 day') d;
            insert into sim_events (user_id, kind, day, at)
            select '\(id(Who.westbound))', 'checkin', d::date,
                   pg_temp.local(d::date, '19:00', case when d < '2026-11-02' then 'Europe/Paris' else 'America/New_York' end)
              from generate_series('2026-09-21'::date, '2026-11-15', '1 day') d;
            insert into sim_events (user_id, kind, day, at)
            select '\(id(Who.atRisk))', 'checkin', d::date,
                   pg_temp.local(d::date, case when d::date in ('2026-10-23', '2026-11-07') then time '07:30' else time '12:00' end, 'Asia/Kolkata')
              from generate_series('2026-09-21'::date, '2026-11-15', '1 day') d
             where d::date not in ('2026-10-20', '2026-10-22', '2026-11-04', '2026-11-06');
            insert into sim_events (user_id, kind, day, at)
            select '\(id(Who.submitter))', 'checkin', d::date, pg_temp.local(d::date, '12:00', 'Europe/Paris')
              from generate_series('2026-10-19'::date, '2026-11-15', '1 day') d;
            -- Submissions: before the 20:00 reminder, or 30 seconds after it was decided (before
            -- dispatch's minute), or at 21:00 (after it reached the user).
            insert into sim_events (user_id, kind, day, at)
            select '\(id(Who.submitter))', 'submit', d::date,
                   pg_temp.local(d::date, case when d::date in ('2026-10-28', '2026-11-04', '2026-11-11') then time '20:00:30'
                                               when extract(isodow from d) = 5 then time '21:00' else time '19:30' end, 'Europe/Paris')
              from generate_series('2026-10-19'::date, '2026-11-15', '1 day') d;
            insert into sim_events (user_id, kind, day, at)
            select '\(id(Who.ownQuietHours))', 'checkin', d::date, pg_temp.local(d::date, '07:00', 'America/New_York')
              from generate_series('2026-09-21'::date, '2026-11-15', '1 day') d
             where d < '2026-10-19' or extract(isodow from d) <> 6;
            insert into sim_events (user_id, kind, day, at, zone) values
                ('\(id(Who.eastbound))', 'move', '2026-10-26', '2026-10-26T03:00:00Z', 'Asia/Tokyo'),
                ('\(id(Who.westbound))', 'move', '2026-11-02', '2026-11-02T12:00:00Z', 'America/New_York');

            insert into notification_preferences (user_id, dnd_start, dnd_end) values ('\(id(Who.ownQuietHours))', '23:00', '06:30');
            insert into user_streaks (user_id, current_streak, longest_streak, last_checkin_date, freeze_used_this_week,
                                      week_start_date, settled_through, missed_days)
            values ('\(id(Who.atRisk))', 10, 10, '2026-10-18', false, '2026-10-12', '2026-10-18', 0);
            insert into fitcircles (id, name, challenge_type, timezone, starts_on, ends_on, challenge_step_goal)
            values ('\(Self.circle)', 'Work Warriors', 'steps', 'Europe/Paris', '2026-10-01', '2026-12-31', 700000);
            insert into fitcircle_members (fitcircle_id, user_id, joined_at) values ('\(Self.circle)', '\(id(Who.submitter))', '2026-10-01');
            """)
        // The history is there before the simulation starts.
        try await happen(database, through: at("2026-10-18T23:59:00Z"))
    }

    /// Writes what the app writes up to `instant`: check-ins, submissions, and zone moves (the
    /// trigger keeps the zone left, stamped with the real clock; the test stamps it with the
    /// simulated one).
    private func happen(_ database: TestDatabase, through instant: Date) async throws {
        try await database.psql(
            """
            with due as (
                update sim_events set done = true where not done and at <= '\(iso(instant))' returning *
            ), checkins as (
                insert into daily_tracking (user_id, date, mood, energy, steps, checked_in_at)
                select user_id, day, 4, 3, 8000, at from due where kind = 'checkin'
                on conflict (user_id, date) do update set mood = excluded.mood, energy = excluded.energy,
                                                          checked_in_at = excluded.checked_in_at
                returning 1
            )
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, steps, submitted_at)
            select '\(Self.circle)', user_id, day, 9000, at from due where kind = 'submit'
            on conflict do nothing;
            """)
        let moves = try await database.value(
            """
            select coalesce(string_agg(user_id || '|' || zone || '|' || at, ';'), '') from sim_events
             where kind = 'move' and at <= '\(iso(instant))'
               and (select timezone from users where id = user_id) is distinct from zone
            """)
        for move in moves.split(separator: ";") {
            let parts = move.split(separator: "|").map(String.init)
            try await database.psql(
                """
                update users set timezone = '\(parts[1])' where id = '\(parts[0])';
                update user_timezone_history set valid_until = '\(parts[2])'
                 where user_id = '\(parts[0])' and valid_until = (select max(valid_until) from user_timezone_history where user_id = '\(parts[0])');
                """)
        }
    }

    /// The next quarter hour at which something is due (a job's user, an outbox row, the app's
    /// next write), at least a quarter hour after `tick`.
    private func nextTick(_ database: TestDatabase, after tick: Date) async throws -> Date {
        let next = try await database.value(
            """
            select coalesce(extract(epoch from least(
                (select min(due_at) from job_due where job in ('reminders', 'validate-streaks')),
                (select min(coalesce(next_attempt_at, deliver_after)) from notification_outbox where status = 'pending'),
                (select min(at) from sim_events where not done)))::bigint::text, '')
            """)
        let quarter: TimeInterval = 15 * 60
        let soonest = tick.addingTimeInterval(quarter)
        guard let seconds = Double(next) else { return soonest }
        let rounded = Date(timeIntervalSince1970: (seconds / quarter).rounded(.up) * quarter)
        return max(soonest, rounded)
    }
}
