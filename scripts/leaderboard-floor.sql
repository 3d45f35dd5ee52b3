-- The floor of leaderboard-refresh: the boards a first refresh at :now computes, by the same
-- rules (seed 003 Features 3 and 5, as docs/jobs/leaderboard-refresh.md states them), in set-based SQL alone with
-- window functions, written independently of the job's Swift. Its result goes to the table
-- leaderboard_floor, shaped like fitcircle_leaderboard_entries; the tests and scripts/bench
-- compare the two.
--
--   psql -v now="'2026-03-18T12:00:00Z'" -f scripts/leaderboard-floor.sql
--
-- The boards: per circle whose boards can be due, in its zone, the board of each period holding today and the board
-- before it, whose counted days (the period's days within starts_on–ends_on) have begun; a
-- board whose last counted day has ended stands at that end (its final ranks), once the grace
-- for late submissions (30 minutes) has passed, and is not computed within the grace.

drop table if exists leaderboard_floor;
create unlogged table leaderboard_floor as
with c as (
    select id, challenge_type, timezone as tz, starts_on, ends_on,
           (:now::timestamptz at time zone timezone)::date as today
      from fitcircles
     -- The circles whose boards can be due: begun, and ended at most 8 days ago (UTC days, one
     -- day wider each side than any zone's).
     where starts_on <= (:now::timestamptz at time zone 'UTC')::date + 1
       and ends_on >= (:now::timestamptz at time zone 'UTC')::date - 9),
-- Every period's board holding today, and the one before (back = 1).
b0 as (
    select c.*, p.period, k.back,
           case p.period
               when 'daily' then c.today - k.back
               when 'weekly' then c.today - (extract(isodow from c.today)::int - 1) - 7 * k.back
               when 'monthly' then (make_date(extract(year from c.today)::int, extract(month from c.today)::int, 1)
                                    - k.back * interval '1 month')::date
           end as period_start
      from c
     cross join (values ('daily'), ('weekly'), ('monthly')) p(period)
     cross join (values (0), (1)) k(back)
    union all
    select c.*, 'all_time', 0, c.starts_on from c),
b1 as (
    select b0.*,
           case period
               when 'daily' then period_start + 1
               when 'weekly' then period_start + 7
               when 'monthly' then (period_start + interval '1 month')::date
               else ends_on + 1
           end as next_start
      from b0),
b2 as (
    select b1.*, greatest(period_start, starts_on) as first_day, least(next_start - 1, ends_on) as last_day
      from b1),
boards as (
    select b2.*, ((last_day + 1)::timestamp at time zone tz) as ends
      from b2
     where first_day <= last_day and first_day <= today),
-- The boards computed, and, for rank_change, the board before each (all-time has none).
views as (
    select id as fitcircle_id, challenge_type, starts_on, period, period_start, first_day, last_day,
           least(:now::timestamptz, ends) as stands_at, 'board' as role, period_start as key_start
      from boards
     where ends > :now::timestamptz or ends + interval '30 minutes' <= :now::timestamptz
    union all
    select p.fitcircle_id, p.challenge_type, p.starts_on, p.period, p.period_start, p.first_day, p.last_day,
           ((p.last_day + 1)::timestamp at time zone p.tz), 'previous', p.key_start
      from (select bd.id as fitcircle_id, bd.challenge_type, bd.starts_on, bd.tz, bd.period, bd.period_start as key_start,
                   pp.period_start, greatest(pp.period_start, bd.starts_on) as first_day,
                   least(pp.next_start - 1, bd.ends_on) as last_day
              from boards bd
             cross join lateral (
                 select case bd.period when 'daily' then bd.period_start - 1
                                       when 'weekly' then bd.period_start - 7
                                       else (bd.period_start - interval '1 month')::date end as period_start,
                        bd.period_start as next_start) pp
             where bd.period <> 'all_time'
               and (bd.ends > :now::timestamptz or bd.ends + interval '30 minutes' <= :now::timestamptz)) p
     where p.first_day <= p.last_day),
-- Each view's roster: joined by the instant it stands at, not left by then.
roster as (
    select v.*, m.user_id, m.starting_weight, m.target_weight
      from views v
      join fitcircle_members m on m.fitcircle_id = v.fitcircle_id
                              and m.joined_at <= v.stands_at and (m.left_at is null or m.left_at > v.stands_at)),
-- The submissions each member made within the view's days, latest weight first.
subs as (
    select r.fitcircle_id, r.period, r.key_start, r.role, r.user_id, s.submission_date, s.steps, s.weight, s.submitted_at,
           sum(s.steps) over w as steps_sum,
           max(s.submitted_at) filter (where s.steps > 0) over w as steps_at,
           first_value(s.weight) over lw as last_weight,
           first_value(s.submitted_at) over lw as last_weight_at
      from roster r
      join fitcircle_data_submissions s on s.fitcircle_id = r.fitcircle_id and s.user_id = r.user_id
                                        and s.submission_date between r.first_day and r.last_day
    window w as (partition by r.fitcircle_id, r.period, r.key_start, r.role, r.user_id),
           lw as (partition by r.fitcircle_id, r.period, r.key_start, r.role, r.user_id
                  order by (s.weight is null), s.submission_date desc, s.submitted_at desc)),
totals as (
    select distinct on (fitcircle_id, period, key_start, role, user_id)
           fitcircle_id, period, key_start, role, user_id, steps_sum, steps_at,
           case when weight_seen then last_weight end as last_weight,
           case when weight_seen then last_weight_at end as last_weight_at
      from (select subs.*, bool_or(weight is not null) over (partition by fitcircle_id, period, key_start, role, user_id) as weight_seen
              from subs) x
     order by fitcircle_id, period, key_start, role, user_id),
-- A monthly weight-loss board measures from the last weight submitted before its first day.
before as (
    select distinct on (r.fitcircle_id, r.period, r.key_start, r.role, r.user_id)
           r.fitcircle_id, r.period, r.key_start, r.role, r.user_id, s.weight as weight_before
      from roster r
      join fitcircle_data_submissions s on s.fitcircle_id = r.fitcircle_id and s.user_id = r.user_id
                                        and s.submission_date >= r.starts_on and s.submission_date < r.first_day
                                        and s.weight is not null
     where r.challenge_type = 'weight_loss' and r.period = 'monthly'
     order by r.fitcircle_id, r.period, r.key_start, r.role, r.user_id, s.submission_date desc, s.submitted_at desc),
valued as (
    select r.fitcircle_id, r.period, r.key_start, r.role, r.user_id, r.challenge_type,
           case
               when r.challenge_type = 'steps' then 'steps'
               when r.period in ('daily', 'weekly') then 'weight_loss_pct'
               else 'weight_lost'
           end as metric_type,
           case
               when r.challenge_type = 'steps' then coalesce(t.steps_sum, 0)::numeric
               when r.period in ('daily', 'weekly') then
                   case when r.target_weight < r.starting_weight and t.last_weight is not null
                        then round(100 * (r.starting_weight - t.last_weight) / (r.starting_weight - r.target_weight), 2) end
               when r.period = 'monthly' then coalesce(bf.weight_before, r.starting_weight) - t.last_weight
               else r.starting_weight - t.last_weight
           end as metric_value,
           case when r.challenge_type = 'steps' then case when coalesce(t.steps_sum, 0) > 0 then t.steps_at end
                else t.last_weight_at end as achieved_at
      from roster r
      left join totals t using (fitcircle_id, period, key_start, role, user_id)
      left join before bf using (fitcircle_id, period, key_start, role, user_id)),
ranked as (
    select valued.*,
           row_number() over (partition by fitcircle_id, period, key_start, role
                              order by metric_value desc nulls last,
                                       case when metric_value is not null then achieved_at end asc nulls last,
                                       user_id) as rank
      from valued)
select b.fitcircle_id, b.user_id, b.period, b.key_start as period_start, b.metric_type, b.metric_value, b.rank,
       -- Against the places held with a value: nothing submitted there is no place to move from.
       case when p.metric_value is not null and p.achieved_at is not null then (p.rank - b.rank)::int end as rank_change
  from ranked b
  left join ranked p on p.role = 'previous' and p.fitcircle_id = b.fitcircle_id and p.period = b.period
                    and p.key_start = b.key_start and p.user_id = b.user_id
 where b.role = 'board';
