-- The floor for scripts/bench/waves: validate-streaks for one local day per user, as ONE set-based
-- statement, by the same rules (StreakRules) and with the same writes (user_streaks,
-- daily_tracking.streak_day, user_badges, job_work, notification_outbox, and each user's next
-- instant in the due index: 00:05 after the day that follows). It assumes what the benchmark
-- arranges: at most one day is due per user. psql variable: now.
with due as (
    select s.user_id, s.settled_through + 1 as day, coalesce(u.timezone, 'UTC') as tz, u.locale,
           s.current_streak, s.longest_streak, s.last_checkin_date, s.missed_days,
           case when s.week_start_date is distinct from (s.settled_through + 1) - (extract(isodow from s.settled_through + 1)::int - 1)
                then false else s.freeze_used_this_week end as freeze_used,
           (s.settled_through + 1) - (extract(isodow from s.settled_through + 1)::int - 1) as monday
      from user_streaks s
      join users u on u.id = s.user_id
     where ((s.settled_through + 2)::timestamp + interval '5 minutes') at time zone coalesce(u.timezone, 'UTC') <= :now::timestamptz
), facts as (
    select d.*, coalesce(t.mood is not null and t.energy is not null, false) as checked
      from due d
      left join daily_tracking t on t.user_id = d.user_id and t.date = d.day
), decided as (
    select f.*,
           case when checked then 'checked_in'
                when current_streak = 0 then 'inactive'
                when missed_days = 0 and not freeze_used then 'freeze_used'
                when missed_days = 0 then 'at_risk'
                else 'reset' end as outcome
      from facts f
), next_state as (
    select d.*,
           case outcome when 'checked_in' then current_streak + 1 when 'reset' then 0 else current_streak end as new_current,
           case outcome when 'checked_in' then 0 when 'at_risk' then 1 when 'freeze_used' then missed_days
                else missed_days + 1 end as new_missed
      from decided d
), streaks as (
    update user_streaks s
       set current_streak = n.new_current, longest_streak = greatest(n.longest_streak, n.new_current),
           last_checkin_date = case when n.outcome = 'checked_in' then n.day else n.last_checkin_date end,
           freeze_used_this_week = n.freeze_used or n.outcome = 'freeze_used', week_start_date = n.monday,
           settled_through = n.day, missed_days = n.new_missed, updated_at = :now::timestamptz
      from next_state n
     where s.user_id = n.user_id
    returning 1
), streak_days as (
    update daily_tracking t set streak_day = n.new_current
      from next_state n
     where n.outcome = 'checked_in' and t.user_id = n.user_id and t.date = n.day
    returning 1
), badges as (
    insert into user_badges (user_id, badge, earned_at)
    select user_id, case new_current when 7 then 'week_warrior' when 30 then 'monthly_master' else 'centurion' end,
           ((day + 1)::timestamp + interval '5 minutes') at time zone tz
      from next_state where outcome = 'checked_in' and new_current in (7, 30, 100)
    on conflict do nothing
    returning 1
), work as (
    insert into job_work (job, user_id, local_day, outcome)
    select 'validate-streaks', user_id, day, outcome from next_state
    on conflict do nothing
    returning 1
), outbox as (
    insert into notification_outbox (dedupe_key, job, user_id, local_day, notification_type, deliver_after, title, body, payload)
    select 'validate-streaks:' || user_id || ':' || (day + 1) || ':' || kind, 'validate-streaks', user_id, day + 1, kind,
           ((day + 1)::timestamp + interval '9 hours') at time zone tz,
           case when outcome = 'freeze_used' then (case when locale = 'fr' then '💎 Gel de série utilisé' else '💎 Streak freeze used' end)
                when locale = 'fr' then '🔥 Ta série de ' || new_current || case when new_current <= 1 then ' jour' else ' jours' end
                                        || ' est en danger'
                else '🔥 Your ' || new_current || '-day streak is at risk' end,
           case when outcome = 'freeze_used' then 'You missed yesterday, so we used this week''s freeze to protect your streak.'
                else 'You missed yesterday''s check-in. Check in today to keep it alive: never miss twice.' end,
           jsonb_build_object('type', kind, 'deep_link', 'fitcircle://checkin', 'streak', new_current, 'missed_day', day)
      from (select *, case outcome when 'freeze_used' then 'streak_freeze_used' else 'streak_at_risk' end as kind
              from next_state where outcome in ('freeze_used', 'at_risk')) n
    on conflict (dedupe_key) do nothing
    returning 1
), moved as (
    update job_due d set due_at = ((n.day + 2)::timestamp + interval '5 minutes') at time zone n.tz
      from next_state n
     where d.job = 'validate-streaks' and d.user_id = n.user_id
    returning 1
)
select (select count(*) from streaks) as users_settled, (select count(*) from moved) as due_moved, (select count(*) from work) as work_marks,
       (select count(*) from outbox) as notifications, (select count(*) from badges) as badges,
       (select count(*) from streak_days) as streak_days;
