-- Nudge 0009: what dispatch knows about each provider, shared by every dispatcher and the next
-- cron minute; and an outbox whose waiting rows cost nothing while they wait.

-- One row per provider (ChannelHealth): up, down (most recent answers were 5xx, time-outs or
-- refused connections) or paused (it refused Nudge's configuration, or called a burst of valid
-- tokens unknown). While it is not up, a few parked rows are woken every probe_at to try it
-- again (probe_rows). The windows count its recent answers across dispatchers.
create table provider_health (
    provider        text primary key check (provider in ('apns', 'fcm', 'resend', 'twilio')),
    state           text not null default 'up' check (state in ('up', 'down', 'paused')),
    since           timestamptz,
    reason          text,
    -- Paused: the configuration it was paused under (who, never a secret), and whether a burst of
    -- unknown tokens paused it rather than an answer about the configuration.
    config          text,
    burst           boolean not null default false,
    probe_at        timestamptz,
    probe_rows      bigint[] not null default '{}',
    -- The last minute's answers: how many, and how many of them 5xx, time-outs or refusals.
    window_start    timestamptz,
    window_answers  integer not null default 0,
    window_outages  integer not null default 0,
    -- The last half hour's answers, and how many called the device token unknown.
    tokens_start    timestamptz,
    tokens_answers  integer not null default 0,
    tokens_unknown  integer not null default 0,
    -- Each write adds one: a dispatcher writes what it learnt only onto the row it read.
    version         bigint not null default 0,
    -- When a dispatcher last wrote it (null: never).
    updated_at      timestamptz
);
insert into provider_health (provider) values ('apns'), ('fcm'), ('resend'), ('twilio');

-- A row waiting for a provider that is down, paused or not configured is parked: due again
-- only when its shelf life ends (it then expires), unless the provider is back first and wakes
-- it. A claim never sees it meanwhile.
alter table notification_outbox add column waiting_for text;
create index idx_outbox_parked on notification_outbox (waiting_for, id) where waiting_for is not null;

-- A claim's reads of one user: the rows still open (its release, its grouping), and the pushes
-- of the last days the caps count, never the user's whole history.
create index idx_outbox_user_open on notification_outbox (user_id)
    where next_attempt_at is null or next_attempt_at < 'infinity';
create index idx_outbox_user_sent on notification_outbox (user_id, sent_at)
    where sent_at is not null and channel = 'push';
