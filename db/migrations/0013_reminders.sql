-- Nudge 0013: the reminders job (seed 003 Features 6 and 7), the first user job that reads only
-- what is due: each (job, user) has its next due instant, indexed (`job_due`).

-- When each user is next due for a job that reads through the due index (`DueSource`). The job
-- moves a user's instant forward in its batch's one write (compare-and-set with the instant it
-- read); the triggers below move it to 'epoch' (due at once, whatever the clock of the run) when
-- an input of the job's rule changes, and the next run decides the user again from what is
-- there. A missed cron tick, or a server down for hours, leaves the instants where they were:
-- the next run reads them.
create table job_due (
    job         text not null,
    user_id     uuid not null references users(id) on delete cascade,
    due_at      timestamptz not null,
    -- The instant the job had set, when a trigger has made the user due at once since: a moment
    -- long before it that the change brought into the past (a reminder time moved from 20:00 to
    -- 07:00 at 10:00) is not sent late. Null while the job's own instant stands.
    planned_at  timestamptz,
    primary key (job, user_id)
);
create index idx_job_due_due on job_due (job, due_at, user_id);
create index idx_job_due_user on job_due (user_id);

-- Makes `p_user` due at once for `p_job` (a row for a user who has none). Every call changes the
-- instant, even for a user due at once already (a second earlier): a run deciding that user
-- from what it read before the change then finds its compare-and-set refused, and the next run
-- decides them again from the change.
create function nudge_due_now(p_job text, p_user uuid) returns void language sql as $$
    insert into job_due (job, user_id, due_at) values (p_job, p_user, 'epoch')
    on conflict (job, user_id) do update
        set due_at = case when job_due.due_at > 'epoch' then 'epoch' else job_due.due_at - interval '1 second' end,
            planned_at = case when job_due.due_at > 'epoch' then job_due.due_at else job_due.planned_at end
$$;

-- reminders depends on: the user (a sign-up, a time zone, a locale, an address, seed 000's device
-- columns), their reminder time, their devices (push at their time, or the email at 21:00), their
-- FitCircles (the 20:00 submission reminder) and submissions (challenge milestones), their streak
-- badges (the celebration the morning after) and a streak found at risk (the email at 09:00).
create function nudge_reminders_due() returns trigger language plpgsql as $$
begin
    if tg_table_name = 'users' then
        perform nudge_due_now('reminders', new.id);
    else
        perform nudge_due_now('reminders', new.user_id);
    end if;
    return null;
end
$$;
-- (An update makes the user due only when a value changes: an app that writes a whole row back
-- unchanged costs no read.)
create trigger users_reminders_due_new after insert on users
    for each row execute function nudge_reminders_due();
create trigger users_reminders_due after update of timezone, locale, created_at, email, fcm_token, push_enabled on users
    for each row when ((old.timezone, old.locale, old.created_at, old.email, old.fcm_token, old.push_enabled)
                       is distinct from (new.timezone, new.locale, new.created_at, new.email, new.fcm_token, new.push_enabled))
    execute function nudge_reminders_due();
create trigger notification_preferences_reminders_due_new after insert on notification_preferences
    for each row execute function nudge_reminders_due();
create trigger notification_preferences_reminders_due
    after update of daily_reminder_time, push_enabled, email_enabled on notification_preferences
    for each row when ((old.daily_reminder_time, old.push_enabled, old.email_enabled)
                       is distinct from (new.daily_reminder_time, new.push_enabled, new.email_enabled))
    execute function nudge_reminders_due();
create trigger user_push_tokens_reminders_due_new after insert on user_push_tokens
    for each row execute function nudge_reminders_due();
create trigger user_push_tokens_reminders_due after update of active on user_push_tokens
    for each row when (old.active is distinct from new.active) execute function nudge_reminders_due();
create trigger fitcircle_members_reminders_due_new after insert on fitcircle_members
    for each row execute function nudge_reminders_due();
create trigger fitcircle_members_reminders_due after update of left_at on fitcircle_members
    for each row when (old.left_at is distinct from new.left_at) execute function nudge_reminders_due();
create trigger submissions_reminders_due_new after insert on fitcircle_data_submissions
    for each row execute function nudge_reminders_due();
create trigger submissions_reminders_due after update of steps, weight on fitcircle_data_submissions
    for each row when ((old.steps, old.weight) is distinct from (new.steps, new.weight)) execute function nudge_reminders_due();
create trigger user_badges_reminders_due after insert on user_badges
    for each row execute function nudge_reminders_due();
create trigger user_streaks_reminders_due_new after insert on user_streaks
    for each row when (new.missed_days = 1) execute function nudge_reminders_due();
create trigger user_streaks_reminders_due after update of missed_days on user_streaks
    for each row when (new.missed_days = 1 and old.missed_days is distinct from 1) execute function nudge_reminders_due();

-- Whether the user chose their reminder time (seed 003: "where a user has not set their own
-- daily_reminder_time", the job learns it from their check-ins). `daily_reminder_time` has a
-- default, so the choice is recorded when it is made: a row inserted with another time than the
-- default, or an update that changes the time.
alter table notification_preferences add column reminder_time_set_at timestamptz;
create function nudge_reminder_time_set() returns trigger language plpgsql as $$
begin
    if tg_op = 'INSERT' then
        if new.daily_reminder_time <> time '20:00' and new.reminder_time_set_at is null then
            new.reminder_time_set_at := now();
        end if;
    elsif new.daily_reminder_time is distinct from old.daily_reminder_time then
        new.reminder_time_set_at := now();
    end if;
    return new;
end
$$;
create trigger notification_preferences_reminder_time before insert or update of daily_reminder_time on notification_preferences
    for each row execute function nudge_reminder_time_set();

-- The challenge milestones told (seed 003 F6/F7: 25/50/75/100 % by push, 50/100 % by email, once
-- each per challenge): written with the outbox rows, in the batch's one transaction. A milestone
-- passed together with a higher one is recorded as covered by it, and not told.
create table reminder_milestones (
    user_id       uuid not null references users(id) on delete cascade,
    fitcircle_id  uuid not null references fitcircles(id) on delete cascade,
    percent       integer not null check (percent in (25, 50, 75, 100)),
    outcome       text not null,
    decided_at    timestamptz not null,
    primary key (user_id, fitcircle_id, percent)
);
create index idx_reminder_milestones_fitcircle on reminder_milestones (fitcircle_id);

-- Every user there is now, due at once: the first run decides each of them and sets their next
-- instant (a moment that passed more than a quarter hour before that run is not caught up: the
-- job was not there then). A reminder time other than the default, set before this migration,
-- was chosen by the user.
-- nudge:backfill users 10000
insert into job_due (job, user_id, due_at)
select 'reminders', u.id, 'epoch' from users u where u.id > {{after}} and u.id <= {{through}}
on conflict (job, user_id) do nothing;
-- nudge:backfill notification_preferences 10000
update notification_preferences set reminder_time_set_at = updated_at
 where daily_reminder_time <> time '20:00' and reminder_time_set_at is null and id > {{after}} and id <= {{through}};
