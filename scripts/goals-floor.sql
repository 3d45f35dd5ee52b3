-- generate-daily-goals as set-based SQL, written apart from the Swift job: the benchmark's floor
-- (what PostgreSQL alone takes to do the same work) and the tests' independent computation of
-- the goals (the job's rows must equal these).
--
--   psql -v now=2026-03-15T02:00:00Z -v from= -v to= -f scripts/goals-floor.sql
--
-- now: the run's clock; from/to: a backfill window (empty for a normal run: each user's local
-- yesterday and today). Users with an unknown time zone are not supported here.
\set ON_ERROR_STOP 1

begin;

create temp table gf_days on commit drop as
with u as (
    select id, coalesce(timezone, 'UTC') as tz,
           (created_at at time zone coalesce(timezone, 'UTC'))::date as signup,
           (:'now'::timestamptz at time zone coalesce(timezone, 'UTC'))::date as today
      from users),
h as (
    select u.*, greatest(signup, coalesce(nullif(:'from', '')::date, today - 1)) as first_day,
           least(coalesce(nullif(:'to', '')::date, today), today) as last_day
      from u)
select h.id as user_id, h.tz, h.signup, h.today, h.first_day, h.last_day, d::date as day
  from h cross join lateral generate_series(h.first_day, h.last_day, interval '1 day') d;

-- Tracking rows, with whether they hold values no one could log.
create temp table gf_t on commit drop as
select t.user_id, t.date, t.steps, t.weight, t.mood is not null and t.energy is not null as checked_in,
       coalesce(t.mood not between 1 and 5, false) or coalesce(t.energy not between 1 and 5, false)
         or coalesce(t.steps not between 0 and 150000, false) or coalesce(not (t.weight > 0 and t.weight < 1500), false) as bad
  from daily_tracking t
 where exists (select 1 from gf_days d where d.user_id = t.user_id and t.date between d.day - 14 and d.day);
create index on gf_t (user_id, date);
analyze gf_t;

-- Memberships with local join/leave days.
create temp table gf_m on commit drop as
select m.user_id, c.id as circle_id, c.challenge_type, c.starts_on, c.ends_on, c.challenge_step_goal,
       (m.joined_at at time zone u.tz)::date as joined_on, (m.left_at at time zone u.tz)::date as left_on,
       m.starting_weight, m.target_weight
  from fitcircle_members m join fitcircles c on c.id = m.fitcircle_id
  join (select distinct user_id, tz from gf_days) u on u.user_id = m.user_id;

-- The weight-loss circle of a user on a day: the most weekly loss; (none, usable, unusable).
create function pg_temp.weight_circle(uid uuid, d date)
returns table (circle_id uuid, weekly numeric, active boolean) language sql stable as $$
    select x.circle_id, x.weekly, a.active
      from (select true as active) a
      left join lateral (
        select m.circle_id,
               (m.starting_weight - m.target_weight)
                 / greatest(1, ceil((m.ends_on - (d - (extract(isodow from d)::int - 1)) + 1) / 7.0)) as weekly
          from gf_m m
         where m.user_id = uid and m.challenge_type = 'weight_loss'
           and m.joined_on <= d and (m.left_on is null or m.left_on >= d) and d between m.starts_on and m.ends_on
           and m.starting_weight > m.target_weight and m.target_weight > 0 and m.starting_weight < 1500
         order by 2 desc, m.circle_id::text
         limit 1) x on true
     where exists (select 1 from gf_m m where m.user_id = uid and m.challenge_type = 'weight_loss'
                     and m.joined_on <= d and (m.left_on is null or m.left_on >= d) and d between m.starts_on and m.ends_on)
$$;

-- A day's targets from the 7 days before it (never before sign-up) and that day's circles.
create function pg_temp.targets(uid uuid, signup date, d date)
returns table (steps int, weight numeric, from_baseline boolean) language sql stable as $$
    with l as (
        select bool_or(bad) as bad, count(*) filter (where steps > 0) as n, sum(steps) filter (where steps > 0) as total
          from gf_t where user_id = uid and date between greatest(signup, d - 7) and d - 1),
    w as (select * from pg_temp.weight_circle(uid, d))
    select case when coalesce(l.bad, false) then 7000
                when d - signup < 7 then (case when l.n > 0 and l.total < 5000 * l.n then 5000 else 7000 end)
                when l.n >= 3 then least(15000, round(l.total * 1.1 / l.n / 100) * 100)::int
                else 7000 end,
           case when coalesce(l.bad, false) or d - signup < 7 or (select weekly from w) is null then null
                else -round(least(0.3, greatest(0.1, (select weekly from w) / 7)), 2) end,
           not coalesce(l.bad, false) and d - signup >= 7 and l.n >= 3
      from l
$$;

-- The weight change to the last weigh-in from a through b, from the last of the 7 days before a.
create function pg_temp.weight_change(uid uuid, a date, b date) returns numeric language sql stable as $$
    select round((select weight from gf_t where user_id = uid and date between a and b and not bad and weight is not null
                   order by date desc limit 1)
               - (select weight from gf_t where user_id = uid and date between a - 7 and a - 1 and not bad and weight is not null
                   order by date desc limit 1), 2)
$$;

-- Daily goals ---------------------------------------------------------------------------------------

