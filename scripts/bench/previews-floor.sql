-- The floor for preview-notifications (scripts/bench/previews): the job's work at :now as
-- set-based SQL alone, in one statement. The same calls (pending, not decided for their time,
-- preview due by :now + 2 min, begun at most an hour ago, found through the same index), the same
-- path per user (as PreviewPath chooses it, docs/jobs/preview-notifications.md), the same outbox rows (type, channel, due
-- time, key; the words in their simplest form) and the same marks on the calls.
--   psql -v now="'2026-03-19T09:00:00Z'" -f scripts/bench/previews-floor.sql
with due as (
    select c.id, c.user_id, c.scheduled_at, c.topic, u.notification_lead_min as lead, coalesce(u.timezone, 'UTC') as timezone,
           u.notification_pref as pref, p.name as coach, coalesce(s.current_streak, 0) as streak,
           coalesce(np.push_enabled, true)
           and (exists (select 1 from user_push_tokens t where t.user_id = u.id and t.active)
                or (coalesce(u.fcm_token, '') <> '' and u.push_enabled
                    and not exists (select 1 from user_push_tokens t where t.user_id = u.id and t.device_token = u.fcm_token)))
               as push,
           coalesce(regexp_replace(trim(u.phone_number), '[ .()-]', '', 'g') ~ '^\+[1-9][0-9]{7,14}$', false) as phone
      from scheduled_calls c
      join users u on u.id = c.user_id
      left join coach_personas p on p.id = u.coach_persona_id
      left join user_streaks s on s.user_id = u.id
      left join notification_preferences np on np.user_id = u.id
     where c.status = 'pending' and c.preview_for is distinct from c.scheduled_at
       and (c.preview_due_at > :now::timestamptz - interval '3 hours' and c.preview_due_at <= :now::timestamptz + interval '2 minutes'
            -- a call written without its due time: by its call time, the due time computed
            or c.preview_due_at is null and c.scheduled_at <= :now::timestamptz + interval '122 minutes'
               and c.scheduled_at - make_interval(mins => u.notification_lead_min) <= :now::timestamptz + interval '2 minutes')
       and c.scheduled_at > :now::timestamptz - interval '1 hour'
), decided as (
    select d.*,
           case when d.lead = 0 or d.scheduled_at <= :now::timestamptz then null
                when d.pref = 'sms_only' then case when d.phone then 'B' end
                when d.pref = 'push_and_sms' and d.push and d.phone then 'C'
                when d.push then 'A'
                when d.phone then 'B' end as path,
           greatest(d.scheduled_at - make_interval(mins => d.lead), :now::timestamptz) as send_at,
           d.id || ':' || extract(epoch from d.scheduled_at)::bigint as occasion
      from due d
), messages as (
    select d.*, m.type, m.channel, d.send_at + m.after as deliver_after
      from decided d
     cross join lateral (values ('preview_push', 'push', interval '0'), ('fallback_sms', 'sms', interval '30 seconds'),
                                ('preview_sms', 'sms', interval '0')) as m(type, channel, after)
     where (m.type = 'preview_push' and d.path in ('A', 'C'))
        or (m.type = 'fallback_sms' and d.path in ('A', 'C') and d.phone)
        or (m.type = 'preview_sms' and d.path = 'B')
), queued as (
    insert into notification_outbox (dedupe_key, job, user_id, local_day, notification_type, channel, deliver_after, title,
                                     body, payload, run_id)
    select 'preview-notifications:' || m.user_id || ':' || m.type || case when m.channel = 'push' then '' else ':sms' end
               || ':' || m.occasion,
           'preview-notifications', m.user_id, (m.scheduled_at at time zone m.timezone)::date, m.type, m.channel, m.deliver_after,
           case when m.channel = 'push' then format('%s is calling in %s min!', coalesce(m.coach, 'Your coach'), m.lead) else '' end,
           case when m.channel = 'push' then format('Day %s: %s.', m.streak, coalesce(m.topic, 'your check-in'))
                else format('%s calling in %s min! Day %s. Answer!', coalesce(m.coach, 'Your coach'), m.lead, m.streak) end,
           jsonb_build_object('call_id', m.id, 'scheduled_at', to_char(m.scheduled_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                              'path', m.path),
           null
      from messages m
    on conflict (dedupe_key) do nothing
)
update scheduled_calls c
   set preview_for = c.scheduled_at,
       -- whether a preview for that time reached a channel (dispatch sets it when one does)
       (preview_sent, preview_sent_at) = (
           select count(*) > 0, min(o.sent_at) from notification_outbox o
            where o.user_id = c.user_id and o.job = 'preview-notifications' and o.sent_at is not null
              and o.payload->>'call_id' = c.id::text
              and o.payload->>'scheduled_at' = to_char(c.scheduled_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')),
       preview_note = case when d.path is null then 'not sent' end, updated_at = :now::timestamptz
  from decided d
 where c.id = d.id;
