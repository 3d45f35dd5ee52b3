-- Nudge 0020: reminders right for each user (docs/jobs/reminders.md): every write of a reminder
-- time is the user's choice, the zones a user was in are kept for the time learned from their
-- check-ins, and a user is due again when their quiet hours change, when a catch-up write finds
-- their streak at risk, and when their check-in push ended without reaching a device.
--
-- It alters busy tables (notification_preferences, notification_outbox, users): a lock it waits
-- for more than 10 s (a long transaction of the app's) fails it cleanly, to run again later.
set local lock_timeout = '10s';

-- Every write of `daily_reminder_time` by the app is the user's choice, 20:00 included: an insert
-- that names the column, an update whose SET list names it. The seed's default (20:00) is
-- applied by the trigger, not by the column, so that an insert that names the column can be told
-- from one that does not. Writing null goes back to Nudge's time (learned, or 20:00), as does
-- clearing `reminder_time_set_at`. A time written again unchanged keeps the instant it was first
-- chosen at, so an app that writes whole rows back costs no read.
alter table notification_preferences alter column daily_reminder_time drop default;
create or replace function nudge_reminder_time_set() returns trigger language plpgsql as $$
begin
    if tg_op = 'INSERT' then
        if new.daily_reminder_time is null then
            new.daily_reminder_time := time '20:00';
            new.reminder_time_set_at := null;
        elsif new.reminder_time_set_at is null then
            new.reminder_time_set_at := statement_timestamp();
        end if;
    elsif new.daily_reminder_time is null then
        new.daily_reminder_time := time '20:00';
        new.reminder_time_set_at := null;
    elsif new.reminder_time_set_at is not distinct from old.reminder_time_set_at
          and (old.reminder_time_set_at is null or new.daily_reminder_time is distinct from old.daily_reminder_time) then
        new.reminder_time_set_at := statement_timestamp();
    end if;
    return new;
end
$$;

-- The user is due when what decides their reminder time changes: the time, whether they chose
-- it, and their quiet hours (a time Nudge learned lies outside them).
drop trigger notification_preferences_reminders_due on notification_preferences;
create trigger notification_preferences_reminders_due
    after update of daily_reminder_time, reminder_time_set_at, push_enabled, email_enabled, dnd_start, dnd_end
    on notification_preferences
    for each row when ((old.daily_reminder_time, old.reminder_time_set_at, old.push_enabled, old.email_enabled,
                        old.dnd_start, old.dnd_end)
                       is distinct from (new.daily_reminder_time, new.reminder_time_set_at, new.push_enabled, new.email_enabled,
                                         new.dnd_start, new.dnd_end))
    execute function nudge_reminders_due();

-- A streak found at risk: validate-streaks settling a day that leaves `missed_days` at 1, also
-- when it was 1 before (a catch-up over several days), so the email goes at 09:00.
drop trigger user_streaks_reminders_due on user_streaks;
create trigger user_streaks_reminders_due after update of missed_days, settled_through on user_streaks
    for each row when (new.missed_days = 1 and (old.missed_days is distinct from 1
                                                 or old.settled_through is distinct from new.settled_through))
    execute function nudge_reminders_due();

-- The zones a user was in before the one they are in now, each with the instant it was left:
-- the reminder time is learned from each check-in at the local time it was made at. Written by
-- a trigger when `users.timezone` changes (with the owner's rights: the app's role needs no right
-- on it); read by reminders for the last weeks only, and pruned after `jobs/prune.json` says.
create table user_timezone_history (
    user_id      uuid not null references users(id) on delete cascade,
    -- The zone the user had (null: none, which Nudge reads as UTC).
    timezone     text,
    -- When the user left it.
    valid_until  timestamptz not null,
    primary key (user_id, valid_until)
);
create index idx_user_timezone_history_until on user_timezone_history (valid_until);
create function nudge_timezone_left() returns trigger
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
begin
    insert into public.user_timezone_history (user_id, timezone, valid_until)
    values (old.id, old.timezone, clock_timestamp())
    on conflict (user_id, valid_until) do nothing;
    return null;
end
$$;
revoke execute on function nudge_timezone_left() from public;
create trigger users_timezone_left after update of timezone on users
    for each row when (old.timezone is distinct from new.timezone) execute function nudge_timezone_left();

-- The day's check-in push ended without reaching a device (refused, failed, or suppressed by a
-- preference, a device gone or its shelf life): the user is due, and the email follows at 21:00.
create trigger notification_outbox_checkin_push_ended after update of status on notification_outbox
    for each row when (new.job = 'reminders' and new.notification_type = 'daily_checkin' and new.channel = 'push'
                       and new.status in ('failed', 'suppressed') and old.status is distinct from new.status
                       and new.sent_at is null and new.delivered_to = '{}')
    execute function nudge_jobs_due('reminders');
