-- Nudge 0001: the tables of SPEC §3 with the seeds' column names, and Nudge's own run ledger,
-- work records, outbox and pauses. Seed names are a contract shared with the apps and the API:
-- columns may be added and types widened, never renamed.

create extension if not exists pgcrypto;

-- Users and coaching ---------------------------------------------------------------------------

create table coach_personas (
    id          uuid primary key default gen_random_uuid(),
    name        text not null,
    locale      text not null default 'en' check (locale in ('en', 'fr')),
    created_at  timestamptz not null default now()
);

create table users (
    id                     uuid primary key default gen_random_uuid(),
    timezone               text,                      -- IANA name; null means UTC (seed 002)
    locale                 text not null default 'en' check (locale in ('en', 'fr')),
    display_name           text,
    email                  text,
    phone_number           text,
    created_at             timestamptz not null default now(),
    last_active_at         timestamptz,
    coach_persona_id       uuid references coach_personas(id),
    -- seed 000, "columns to add to users"
    fcm_token              text,
    push_enabled           boolean not null default true,
    notification_pref      text not null default 'push_only'
                           check (notification_pref in ('push_only', 'sms_only', 'push_and_sms')),
    notification_lead_min  integer not null default 5 check (notification_lead_min between 0 and 120)
);

-- Daily tracking, goals, streaks (seed 003, Features 1, 2, 4, 5) -------------------------------

create table daily_tracking (
    id                       uuid primary key default gen_random_uuid(),
    user_id                  uuid not null references users(id) on delete cascade,
    date                     date not null,                   -- the user's local day
    steps                    integer,
    weight                   numeric,
    mood                     integer,                         -- 1-5; validated by the jobs, not here,
    energy                   integer,                         -- so that one bad row fails one user only
    checked_in_at            timestamptz,
    previous_day_sentiment   text check (previous_day_sentiment in ('great', 'ok', 'could_be_better')),
    previous_day_steps       integer,
    streak_day               integer,
    submitted_to_fitcircles  boolean not null default false,
    submission_timestamp     timestamptz,
    created_at               timestamptz not null default now(),
    updated_at               timestamptz not null default now(),
    unique (user_id, date)
);

create table daily_goals (
    id            uuid primary key default gen_random_uuid(),
    user_id       uuid not null references users(id) on delete cascade,
    date          date not null,
    goal_type     text not null check (goal_type in ('steps', 'weight', 'checkin', 'workout', 'water')),
    target_value  numeric,
    actual_value  numeric,
    completed     boolean not null default false,
    created_at    timestamptz not null default now(),
    unique (user_id, date, goal_type)
);

create table fitcircles (
    id                   uuid primary key default gen_random_uuid(),
    name                 text not null,
    challenge_type       text not null check (challenge_type in ('steps', 'weight_loss')),
    timezone             text not null default 'UTC',        -- the circle's leaderboard day
    starts_on            date not null,
    ends_on              date not null,
    challenge_step_goal  integer,
    created_at           timestamptz not null default now(),
    check (ends_on >= starts_on)
);

create table fitcircle_members (
    fitcircle_id     uuid not null references fitcircles(id) on delete cascade,
    user_id          uuid not null references users(id) on delete cascade,
    joined_at        timestamptz not null default now(),
    left_at          timestamptz,
    starting_weight  numeric,
    target_weight    numeric,
    primary key (fitcircle_id, user_id)
);
create index idx_fitcircle_members_user on fitcircle_members(user_id);

create table weekly_goals (
    id               uuid primary key default gen_random_uuid(),
    user_id          uuid not null references users(id) on delete cascade,
    week_start       date not null check (extract(isodow from week_start) = 1),   -- always a Monday
    goal_type        text not null check (goal_type in ('steps', 'weight', 'streak', 'active_days')),
    target_value     numeric,
    actual_value     numeric,
    daily_breakdown  jsonb not null default '{}'::jsonb,
    completed        boolean not null default false,
    fitcircle_id     uuid references fitcircles(id) on delete set null,
    created_at       timestamptz not null default now(),
    unique (user_id, week_start, goal_type)
);

