-- The floor of leaderboard-refresh: the boards a first refresh at :now computes, by the same
-- rules (docs/jobs/leaderboard-refresh.md), in set-based SQL alone with
-- window functions, written independently of the job's Swift. Its result goes to the table
-- leaderboard_floor, shaped like fitcircle_leaderboard_entries; the tests and scripts/bench/waves
-- compare the two.
--
--   psql -v now="'2026-03-18T12:00:00Z'" -f scripts/bench/leaderboard-floor.sql
--
-- The boards: per circle whose boards can be due, in its zone, the board of each period holding today and the board
-- before it, whose counted days (the period's days within starts_on–ends_on) have begun; a
-- board whose last counted day has ended stands at that end (its final ranks) once that day has
-- ended in every member's zone too (submission_date is the member's own day) and the grace for
-- late submissions (30 minutes) has passed; it is not computed within the grace.

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
b3 as (
    select b2.*, ((last_day + 1)::timestamp at time zone tz) as ends
      from b2
     where first_day <= last_day and first_day <= today),
-- When the last member's day ends: the latest of the circle's and every member's midnight (a
-- member without a zone lives in UTC).
boards as (
    select b3.*, greatest(b3.ends, (select max((b3.last_day + 1)::timestamp at time zone z.tz)
                                      from fitcircle_members m join users u on u.id = m.user_id
                                     cross join lateral (select coalesce(nullif(u.timezone, ''), 'UTC') as tz) z
                                     where m.fitcircle_id = b3.id
                                       -- (a zone PostgreSQL does not know is no later midnight: the job skips it too)
                                       and z.tz in (select name from pg_timezone_names))) as subs_end
      from b3),
-- The boards computed, and, for rank_change, the board before each (all-time has none).
views as (
    select id as fitcircle_id, challenge_type, starts_on, period, period_start, first_day, last_day,
           least(:now::timestamptz, ends) as stands_at, 'board' as role, period_start as key_start
      from boards
     where subs_end > :now::timestamptz or subs_end + interval '30 minutes' <= :now::timestamptz
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
               and (bd.subs_end > :now::timestamptz or bd.subs_end + interval '30 minutes' <= :now::timestamptz)) p
     where p.first_day <= p.last_day),
-- Each view's roster: joined by the instant it stands at, not left by then.
roster as (
    select v.*, m.user_id, m.starting_weight, m.target_weight, c.ends_on
      from views v
      join fitcircles c on c.id = v.fitcircle_id
      join fitcircle_members m on m.fitcircle_id = v.fitcircle_id
                              and m.joined_at <= v.stands_at and (m.left_at is null or m.left_at > v.stands_at)),
-- The steps each member submitted within the view's days.
steps as (
    select r.fitcircle_id, r.period, r.key_start, r.role, r.user_id,
           sum(s.steps) as steps_sum, max(s.submitted_at) filter (where s.steps > 0) as steps_at
      from roster r
      join fitcircle_data_submissions s on s.fitcircle_id = r.fitcircle_id and s.user_id = r.user_id
                                        and s.submission_date between r.first_day and r.last_day
     where r.challenge_type = 'steps'
     group by 1, 2, 3, 4, 5),
-- A weight-loss member's weigh-ins from the challenge's first day to the view's last: a weight
-- stands until the next one. Numbered oldest first, each with the latest weight beside it.
weighed as (
    select r.fitcircle_id, r.period, r.key_start, r.role, r.user_id, r.first_day, s.submission_date, s.weight, s.submitted_at,
           row_number() over k as n,
           first_value(s.weight) over (partition by r.fitcircle_id, r.period, r.key_start, r.role, r.user_id
                                       order by s.submission_date desc, s.submitted_at desc) as latest
      from roster r
      join fitcircle_data_submissions s on s.fitcircle_id = r.fitcircle_id and s.user_id = r.user_id
                                        and s.submission_date between r.starts_on and r.last_day and s.weight is not null
     where r.challenge_type = 'weight_loss'
    window k as (partition by r.fitcircle_id, r.period, r.key_start, r.role, r.user_id
                 order by s.submission_date, s.submitted_at)),
-- The last weigh-in at another weight than the latest: the member has stood at the latest since
-- the first weigh-in after it (a re-weigh at the same value keeps that time).
weighed_runs as (
    select weighed.*, max(n) filter (where weight <> latest)
                          over (partition by fitcircle_id, period, key_start, role, user_id) as last_other
      from weighed),
-- A member holds a place on a weight board only with a weigh-in within its days (weighed_in):
-- a weight carried forward from before them is no value of the period.
weights as (
    select fitcircle_id, period, key_start, role, user_id, min(latest) as last_weight,
           min(submitted_at) filter (where n > coalesce(last_other, 0)) as last_weight_at,
           (array_agg(weight order by submission_date desc, submitted_at desc)
              filter (where submission_date < first_day))[1] as weight_before,
           bool_or(submission_date >= first_day) as weighed_in
      from weighed_runs
     group by 1, 2, 3, 4, 5),
valued as (
    select r.fitcircle_id, r.period, r.key_start, r.role, r.user_id, r.challenge_type,
           case
               when r.challenge_type = 'steps' then 'steps'
               when r.period in ('daily', 'weekly') then 'weight_loss_pct'
               else 'weight_lost'
           end as metric_type,
           case
               when r.challenge_type = 'steps' then case when st.steps_sum > 0 then st.steps_sum::numeric end
               when r.period in ('daily', 'weekly') and not r.target_weight < r.starting_weight then null
               when not w.weighed_in then null
               when r.period = 'daily' then
                   round(100 * (r.starting_weight - w.last_weight) / (r.starting_weight - r.target_weight), 2)
               -- The week's goal: (starting − target) ÷ the weeks remaining from its Monday
               -- (docs/jobs/generate-daily-goals.md).
               when r.period = 'weekly' then
                   round(100 * greatest(1, (r.ends_on - r.period_start + 1 + 6) / 7)
                             * (coalesce(w.weight_before, r.starting_weight) - w.last_weight)
                             / (r.starting_weight - r.target_weight), 2)
               when r.period = 'monthly' then coalesce(w.weight_before, r.starting_weight) - w.last_weight
               else r.starting_weight - w.last_weight
           end as metric_value,
           case when r.challenge_type = 'steps' then case when st.steps_sum > 0 then st.steps_at end
                when w.weighed_in then w.last_weight_at end as achieved_at
      from roster r
      left join steps st using (fitcircle_id, period, key_start, role, user_id)
      left join weights w using (fitcircle_id, period, key_start, role, user_id)),
-- Members with a value hold places 1, 2, 3 …; a member without one holds none.
ranked as (
    select valued.*,
           case when metric_value is not null then
               row_number() over (partition by fitcircle_id, period, key_start, role
                                  order by metric_value desc nulls last, achieved_at asc nulls last, user_id)
           end as rank
      from valued)
select b.fitcircle_id, b.user_id, b.period, b.key_start as period_start, b.metric_type, b.metric_value, b.rank,
       -- Against the places held on the previous board.
       case when p.rank is not null and b.rank is not null then (p.rank - b.rank)::int end as rank_change
  from ranked b
  left join ranked p on p.role = 'previous' and p.fitcircle_id = b.fitcircle_id and p.period = b.period
                    and p.key_start = b.key_start and p.user_id = b.user_id
 where b.role = 'board';
