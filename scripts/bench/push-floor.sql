-- The floor for scripts/bench/waves: push-trigger's run at :now, as set-based SQL alone. What SQL cannot
-- do is taken as given: which candidates PushIntelligence found something to say to, and the
-- LLM's copy (floor_pushed: each user the job pushed and the layer, filled from the job's marks
-- before the clock starts; the copy is a fixed text). The rest is the job's, by its rules:
-- everyone whose 10:00 has come in the due index is read; of those in their window (180 minutes),
-- the candidates (check-ins on, a push token, the day not decided yet) have every fact the job
-- reads for them read (the last push, the conversations and messages of eight days, the last
-- conversation's words, the patterns and preferences); the frequency's interval and a session
-- today are decided here; then the same writes: the job_work marks, push_log, the outbox,
-- llm_calls, and each user's next 10:00 in the due index. Users the job fails or skips (a time
-- zone it does not know, a malformed preference, a reply the copy rules refuse) are not the
-- floor's: the benchmark's seed and stand-in give none, and the end-state check would show one.
-- psql variable: now (quoted).
begin;
-- Compiling these statements (JIT) took longer than running them (0.7 s of 1 s at 10,000 users).
set local jit = off;

create temp table pf_due on commit drop as
select d.user_id, coalesce(u.timezone, 'UTC') as tz, (:now::timestamptz at time zone coalesce(u.timezone, 'UTC'))::date as today,
       u.last_active_at
  from job_due d join users u on u.id = d.user_id
 where d.job = 'push-trigger' and d.due_at <= :now::timestamptz;
analyze pf_due;

-- The candidates' facts, as the job reads them (materialized: every column is computed).
create temp table pf_facts on commit drop as
with window_users as (
    select * from pf_due
     where :now::timestamptz >= (today + time '10:00') at time zone tz
       and :now::timestamptz < (today + time '10:00') at time zone tz + interval '180 minutes'
)
select w.user_id, w.tz, w.today, w.last_active_at, cp.notification_preferences->>'frequency' as frequency,
       (select max(sent_at) from push_log where user_id = w.user_id) as last_push,
       d.last_decided,
       -- (A day decided already costs the lookups alone, as in the job.)
       case when d.last_decided >= w.today then null else (select json_agg(json_build_object('domain', c.domain, 'title', c.title, 'created_at', c.created_at, 'updated_at', c.updated_at)
                        order by c.created_at desc)
          from (select * from conversations
                 where user_id = w.user_id and updated_at >= :now::timestamptz - interval '8 days' and created_at <= :now::timestamptz
                union
                (select * from conversations where user_id = w.user_id and created_at <= :now::timestamptz
                  order by created_at desc limit 1)) c) end as conversations,
       case when d.last_decided >= w.today then null else (select json_agg(json_build_object('content', m.content, 'domain', c.domain, 'created_at', m.created_at)
                        order by m.created_at desc)
          from (select * from messages where user_id = w.user_id and role = 'user'
                   and created_at >= :now::timestamptz - interval '8 days' and created_at <= :now::timestamptz
                 order by created_at desc limit 200) m
          join conversations c on c.id = m.conversation_id) end as messages,
       case when d.last_decided >= w.today then null else (select json_agg(m.content order by m.created_at desc)
          from (select content, created_at from messages
                 where role = 'user' and created_at <= :now::timestamptz
                   and conversation_id = (select id from conversations where user_id = w.user_id and created_at <= :now::timestamptz
                                           order by created_at desc limit 1)
                 order by created_at desc limit 3) m) end as last_words,
       pc.patterns, pc.session_count, cp.coaching_preferences, cp.domain_styles
  from window_users w
  -- Each user's profile and patterns by their key, as the job reads them: PostgreSQL cannot
  -- estimate the check-ins filter and would otherwise scan the profiles once per user.
  join lateral (select * from context_profiles where user_id = w.user_id limit 1) cp on true
  left join lateral (select * from pattern_cache where user_id = w.user_id limit 1) pc on true
 cross join lateral (select max(local_day) as last_decided from job_work where job = 'push-trigger' and user_id = w.user_id) d
 where cp.notification_preferences->'check_ins_enabled' = 'true'::jsonb
   and (select true from push_tokens t where t.user_id = w.user_id limit 1);

-- The frequency rules on the user's local days (docs/jobs/push-trigger.md, "Frequency"), then
-- the layer the job found, if any.
create temp table pf_decided on commit drop as
select f.user_id, f.today, f.conversations, f.messages, f.last_words,
       case when (f.today - (f.last_push at time zone f.tz)::date)
                 < case f.frequency when 'daily' then 1 when 'few_times_a_week' then 2 else 7 end then 'too_soon'
            when exists (select 1 from json_array_elements(f.conversations) c
                          where (c->>'created_at')::timestamptz <= :now::timestamptz
                            and ((c->>'created_at')::timestamptz at time zone f.tz)::date <= f.today
                            and ((case when (c->>'updated_at')::timestamptz <= :now::timestamptz then c->>'updated_at'
                                       else c->>'created_at' end)::timestamptz at time zone f.tz)::date >= f.today)
              or exists (select 1 from json_array_elements(f.messages) m
                          where ((m->>'created_at')::timestamptz at time zone f.tz)::date = f.today) then 'session_today'
            when p.user_id is not null then 'pushed'
            else 'nothing_to_say' end as outcome,
       p.push_type
  from pf_facts f
  left join floor_pushed p on p.user_id = f.user_id
 where f.frequency in ('daily', 'few_times_a_week', 'weekly')
   and (f.last_decided is null or f.last_decided < f.today);

insert into job_work (job, user_id, local_day, outcome, detail)
select 'push-trigger', user_id, today, outcome, coalesce(push_type, outcome) from pf_decided
on conflict (job, user_id, local_day) do nothing;

insert into push_log (user_id, push_type, content, sent_at, metadata, local_day)
select user_id, push_type, 'Checking in|How did the week''s plan go? Tell me what got in the way.', :now::timestamptz,
       jsonb_build_object('layer', push_type), today
  from pf_decided where outcome = 'pushed';

insert into notification_outbox (dedupe_key, job, user_id, local_day, notification_type, channel, deliver_after, title, body, payload)
select 'push-trigger:' || user_id || ':' || today || ':proactive_push', 'push-trigger', user_id, today, 'proactive_push', 'push',
       :now::timestamptz, 'Checking in', 'How did the week''s plan go? Tell me what got in the way.',
       jsonb_build_object('domain', 'general', 'action', 'new_conversation', 'push_type', push_type)
  from pf_decided where outcome = 'pushed'
on conflict (dedupe_key) do nothing;

-- The prompt is built from the facts: its size stands for the tokens the LLM was sent.
insert into llm_calls (job, user_id, provider, model, input_tokens, output_tokens, outcome)
select 'push-trigger', user_id, 'anthropic', 'floor',
       (octet_length(coalesce(conversations::text, '') || coalesce(messages::text, '') || coalesce(last_words::text, '')) / 4)::int,
       40, 'used'
  from pf_decided where outcome = 'pushed';

update job_due d
   set due_at = case when :now::timestamptz < (p.today + time '10:00') at time zone p.tz then (p.today + time '10:00') at time zone p.tz
                     else (p.today + 1 + time '10:00') at time zone p.tz end,
       planned_at = null
  from pf_due p
 where d.job = 'push-trigger' and d.user_id = p.user_id;

commit;