create table user_streaks (
    id                     uuid primary key default gen_random_uuid(),
    user_id                uuid not null unique references users(id) on delete cascade,
    current_streak         integer not null default 0,
    longest_streak         integer not null default 0,
    last_checkin_date      date,
    freeze_used_this_week  boolean not null default false,
    week_start_date        date,
    created_at             timestamptz not null default now(),
    updated_at             timestamptz not null default now(),
    -- Nudge: how far validate-streaks has settled this user (the last local day settled), and
    -- how many consecutive days were missed without a freeze ("never miss twice").
    settled_through        date,
    missed_days            integer not null default 0
);

create table user_badges (
    user_id    uuid not null references users(id) on delete cascade,
    badge      text not null check (badge in ('week_warrior', 'monthly_master', 'centurion')),
    earned_at  timestamptz not null default now(),
    primary key (user_id, badge)
);

create table fitcircle_data_submissions (
    id                     uuid primary key default gen_random_uuid(),
    fitcircle_id           uuid not null references fitcircles(id) on delete cascade,
    user_id                uuid not null references users(id) on delete cascade,
    submission_date        date not null,
    steps                  integer,
    weight                 numeric,
    submitted_at           timestamptz not null default now(),
    rank_after_submission  integer,
    rank_change            integer,
    unique (fitcircle_id, user_id, submission_date)
);

create table fitcircle_leaderboard_entries (
    id             uuid primary key default gen_random_uuid(),
    fitcircle_id   uuid not null references fitcircles(id) on delete cascade,
    user_id        uuid not null references users(id) on delete cascade,
    period         text not null check (period in ('daily', 'weekly', 'monthly', 'all_time')),
    period_start   date not null,
    metric_type    text not null check (metric_type in ('steps', 'weight_loss_pct', 'checkin_streak')),
    metric_value   numeric,
    rank           integer,
    rank_change    integer,
    last_updated   timestamptz not null default now(),
    unique (fitcircle_id, period, period_start, user_id)
);
create index idx_leaderboard_circle_period_rank
    on fitcircle_leaderboard_entries(fitcircle_id, period, period_start, rank);

-- Notifications (seed 003, Features 6-8; seed 000) ---------------------------------------------

create table user_push_tokens (
    id            uuid primary key default gen_random_uuid(),
    user_id       uuid not null references users(id) on delete cascade,
    device_token  text not null,
    platform      text not null check (platform in ('ios', 'android')),
    active        boolean not null default true,      -- an invalid token is deactivated, never deleted
    last_used     timestamptz,
    created_at    timestamptz not null default now(),
    unique (user_id, device_token)
);
create index idx_user_push_tokens_user on user_push_tokens(user_id) where active;

-- Seed 002's push_tokens, read over the one token store, with seed 000's users.fcm_token as one
-- more token for the apps that still write it.
create view push_tokens as
    select t.user_id, t.device_token, t.platform, t.created_at,
           coalesce(t.last_used, t.created_at) as updated_at
      from user_push_tokens t
     where t.active
    union all
    select u.id, u.fcm_token, 'fcm', u.created_at, u.created_at
      from users u
     where u.fcm_token is not null and u.push_enabled
       and not exists (select 1 from user_push_tokens t
                        where t.user_id = u.id and t.device_token = u.fcm_token);

create table notification_preferences (
    id                        uuid primary key default gen_random_uuid(),
    user_id                   uuid not null unique references users(id) on delete cascade,
    push_enabled              boolean not null default true,
    email_enabled             boolean not null default true,
    inapp_enabled             boolean not null default true,
    push_daily_checkin        boolean not null default true,
    push_streak_risk          boolean not null default true,
    push_weekly_goal          boolean not null default true,
    push_data_submission      boolean not null default true,
    push_leaderboard_change   boolean not null default true,
    push_social_engagement    boolean not null default true,
    push_weekly_digest        boolean not null default true,
    push_challenge_milestone  boolean not null default true,
    email_daily_checkin       boolean not null default true,
    email_streak_risk         boolean not null default true,
    email_weekly_digest       boolean not null default true,
    email_monthly_report      boolean not null default true,
    email_fitcircle_invite    boolean not null default true,
    email_challenge_milestone boolean not null default true,
    daily_reminder_time       time not null default '20:00:00',
    dnd_start                 time not null default '22:00:00',
    dnd_end                   time not null default '08:00:00',   -- SPEC §3: 22:00-08:00 (seed 004)
    pause_weekends            boolean not null default false,
    updated_at                timestamptz not null default now()
);

