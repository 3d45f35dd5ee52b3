-- generate-daily-goals as set-based SQL, written apart from the Swift job: the benchmark's floor
-- (what PostgreSQL alone takes to do the same work) and the tests' independent computation of
-- the goals (the job's rows must equal these).
--
--   psql -v now=2026-03-15T02:00:00Z -v from= -v to= -f scripts/bench/goals-floor.sql
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

-- Tracking rows, with whether they hold values no one could log: two weeks before each day
-- through the day, or through the last day over of its week (a week's progress counts them all).
create temp table gf_t on commit drop as
select t.user_id, t.date, t.steps, t.weight, t.mood is not null and t.energy is not null as checked_in,
       coalesce(t.mood not between 1 and 5, false) or coalesce(t.energy not between 1 and 5, false)
         or coalesce(t.steps not between 0 and 150000, false) or coalesce(not (t.weight > 0 and t.weight < 1500), false) as bad
  from daily_tracking t
 where exists (select 1 from gf_days d
                where d.user_id = t.user_id
                  and t.date between d.day - 14
                                 and greatest(d.day, least(d.day - (extract(isodow from d.day)::int - 1) + 6, d.today - 1)));
create index on gf_t (user_id, date);
analyze gf_t;

-- Memberships with local join/leave days.
create temp table gf_m on commit drop as
select m.user_id, c.id as circle_id, c.challenge_type, c.starts_on, c.ends_on, c.challenge_step_goal,
       (m.joined_at at time zone u.tz)::date as joined_on, (m.left_at at time zone u.tz)::date as left_on,
       m.starting_weight, m.target_weight
  from fitcircle_members m join fitcircles c on c.id = m.fitcircle_id
  join (select distinct user_id, tz from gf_days) u on u.user_id = m.user_id;
create index on gf_m (user_id);
analyze gf_m;

-- The days whose targets or circles are needed: the handled days, the Mondays of their weeks (the
-- weekly steps goal is Monday's daily one x 7) and the days whose circles are the week's (its
-- Sunday, or today in the current week).
create temp table gf_td on commit drop as
select user_id, signup, day from gf_days
union
select user_id, signup, day - (extract(isodow from day)::int - 1) from gf_days
union
select user_id, signup, least(day - (extract(isodow from day)::int - 1) + 6, today) from gf_days;

-- The weight-loss circle of a user on a day: of the circles active that day, the most weekly
-- loss; `weekly` is null when the user is in such circles but none has usable weights.
create temp table gf_wc on commit drop as
select distinct on (d.user_id, d.day) d.user_id, d.day, m.circle_id,
       case when m.starting_weight > m.target_weight and m.target_weight > 0 and m.starting_weight < 1500
            then (m.starting_weight - m.target_weight)
                 / greatest(1, ceil((m.ends_on - (d.day - (extract(isodow from d.day)::int - 1)) + 1) / 7.0)) end as weekly
  from gf_td d
  join gf_m m on m.user_id = d.user_id and m.challenge_type = 'weight_loss'
             and m.joined_on <= d.day and (m.left_on is null or m.left_on >= d.day) and d.day between m.starts_on and m.ends_on
 order by d.user_id, d.day, 4 desc nulls last, m.circle_id::text;
create index on gf_wc (user_id, day);
analyze gf_wc;

-- A day's targets, from the 7 days before it (never before sign-up) and that day's circles.
create temp table gf_targets on commit drop as
select d.user_id, d.day,
       case when l.bad then 7000
            when d.day - d.signup < 7 then (case when l.n > 0 and l.total < 5000 * l.n then 5000 else 7000 end)
            when l.n >= 3 then least(15000, round(l.total * 1.1 / l.n / 100) * 100)::int
            else 7000 end as steps,
       case when not l.bad and d.day - d.signup >= 7 and w.weekly is not null
            then -round(least(0.3, greatest(0.1, w.weekly / 7)), 2) end as weight,
       not l.bad and d.day - d.signup >= 7 and l.n >= 3 as from_baseline,
       case when l.bad then 'defaults'
            when d.day - d.signup < 7 then 'new_user'
            when l.n >= 3 and (w.user_id is null or w.weekly is not null) then 'baseline'
            else 'defaults' end as outcome,
       case when l.bad then 'daily_tracking holds impossible values'
            when d.day - d.signup < 7 then null
            when l.n < 3 then format('steps on only %s of the 7 days before %s', l.n, d.day)
            when w.user_id is not null and w.weekly is null then 'the FitCircle''s weights give no weight loss' end as detail
  from gf_td d
 cross join lateral (
    select coalesce(bool_or(t.bad), false) as bad, count(*) filter (where t.steps > 0) as n,
           sum(t.steps) filter (where t.steps > 0) as total
      from gf_t t where t.user_id = d.user_id and t.date between greatest(d.signup, d.day - 7) and d.day - 1) l
  left join gf_wc w on w.user_id = d.user_id and w.day = d.day;
create index on gf_targets (user_id, day);
analyze gf_targets;

-- The last weigh-in of the 7 days before each handled day that has a weight goal and is over.
create temp table gf_dprev on commit drop as
select distinct on (d.user_id, d.day) d.user_id, d.day, t.weight
  from gf_days d
  join gf_targets g on g.user_id = d.user_id and g.day = d.day and g.weight is not null
  join gf_t t on t.user_id = d.user_id and t.date between d.day - 7 and d.day - 1 and not t.bad and t.weight is not null
 where d.day < d.today
 order by d.user_id, d.day, t.date desc;

-- Daily goals ---------------------------------------------------------------------------------------

create temp table gf_daily on commit drop as
select x.user_id, x.day as date, g.goal_type, g.target,
       case when x.day < x.today then g.actual end as actual,
       x.day < x.today and coalesce(case when g.goal_type = 'weight' then g.actual <= g.target else g.actual >= g.target end, false)
         as completed
  from (select d.user_id, d.day, d.today, t.steps as t_steps, t.weight as t_weight, r.steps as r_steps, r.checked_in, r.bad,
               case when not r.bad then round(r.weight - pw.weight, 2) end as weight_change
          from gf_days d
          join gf_targets t on t.user_id = d.user_id and t.day = d.day
          left join gf_t r on r.user_id = d.user_id and r.date = d.day
          left join gf_dprev pw on pw.user_id = d.user_id and pw.day = d.day) x
 cross join lateral (values
        ('steps', x.t_steps::numeric, case when not coalesce(x.bad, false) then coalesce(x.r_steps, 0)::numeric end),
        ('checkin', 1::numeric, case when not coalesce(x.bad, false) then (case when x.checked_in then 1 else 0 end)::numeric end),
        ('weight', x.t_weight, x.weight_change)) g(goal_type, target, actual)
 where g.goal_type <> 'weight' or g.target is not null;

-- The goals, and the work records of the days that got any (outcome and reason, as the job's).
with created as (
    insert into daily_goals (user_id, date, goal_type, target_value, actual_value, completed, created_at)
    select user_id, date, goal_type, target, actual, completed, :'now'::timestamptz from gf_daily
    on conflict (user_id, date, goal_type) do nothing
    returning user_id, date)
insert into job_work (job, user_id, local_day, outcome, detail)
select 'generate-daily-goals', c.user_id, c.date, t.outcome, t.detail
  from (select distinct user_id, date from created) c
  join gf_targets t on t.user_id = c.user_id and t.day = c.date
on conflict (job, user_id, local_day) do nothing;

-- Weekly goals --------------------------------------------------------------------------------------

create temp table gf_weeks on commit drop as
select distinct user_id, signup, today, day - (extract(isodow from day)::int - 1) as monday,
       least(day - (extract(isodow from day)::int - 1) + 6, today) as as_of
  from gf_days;
delete from gf_weeks where monday < signup;
analyze gf_weeks;

-- The days of each week that are over (from sign-up), with their tracking.
create temp table gf_wp on commit drop as
select w.user_id, w.monday,
       coalesce(sum(t.steps) filter (where not t.bad), 0) as s_steps,
       count(*) filter (where not t.bad and t.checked_in) as s_checkins,
       count(*) filter (where not t.bad and t.steps >= 3000) as s_active,
       coalesce(jsonb_object_agg(to_char(g.d, 'Dy'), t.steps) filter (where not t.bad and t.steps is not null), '{}') as b_steps,
       coalesce(jsonb_object_agg(to_char(g.d, 'Dy'), case when t.checked_in and not t.bad then 1 else 0 end)
                  filter (where g.d is not null), '{}') as b_checkins,
       coalesce(jsonb_object_agg(to_char(g.d, 'Dy'), case when t.steps >= 3000 and not t.bad then 1 else 0 end)
                  filter (where g.d is not null), '{}') as b_active,
       coalesce(jsonb_object_agg(to_char(g.d, 'Dy'), t.weight) filter (where not t.bad and t.weight is not null), '{}') as b_weight,
       (array_agg(t.weight order by g.d desc) filter (where not t.bad and t.weight is not null))[1] as last_weight
  from gf_weeks w
  left join lateral generate_series(greatest(w.monday, w.signup), least(w.monday + 6, w.today - 1), interval '1 day') g(d) on true
  left join gf_t t on t.user_id = w.user_id and t.date = g.d::date
 group by 1, 2;

-- The last weigh-in of the 7 days before each week.
create temp table gf_wprev on commit drop as
select distinct on (w.user_id, w.monday) w.user_id, w.monday, t.weight
  from gf_weeks w
  join gf_t t on t.user_id = w.user_id and t.date between w.monday - 7 and w.monday - 1 and not t.bad and t.weight is not null
 order by w.user_id, w.monday, t.date desc;

-- The steps circle of each week, on its last handled day.
create temp table gf_wsc on commit drop as
select distinct on (w.user_id, w.monday) w.user_id, w.monday, m.circle_id, m.challenge_step_goal
  from gf_weeks w
  join gf_m m on m.user_id = w.user_id and m.challenge_type = 'steps' and m.challenge_step_goal > 0
             and m.joined_on <= w.as_of and (m.left_on is null or m.left_on >= w.as_of) and w.as_of between m.starts_on and m.ends_on
 order by w.user_id, w.monday, m.challenge_step_goal desc, m.circle_id::text;

create temp table gf_weekly on commit drop as
select w.user_id, w.monday as week_start, g.goal_type, g.target, g.actual, g.breakdown, g.circle_id,
       coalesce(case when g.goal_type = 'weight' then g.actual <= g.target else g.actual >= g.target end, false) as completed
  from gf_weeks w
  join gf_wp p on p.user_id = w.user_id and p.monday = w.monday
  join gf_targets mt on mt.user_id = w.user_id and mt.day = w.monday
  left join gf_wprev pw on pw.user_id = w.user_id and pw.monday = w.monday
  left join gf_wsc sc on sc.user_id = w.user_id and sc.monday = w.monday
  left join gf_wc wc on wc.user_id = w.user_id and wc.day = w.as_of and wc.weekly is not null
 cross join lateral (values
        ('steps', coalesce(sc.challenge_step_goal, case when mt.from_baseline then mt.steps * 7 else 50000 end)::numeric,
         p.s_steps::numeric, p.b_steps, sc.circle_id),
        ('weight', coalesce(-round(wc.weekly, 2), 0), round(p.last_weight - pw.weight, 2), p.b_weight, wc.circle_id),
        ('streak', 7::numeric, p.s_checkins::numeric, p.b_checkins, null::uuid),
        ('active_days', 5::numeric, p.s_active::numeric, p.b_active, null::uuid)) g(goal_type, target, actual, breakdown, circle_id);

insert into weekly_goals (user_id, week_start, goal_type, target_value, actual_value, daily_breakdown, completed,
                          fitcircle_id, created_at)
select user_id, week_start, goal_type, target, actual, breakdown, completed, circle_id, :'now'::timestamptz from gf_weekly
on conflict (user_id, week_start, goal_type) do nothing;

commit;
