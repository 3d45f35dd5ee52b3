-- Nudge 0019: what `nudge serve` changes beyond its own rows goes through functions that run
-- with their owner's rights, so that its role (`nudge_serve`, deploy/sql/roles.sql) needs no
-- right to read a notification's copy nor to move anyone's due instant.

-- Sets the log rows of these emails (and seed 003's `email_logs`) from all their events
-- (`nudge_email_receipts`); returns the ids of the emails with a log row. The same events give
-- the same rows, however often it runs. The webhook calls it for the email an event names;
-- dispatch for the logs it wrote while their events came.
create function nudge_apply_email_receipts(p_email_ids text[]) returns setof text
language sql security definer set search_path = public, pg_temp as $$
    with logs as (
        update notification_logs l
           set (delivered, delivered_at, opened, opened_at, clicked_at, bounced_at, bounce_type, complained_at, status, error_msg)
             = (select r.delivered, r.delivered_at, r.opened, r.opened_at, r.clicked_at, r.bounced_at, r.bounce_type,
                       r.complained_at, r.status, r.error_msg
                  from nudge_email_receipts(l) r)
         where l.channel = 'email' and l.provider_id = any(p_email_ids)
        returning l.provider_id
    ), seed_logs as (
        update email_logs g
           set opened = g.opened or e.opened, clicked = g.clicked or e.clicked
          from (select email_id, bool_or(type in ('email.opened', 'email.clicked')) as opened,
                       bool_or(type = 'email.clicked') as clicked
                  from email_events where email_id = any(p_email_ids) group by email_id) e
         where g.provider_id = e.email_id
    )
    select distinct provider_id from logs
$$;
revoke execute on function nudge_apply_email_receipts(text[]) from public;

-- A preferences row an unsubscribe creates makes its user due for reminders (a trigger): the
-- due index is moved with the owner's rights, one user at a time, never by the caller's.
alter function nudge_due_now(text, uuid) security definer set search_path = public, pg_temp;
-- Only the triggers call it: they run with their owner's rights too, and nobody else may (a
-- caller could otherwise make every user due on every run).
revoke execute on function nudge_due_now(text, uuid) from public;
alter function nudge_reminders_due() security definer set search_path = public, pg_temp;
alter function nudge_jobs_due() security definer set search_path = public, pg_temp;
alter function nudge_streaks_due() security definer set search_path = public, pg_temp;
alter function nudge_goals_tracking_due() security definer set search_path = public, pg_temp;
alter function nudge_goals_day_due(uuid, date) security definer set search_path = public, pg_temp;
revoke execute on function nudge_goals_day_due(uuid, date) from public;

-- The apps' push receipts: only the roles the operator grants it to (its comment in 0018 says so).
revoke execute on function nudge_push_receipt(bigint, text, timestamptz, text) from public;