create table email_preferences (
    id                      uuid primary key default gen_random_uuid(),
    user_id                 uuid not null unique references users(id) on delete cascade,
    daily_checkin_reminder  boolean not null default true,
    streak_at_risk          boolean not null default true,
    weekly_digest           boolean not null default true,
    monthly_report          boolean not null default true,
    fitcircle_invites       boolean not null default true,
    challenge_milestones    boolean not null default true,
    unsubscribe_token       text not null unique default encode(gen_random_bytes(24), 'hex'),
    updated_at              timestamptz not null default now()
);

create table email_logs (
    id          uuid primary key default gen_random_uuid(),
    user_id     uuid not null references users(id) on delete cascade,
    email_type  text not null,
    sent_at     timestamptz not null default now(),
    opened      boolean not null default false,
    clicked     boolean not null default false,
    provider_id text
);
create index idx_email_logs_user on email_logs(user_id, sent_at desc);

create table scheduled_calls (
    id               uuid primary key default gen_random_uuid(),
    user_id          uuid not null references users(id) on delete cascade,
    scheduled_at     timestamptz not null,
    status           text not null default 'pending'
                     check (status in ('pending', 'in_progress', 'completed', 'missed', 'cancelled', 'failed')),
    topic            text,
    preview_sent     boolean not null default false,
    preview_sent_at  timestamptz,
    created_at       timestamptz not null default now(),
    updated_at       timestamptz not null default now()
);
create index idx_scheduled_calls_pending on scheduled_calls(scheduled_at) where status = 'pending';
create index idx_scheduled_calls_user on scheduled_calls(user_id);

-- One row per delivery attempt: the union of seed 000 §06 and seed 003 F6.
create table notification_logs (
    id                 uuid primary key default gen_random_uuid(),
    user_id            uuid not null references users(id) on delete cascade,
    call_id            uuid references scheduled_calls(id) on delete set null,
    type               text,                -- seed 000: preview_push, preview_sms, fallback_sms
    notification_type  text,                -- seed 003: daily_checkin, streak_risk, ...
    channel            text not null default 'push' check (channel in ('push', 'sms', 'email', 'inapp')),
    status             text not null default 'queued'
                       check (status in ('queued', 'sent', 'delivered', 'failed', 'opened', 'suppressed', 'deferred')),
    title              text,
    body               text,
    payload            jsonb,
    provider_id        text,
    error_msg          text,
    sent_at            timestamptz,
    delivered          boolean not null default false,
    delivered_at       timestamptz,
    opened             boolean not null default false,
    opened_at          timestamptz,
    created_at         timestamptz not null default now(),
    check (type is not null or notification_type is not null)
);
create index idx_notif_user on notification_logs(user_id, created_at desc);
create index idx_notif_call on notification_logs(call_id);

-- The coach (seed 002) --------------------------------------------------------------------------

create table context_profiles (
    user_id                   uuid primary key references users(id) on delete cascade,
    timezone                  text,
    notification_preferences  jsonb not null default '{"check_ins_enabled": false, "frequency": "weekly"}'::jsonb,
    coaching_preferences      jsonb not null default '{}'::jsonb,
    domain_styles             jsonb not null default '{}'::jsonb,
    created_at                timestamptz not null default now(),
    updated_at                timestamptz not null default now()
);

create table conversations (
    id          uuid primary key default gen_random_uuid(),
    user_id     uuid not null references users(id) on delete cascade,
    domain      text,
    title       text,
    created_at  timestamptz not null default now(),
    updated_at  timestamptz not null default now()
);
create index idx_conversations_user_created on conversations(user_id, created_at desc);

create table messages (
    id               uuid primary key default gen_random_uuid(),
    conversation_id  uuid not null references conversations(id) on delete cascade,
    user_id          uuid not null references users(id) on delete cascade,
    role             text not null check (role in ('user', 'assistant', 'system')),
    content          text not null,
    created_at       timestamptz not null default now()
);
create index idx_messages_user_created on messages(user_id, created_at desc);
create index idx_messages_conversation on messages(conversation_id, created_at);

create table learning_signals (
    id           uuid primary key default gen_random_uuid(),
    user_id      uuid not null references users(id) on delete cascade,
    signal_type  text not null,
    signal_data  jsonb not null default '{}'::jsonb,
    created_at   timestamptz not null default now()
);
create index idx_learning_signals_user on learning_signals(user_id, created_at desc);

