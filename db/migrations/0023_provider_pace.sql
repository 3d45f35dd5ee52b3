-- Nudge 0023: a provider's pace, shared by every process that calls it (docs/jobs/dispatch.md,
-- "Email (Resend)"; docs/jobs/push-trigger.md). RESEND_REQUESTS_PER_SECOND is Resend's rate for
-- the team, NUDGE_LLM_REQUESTS_PER_MINUTE the LLM's for the key: dispatchers of overlapping cron
-- minutes and of every shard, and push-trigger's shards, take their requests' slots from one row
-- per provider (SharedPace), one statement each, on the database's clock.
--
-- Unlogged: a slot matters for a second or two, not worth a WAL record and a flush per request.
-- After a crash the table starts empty, and the next request takes its slot at once.
create unlogged table provider_pace (
    -- resend, anthropic, openai
    provider   text primary key,
    -- The next free slot: the next request leaves then at the earliest, and moves it on by its
    -- interval (1 s or a minute, over the rate).
    next_slot  timestamptz not null
);
