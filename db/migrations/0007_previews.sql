-- Nudge 0007: call previews (seed 000) and the SMS channel.

-- The call time a preview was decided for: queued (preview_sent), or not sent, with why in
-- preview_note (the call was found after it began; the user has no channel). A call moved to
-- another time no longer matches it, and preview-notifications decides its preview anew; the
-- outbox rows queued for the old time are refused by dispatch.
alter table scheduled_calls
    add column preview_for   timestamptz,
    add column preview_note  text;

-- What preview-notifications reads every minute: the pending calls not decided for their time.
create index idx_scheduled_calls_preview on scheduled_calls(scheduled_at)
    where status = 'pending' and preview_for is distinct from scheduled_at;

-- An SMS has no idempotency key (Twilio): dispatch records the instant its request leaves,
-- before sending, and clears it with the outcome. A row claimed again with it still set (its
-- dispatcher died, or the answer never came) may have been sent: it is never sent again.
alter table notification_outbox add column request_left_at timestamptz;

-- Twilio's status callbacks find an SMS's log by its message SID.
create index idx_notif_sms_provider_id on notification_logs(provider_id) where channel = 'sms';

-- The calls already previewed are decided for their time: in batches of 10,000 calls, each its
-- own transaction, after the schema above (Migrator), so that a big table is not held by one.
-- nudge:backfill scheduled_calls 10000
update scheduled_calls set preview_for = scheduled_at
 where preview_sent and preview_for is null and id > {{after}} and id <= {{through}}