create table pattern_cache (
    user_id        uuid primary key references users(id) on delete cascade,
    patterns       jsonb not null default '[]'::jsonb,   -- PatternSummary[]: theme, occurrences, domains, confidence, synthesis
    session_count  integer not null default 0,           -- sessions since computed; stale after 3 (seed 002)
    created_at     timestamptz not null default now(),
    updated_at     timestamptz not null default now()
);

create table push_log (
    id         uuid primary key default gen_random_uuid(),
    user_id    uuid not null references users(id) on delete cascade,
    push_type  text not null check (push_type in ('event_based', 'pattern_based', 're_engagement')),
    content    text not null,
    sent_at    timestamptz not null default now(),
    opened     boolean not null default false,
    metadata   jsonb default '{}'::jsonb
);
create index idx_push_log_user_sent on push_log(user_id, sent_at desc);

-- Seed 002's row-level security, where the database has Supabase's roles; skipped otherwise.
do $$
begin
    if exists (select 1 from pg_roles where rolname = 'service_role')
       and exists (select 1 from pg_proc p join pg_namespace n on n.oid = p.pronamespace
                    where n.nspname = 'auth' and p.proname = 'uid') then
        execute 'alter table push_log enable row level security';
        execute 'create policy "Users can read own push logs" on push_log for select using (auth.uid() = user_id)';
        execute 'create policy "Service role manages push logs" on push_log for all using (auth.role() = ''service_role'')';
    end if;
end
$$;

-- Nudge's own tables ----------------------------------------------------------------------------

-- The run ledger: one row per run, kept for dry runs too.
create table job_runs (
    id             bigint generated always as identity primary key,
    job            text not null,
    shard_index    integer not null default 0,
    shard_count    integer not null default 1,
    parameters     jsonb not null default '{}'::jsonb,
    scope_key      text not null,            -- what a resumed run must match (job, shard, days, users, clock)
    clock          timestamptz not null,     -- the instant the run believed it was (--now)
    dry_run        boolean not null default false,
    host           text not null,
    pid            integer not null,
    started_at     timestamptz not null default now(),
    heartbeat_at   timestamptz not null default now(),
    ended_at       timestamptz,
    status         text not null default 'running'
                   check (status in ('running', 'succeeded', 'partial', 'aborted', 'interrupted', 'paused', 'superseded')),
    processed      integer not null default 0,
    succeeded      integer not null default 0,
    skipped        integer not null default 0,
    failed         integer not null default 0,
    checkpoint     uuid,                     -- the last user id whose batch committed
    resumed_from   bigint references job_runs(id),
    summary        jsonb not null default '{}'::jsonb,
    error          text
);
create index idx_job_runs_job_started on job_runs(job, started_at desc);

-- Why a user was not done in a run: the per-user part of the ledger.
create table job_run_failures (
    run_id      bigint not null references job_runs(id) on delete cascade,
    user_id     uuid not null,
    reason      text not null,
    at          timestamptz not null default now(),
    primary key (run_id, user_id)
);

-- What each job has done for each user and logical local day: cron, a backfill and a rerun
-- share this one notion of "done".
create table job_work (
    job        text not null,
    user_id    uuid not null references users(id) on delete cascade,
    local_day  date not null,
    outcome    text not null,
    run_id     bigint references job_runs(id) on delete set null,
    done_at    timestamptz not null default now(),
    primary key (job, user_id, local_day)
);

-- Every notification a job decides on; dispatch delivers it. The deduplication key
-- (job, user, logical day, type) makes a replayed decision insert nothing new.
create table notification_outbox (
    id                 bigint generated always as identity primary key,
    dedupe_key         text not null unique,
    job                text not null,
    user_id            uuid not null references users(id) on delete cascade,
    local_day          date not null,
    notification_type  text not null,
    deliver_after      timestamptz not null,
    title              text,
    body               text,
    payload            jsonb not null default '{}'::jsonb,
    status             text not null default 'pending'
                       check (status in ('pending', 'sending', 'sent', 'failed', 'suppressed', 'cancelled')),
    attempts           integer not null default 0,
    run_id             bigint references job_runs(id) on delete set null,
    created_at         timestamptz not null default now()
);
create index idx_outbox_pending on notification_outbox(deliver_after) where status = 'pending';
create index idx_outbox_user on notification_outbox(user_id, created_at desc);

-- The database kill switch: `nudge pause <job>` / `nudge resume <job>`.
create table job_pauses (
    job        text primary key,
    paused_at  timestamptz not null default now(),
    paused_by  text not null,
    reason     text
);
