-- Nudge 0005: delivery. dispatch drains the outbox to every device of each user, within their
-- preferences, quiet hours and caps; the runner pages more than users.

-- A run's failures name the item that failed: a user, or a circle, a call, for the jobs that
-- page those.
alter table job_run_failures rename column user_id to item_id;

-- The outbox as dispatch drains it. A row is 'pending' until it is due
-- (coalesce(next_attempt_at, deliver_after): deferred by quiet hours, or retried after a
-- provider's error), 'sending' while a dispatcher holds it (until lease_until; a row whose holder
-- died is taken again after that), then 'sent', 'suppressed' or 'failed' with the reason in
-- last_error, and next_attempt_at 'infinity': nothing more is due. delivered_to names the devices
-- that have it, so that a retry goes to the others only; delivery_id is the row whose delivery it
-- went out in (grouped within five minutes), and fixes the collapse id a retry carries.
alter table notification_outbox
    add column channel          text not null default 'push' check (channel in ('push', 'email', 'sms')),
    add column next_attempt_at  timestamptz,
    add column lease_until      timestamptz,
    add column claimed_by       bigint,
    add column delivered_to     text[] not null default '{}',
    add column delivery_id      bigint,
    add column sent_at          timestamptz,
    add column last_error       text;
update notification_outbox set next_attempt_at = 'infinity' where status not in ('pending', 'sending');
alter table notification_outbox add constraint notification_outbox_open_check
    check ((status in ('pending', 'sending')) = (next_attempt_at is null or next_attempt_at < 'infinity'));

-- What is due, in the order it falls due: the rows with something still to do. A claim changes no
-- column this index (or any other) reads, so PostgreSQL updates the row in place (a HOT update,
-- with room left on each page for it), without a new entry in every index; only a row's end (or a
-- new due time) moves it. A user's rows and the deliveries the caps count are found through
-- idx_outbox_user.
alter table notification_outbox set (fillfactor = 80);
drop index idx_outbox_pending;
create index idx_outbox_due on notification_outbox ((coalesce(next_attempt_at, deliver_after)), id)
    where next_attempt_at is null or next_attempt_at < 'infinity';

-- Which dispatcher decides a user's notifications now: one at a time, so that caps and grouping
-- hold whatever number of dispatchers run. A lease ends at leased_until; a dispatcher that died
-- leaves it to expire. No foreign key: a claim must not check users row by row, and a lease left
-- by a deleted user is harmless.
create table dispatch_leases (
    user_id       uuid primary key,
    run_id        bigint not null,
    leased_until  timestamptz not null
);

-- Provider tokens (the APNs JWT, the FCM OAuth2 access token) outlive the process that made
-- them: cron starts a dispatcher every minute, and APNs refuses a new token more than every 20
-- minutes. Sealed with AES-GCM under a key derived from the provider's private key, so a reader
-- of this table without that key holds nothing usable. credential names which key (APNs team and
-- key id, the FCM service account and key id), never the key.
create table provider_tokens (
    provider      text not null,
    credential    text not null,
    sealed_token  bytea not null,
    issued_at     timestamptz not null,
    expires_at    timestamptz not null,
    primary key (provider, credential)
);

-- Every delivery attempt (seeds 000 and 003): which outbox row, which provider and device, which
-- attempt, which run. History: no foreign keys of Nudge's own to check on every attempt, nor to
-- hold back a clean-up of the outbox.
alter table notification_logs
    add column outbox_id        bigint,
    add column provider         text,
    add column device_token_id  uuid,
    add column attempt          integer,
    add column run_id           bigint;
create index idx_notif_outbox on notification_logs(outbox_id);