create temp table gf_daily on commit drop as
select x.user_id, x.day as date, g.goal_type, g.target,
       case when x.day < x.today then g.actual end as actual,
       x.day < x.today and coalesce(case when g.goal_type = 'weight' then g.actual <= g.target else g.actual >= g.target end, false)
         as completed
  from (select d.*, t.steps as t_steps, t.weight as t_weight, r.steps as r_steps, r.checked_in, r.bad
          from gf_days d
         cross join lateral pg_temp.targets(d.user_id, d.signup, d.day) t
          left join gf_t r on r.user_id = d.user_id and r.date = d.day) x
 cross join lateral (values
        ('steps', x.t_steps::numeric, case when not coalesce(x.bad, false) then coalesce(x.r_steps, 0)::numeric end),
        ('checkin', 1::numeric, case when not coalesce(x.bad, false) then (case when x.checked_in then 1 else 0 end)::numeric end),
        ('weight', x.t_weight, pg_temp.weight_change(x.user_id, x.day, x.day))) g(goal_type, target, actual)
 where g.goal_type <> 'weight' or g.target is not null;

insert into daily_goals (user_id, date, goal_type, target_value, actual_value, completed, created_at)
select user_id, date, goal_type, target, actual, completed, :'now'::timestamptz from gf_daily
on conflict (user_id, date, goal_type) do nothing;

-- Weekly goals --------------------------------------------------------------------------------------

create temp table gf_weeks on commit drop as
select user_id, signup, today, day - (extract(isodow from day)::int - 1) as monday, max(day) as as_of
  from gf_days group by 1, 2, 3, 4;
delete from gf_weeks where monday < signup;

create temp table gf_weekly on commit drop as
with w as (
    select w.*, greatest(w.monday, w.signup) as p_first, least(w.monday + 6, w.today - 1) as p_last,
           (select m.circle_id from gf_m m
             where m.user_id = w.user_id and m.challenge_type = 'steps' and m.challenge_step_goal > 0
               and m.joined_on <= w.as_of and (m.left_on is null or m.left_on >= w.as_of) and w.as_of between m.starts_on and m.ends_on
             order by m.challenge_step_goal desc, m.circle_id::text limit 1) as steps_circle,
           wc.circle_id as weight_circle, wc.weekly
      from gf_weeks w
      left join lateral (select * from pg_temp.weight_circle(w.user_id, w.as_of)) wc on true),
p as (
    select w.*,
           coalesce((select sum(steps) from gf_t where user_id = w.user_id and date between p_first and p_last and not bad), 0) as s_steps,
           (select count(*) from gf_t where user_id = w.user_id and date between p_first and p_last and not bad and checked_in) as s_checkins,
           (select count(*) from gf_t where user_id = w.user_id and date between p_first and p_last and not bad and steps >= 3000) as s_active,
           pg_temp.weight_change(w.user_id, w.monday, w.p_last) as s_weight,
           coalesce((select jsonb_object_agg(to_char(date, 'Dy'), steps) from gf_t
                      where user_id = w.user_id and date between p_first and p_last and not bad and steps is not null), '{}') as b_steps,
           coalesce((select jsonb_object_agg(to_char(d, 'Dy'), case when t.checked_in and not t.bad then 1 else 0 end)
                       from generate_series(p_first, p_last, interval '1 day') d
                       left join gf_t t on t.user_id = w.user_id and t.date = d::date), '{}') as b_checkins,
           coalesce((select jsonb_object_agg(to_char(d, 'Dy'), case when t.steps >= 3000 and not t.bad then 1 else 0 end)
                       from generate_series(p_first, p_last, interval '1 day') d
                       left join gf_t t on t.user_id = w.user_id and t.date = d::date), '{}') as b_active,
           coalesce((select jsonb_object_agg(to_char(date, 'Dy'), weight) from gf_t
                      where user_id = w.user_id and date between p_first and p_last and not bad and weight is not null), '{}') as b_weight
      from w)
select p.user_id, p.monday as week_start, g.goal_type, g.target, g.actual, g.breakdown, g.circle_id,
       coalesce(case when g.goal_type = 'weight' then g.actual <= g.target else g.actual >= g.target end, false) as completed
  from p
 cross join lateral (values
        ('steps', coalesce((select challenge_step_goal from gf_m where user_id = p.user_id and circle_id = p.steps_circle),
                           (select case when t.from_baseline then t.steps * 7 else 50000 end
                              from pg_temp.targets(p.user_id, p.signup, p.monday) t))::numeric,
         p.s_steps::numeric, p.b_steps, p.steps_circle),
        ('weight', coalesce(-round(p.weekly, 2), 0), p.s_weight, p.b_weight, p.weight_circle),
        ('streak', 7::numeric, p.s_checkins::numeric, p.b_checkins, null::uuid),
        ('active_days', 5::numeric, p.s_active::numeric, p.b_active, null::uuid)) g(goal_type, target, actual, breakdown, circle_id);

insert into weekly_goals (user_id, week_start, goal_type, target_value, actual_value, daily_breakdown, completed,
                          fitcircle_id, created_at)
select user_id, week_start, goal_type, target, actual, breakdown, completed, circle_id, :'now'::timestamptz from gf_weekly
on conflict (user_id, week_start, goal_type) do nothing;

commit;
