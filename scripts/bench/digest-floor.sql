-- The floor for scripts/bench/waves: weekly-digest's run at :now, as set-based SQL alone, by the same
-- rules (WeeklyDigestJob, WeeklyDigestRules, DigestChannels) and with the same writes: everyone
-- whose Sunday 20:00 has come in the due index is read; a week not digested yet, on time and 3
-- days after sign-up, has the facts the job reads read (preferences, devices, the streak, six
-- weeks of tracking, five weeks of daily steps goals, this week's and next week's weekly ones,
-- the weekly ranks, the circles); then its mark (digested, quiet_week, no_channel or resting), a
-- push and an email where the preferences allow, next week's steps goal (a steps circle's, else
-- the week's baseline + 10 % x 7, else 50,000), and each user's next Sunday 20:00 in the due index.
-- The copy is the week's numbers in a fixed text; the email's HTML and text are one the job
-- rendered (table floor_email, filled from the job's outbox before the clock starts), so that the
-- floor writes as much as the job. Users the job fails (a time zone it does not know) are not the
-- floor's: the benchmark's seed has none, and the end-state check would show one.
-- psql variable: now (quoted).
begin;
-- Compiling these statements (JIT) took longer than running them (0.7 s of 1 s at 10,000 users).
set local jit = off;

create temp table df_due on commit drop as
select d.user_id, u.tz, u.created_at, u.email, u.display_name, u.locale, s.sunday,
       (s.sunday + time '20:00') at time zone u.tz as due_instant,
       (s.sunday + 7 + time '20:00') at time zone u.tz as next_due
  from job_due d
  -- (The address without the white space around it: Swift's .whitespaces, tab and Unicode's spaces.)
  join lateral (select id, coalesce(timezone, 'UTC') as tz, created_at, display_name, locale,
                       regexp_replace(email, '^[ \t\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]+|[ \t\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]+$', '', 'g') as email
                  from users where id = d.user_id) u on true
 -- The last day whose 20:00 has come, by instants (a 20:00 a clock change skips is its next instant).
 cross join lateral (select (:now::timestamptz at time zone u.tz)::date as today) t
 cross join lateral (select case when (t.today + time '20:00') at time zone u.tz <= :now::timestamptz then t.today
                                 else t.today - 1 end as reached) r
 cross join lateral (select r.reached - extract(isodow from r.reached)::int % 7 as sunday) s
 where d.job = 'weekly-digest' and d.due_at <= :now::timestamptz;
analyze df_due;

-- The weeks to digest: on time, 3 days after sign-up, not digested yet.
create temp table df_open on commit drop as
select d.*, d.sunday - 6 as monday, (d.created_at at time zone d.tz)::date as signup,
       -- The Monday of the first week the user had a digest for.
       (select case when (f.sunday + time '20:00') at time zone d.tz < d.created_at + interval '3 days' then f.sunday + 1 else f.sunday - 6 end
          from (select ((d.created_at + interval '3 days') at time zone d.tz)::date
                       + (7 - extract(isodow from ((d.created_at + interval '3 days') at time zone d.tz)::date)::int) % 7 as sunday) f)
         as first_monday
  from df_due d
 where d.due_instant >= d.created_at + interval '3 days'
   and :now::timestamptz < d.due_instant + interval '960 minutes'
   and not exists (select 1 from job_work w where w.job = 'weekly-digest' and w.user_id = d.user_id and w.local_day = d.sunday);
create index on df_open (user_id);
analyze df_open;

-- Tracking from the week before the four compared weeks through Sunday, with whether a day holds
-- values no one could log.
create temp table df_t on commit drop as
select t.user_id, t.date, o.monday, (o.monday - t.date + 6) / 7 as weeks_before, t.steps, t.weight,
       t.mood is not null and t.energy is not null as checked_in,
       coalesce(t.mood not between 1 and 5, false) or coalesce(t.energy not between 1 and 5, false)
         or coalesce(t.steps not between 0 and 150000, false) or coalesce(not (t.weight > 0 and t.weight < 1500), false) as bad
  from df_open o
  join daily_tracking t on t.user_id = o.user_id and t.date between o.sunday - 41 and o.sunday;
create index on df_t (user_id);
analyze df_t;

create temp table df_weeks on commit drop as
select o.user_id,
       coalesce(sum(t.steps) filter (where t.weeks_before = 0 and not t.bad), 0) as steps,
       count(*) filter (where t.weeks_before = 0 and not t.bad and t.checked_in) as checkins,
       -- Activity (steps, a check-in or a weigh-in) in this week and each of the four before.
       coalesce(bool_or(not t.bad and (t.steps > 0 or t.checked_in or t.weight is not null)) filter (where t.weeks_before = 0), false) as a0,
       coalesce(bool_or(not t.bad and (t.steps > 0 or t.checked_in or t.weight is not null)) filter (where t.weeks_before = 1), false) as a1,
       coalesce(bool_or(not t.bad and (t.steps > 0 or t.checked_in or t.weight is not null)) filter (where t.weeks_before = 2), false) as a2,
       coalesce(bool_or(not t.bad and (t.steps > 0 or t.checked_in or t.weight is not null)) filter (where t.weeks_before = 3), false) as a3,
       coalesce(bool_or(not t.bad and (t.steps > 0 or t.checked_in or t.weight is not null)) filter (where t.weeks_before = 4), false) as a4,
       -- Next week's baseline: the digested week's steps, from sign-up.
       coalesce(bool_or(t.bad) filter (where t.weeks_before = 0 and t.date >= o.signup), false) as baseline_bad,
       count(*) filter (where t.weeks_before = 0 and t.date >= o.signup and t.steps > 0) as baseline_days,
       sum(t.steps) filter (where t.weeks_before = 0 and t.date >= o.signup and t.steps > 0) as baseline_total
  from df_open o
  left join df_t t on t.user_id = o.user_id
 group by o.user_id;

create temp table df_decided on commit drop as
select o.*, w.steps, w.checkins, w.a0,
       not w.a0 and not (w.a1 or o.monday - 7 < o.first_monday) and not (w.a2 or o.monday - 14 < o.first_monday)
           and not (w.a3 or o.monday - 21 < o.first_monday) and not (w.a4 or o.monday - 28 < o.first_monday) as resting,
       case when not coalesce(np.push_enabled, true) then 'push_off'
            when not coalesce(np.push_weekly_digest, true) then 'push_digest_off'
            when not (exists (select 1 from user_push_tokens t where t.user_id = o.user_id and t.active)
                      or (coalesce(u.fcm_token, '') <> '' and u.push_enabled
                          and not exists (select 1 from user_push_tokens t where t.user_id = o.user_id and t.device_token = u.fcm_token)))
                 then 'no_device' end as push_refusal,
       case when not coalesce(np.email_enabled, true) then 'email_off'
            when not coalesce(np.email_weekly_digest, true) or not coalesce(ep.weekly_digest, true) then 'unsubscribed'
            when coalesce(o.email, '') = '' then 'no_address'
            -- isDeliverableAddress: one @, a dot in the domain but not at its ends, no white space (Swift's
            -- isWhitespace and isNewline) nor <>,; and 254 characters at most.
            when not (o.email ~ '^[^@<>,;]+@[^@<>,;]*\.[^@<>,;]*$' and o.email !~ '@\.|\.$'
                      and o.email !~ '[\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]'
                      and length(o.email) <= 254) then 'bad_address' end as email_refusal,
       s.current_streak,
       -- The days the daily steps goal was met, this week and at best in the four before ("your best week yet").
       m.days_met, m.best_before,
       (select round(g.target_value)::int from weekly_goals g
         where g.user_id = o.user_id and g.goal_type = 'steps' and g.target_value is not null and g.week_start = o.monday) as week_goal,
       s.settled_through,
       (select string_agg(c.name || ' #' || e.rank, ', ' order by e.rank, c.name)
          from fitcircle_leaderboard_entries e join fitcircles c on c.id = e.fitcircle_id
         where e.user_id = o.user_id and e.period = 'weekly' and e.rank is not null and e.period_start = o.monday
           -- Only a place held with a value of the week itself: steps above 0, or a weigh-in within it.
           and case when c.challenge_type = 'steps' then e.metric_value > 0
                    else exists (select 1 from fitcircle_data_submissions s
                                  where s.fitcircle_id = e.fitcircle_id and s.user_id = e.user_id and s.weight is not null
                                    and s.submission_date between greatest(e.period_start, c.starts_on)
                                                              and least(e.period_start + 6, c.ends_on)) end) as ranks,
       (select round(g.target_value)::int from weekly_goals g
         where g.user_id = o.user_id and g.goal_type = 'steps' and g.target_value is not null and g.week_start = o.sunday + 1) as next_set,
       (select c.id from fitcircle_members m join fitcircles c on c.id = m.fitcircle_id
         where m.user_id = o.user_id and c.challenge_type = 'steps' and c.challenge_step_goal > 0
           and (m.joined_at at time zone o.tz)::date <= o.sunday + 1
           and (m.left_at is null or (m.left_at at time zone o.tz)::date >= o.sunday + 1)
           and o.sunday + 1 between c.starts_on and c.ends_on
         order by c.challenge_step_goal desc, c.id::text limit 1) as circle_id,
       case when w.baseline_bad or o.sunday + 1 - o.signup < 7 or w.baseline_days < 3 then 50000
            else least(15000, round(w.baseline_total * 1.1 / w.baseline_days / 100) * 100)::int * 7 end as baseline_goal
  from df_open o
  join df_weeks w on w.user_id = o.user_id
  join users u on u.id = o.user_id
  left join notification_preferences np on np.user_id = o.user_id
  left join email_preferences ep on ep.user_id = o.user_id
  left join user_streaks s on s.user_id = o.user_id
 cross join lateral (
    select count(*) filter (where k = 0 and met) as days_met,
           max(n) filter (where k > 0 and n_goals > 0) as best_before
      from (select k, met, count(*) filter (where met) over (partition by k) as n, count(*) over (partition by k) as n_goals
              from (select (o.monday - g.date + 6) / 7 as k,
                           exists (select 1 from df_t t where t.user_id = o.user_id and t.date = g.date and not t.bad
                                      and t.steps >= round(g.target_value)) as met
                      from daily_goals g
                     where g.user_id = o.user_id and g.goal_type = 'steps' and g.target_value is not null
                       and g.date between o.monday - 28 and o.sunday) d) w) m;

insert into job_work (job, user_id, local_day, outcome, detail)
select 'weekly-digest', user_id, sunday,
       case when resting then 'resting' when push_refusal is not null and email_refusal is not null then 'no_channel'
            when a0 then 'digested' else 'quiet_week' end,
       concat_ws(', ', case when push_refusal is null then 'push' end, case when email_refusal is null then 'email' end,
                 'push: ' || push_refusal, 'email: ' || email_refusal)
  from df_decided
on conflict (job, user_id, local_day) do nothing;

insert into notification_outbox (dedupe_key, job, user_id, local_day, notification_type, channel, deliver_after, title, body, payload)
select 'weekly-digest:' || user_id || ':' || sunday || ':weekly_digest' || case when channel = 'push' then '' else ':email' end,
       'weekly-digest', user_id, sunday, 'weekly_digest', channel, due_instant,
       case when channel = 'push' then 'Your week in review' else 'Your week: ' || steps || ' steps' end,
       format('%s steps this week%s, your daily goal met on %s days%s, a %s-day streak (settled through %s)%s.%s', steps,
              ' (' || steps * 100 / nullif(week_goal, 0) || ' % of your goal)', days_met,
              case when days_met >= 4 and days_met > best_before then ', your best week yet' end,
              coalesce(current_streak, 0), settled_through, coalesce('; ' || ranks, ''),
              case when channel = 'email' then e.text end),
       case when channel = 'push' then jsonb_build_object('type', 'weekly_digest', 'deep_link', 'fitcircle://digest', 'week_start', monday)
            else jsonb_build_object('email_type', 'weekly_digest', 'html', e.html,
                                    'unsubscribe_url', 'https://nudge.example.test/unsubscribe?u=' || user_id,
                                    'tags', jsonb_build_object('week_start', monday)) end
  from df_decided
 cross join (select html, text from floor_email limit 1) e
 cross join lateral (select 'push' as channel where push_refusal is null
                     union all select 'email' where email_refusal is null) c
 where not resting
on conflict (dedupe_key) do nothing;

insert into weekly_goals (user_id, week_start, goal_type, target_value, fitcircle_id, created_at)
select d.user_id, d.sunday + 1, 'steps', coalesce(c.challenge_step_goal, d.baseline_goal), d.circle_id, :now::timestamptz
  from df_decided d
  left join fitcircles c on c.id = d.circle_id
 where not d.resting and (d.push_refusal is null or d.email_refusal is null) and d.next_set is null
on conflict (user_id, week_start, goal_type) do nothing;

update job_due j set due_at = d.next_due, planned_at = null
  from df_due d
 where j.job = 'weekly-digest' and j.user_id = d.user_id;

commit;
