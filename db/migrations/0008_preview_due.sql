-- Nudge 0008: when each call's preview falls due, indexed, so that preview-notifications reads
-- only the calls whose preview can be due at its clock, whatever the number of calls.

-- scheduled_at − the user's notification_lead_min. The app writes scheduled_calls and users;
-- triggers keep this column right whatever it writes: a call inserted, moved or given to
-- another user; a user's lead changed (every call of theirs, whatever its status, since a
-- cancelled call may be pending again). A load that bypasses triggers (session_replication_role
-- = replica, as `nudge seed` does) writes it itself: a call without it is never read.
alter table scheduled_calls add column preview_due_at timestamptz;

create function nudge_call_preview_due() returns trigger language plpgsql as $$
begin
    new.preview_due_at := new.scheduled_at
        - make_interval(mins => coalesce((select notification_lead_min from users where id = new.user_id), 0));
    return new;
end
$$;
create trigger scheduled_calls_preview_due before insert or update of scheduled_at, user_id on scheduled_calls
    for each row execute function nudge_call_preview_due();

create function nudge_user_lead_changed() returns trigger language plpgsql as $$
begin
    update scheduled_calls set preview_due_at = scheduled_at - make_interval(mins => new.notification_lead_min)
     where user_id = new.id;
    return null;
end
$$;
create trigger users_notification_lead after update of notification_lead_min on users
    for each row when (old.notification_lead_min is distinct from new.notification_lead_min)
    execute function nudge_user_lead_changed();

-- What preview-notifications reads every minute: the pending calls not decided for their time,
-- by due time, from a few hours back to two minutes ahead. A decided call leaves the index; one
-- never decided (its user's time zone unknown) drops out of the range read after a few hours.
drop index idx_scheduled_calls_preview;
create index idx_scheduled_calls_preview_due on scheduled_calls(preview_due_at, id)
    where status = 'pending' and preview_for is distinct from scheduled_at;

-- The calls there are already, in batches of 10,000, each its own transaction (Migrator): until
-- the last batch is done the migration is pending, and the jobs refuse to run.
-- nudge:backfill scheduled_calls 10000
update scheduled_calls c set preview_due_at = c.scheduled_at - make_interval(mins => u.notification_lead_min)
  from users u where u.id = c.user_id and c.preview_due_at is null and c.id > {{after}} and c.id <= {{through}}
