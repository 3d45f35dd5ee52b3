-- Nudge 0014: validate-streaks, weekly-digest, push-trigger and generate-daily-goals read only
-- what is due, through the due index of 0013 (`job_due`): each user's next instant for each
-- job, which the job moves in its batch's write and these triggers make due at once when what
-- the job's rule depends on changes. A run reads the users whose instant has come; a weekly
-- sweep (`--sweep`) reads everyone and proves the index right.

-- Makes the row's user (`users.id`, or the row's `user_id`) due at once for each job the trigger
-- names in its arguments.
create function nudge_jobs_due() returns trigger language plpgsql as $$
declare
    who uuid;
    job text;
begin
    if tg_table_name = 'users' then
        who := new.id;
    else
        who := new.user_id;
    end if;
    foreach job in array tg_argv loop
        perform nudge_due_now(job, who);
    end loop;
    return null;
end
$$;

-- What places a user in time for the four jobs: their sign-up and their time zone. A new user
-- is due at once (each job then sets the instant of their first moment).
create trigger users_jobs_due_new after insert on users
    for each row execute function nudge_jobs_due('validate-streaks', 'weekly-digest', 'push-trigger', 'generate-daily-goals');
create trigger users_jobs_due after update of timezone, created_at on users
    for each row when ((old.timezone, old.created_at) is distinct from (new.timezone, new.created_at))
    execute function nudge_jobs_due('validate-streaks', 'weekly-digest', 'push-trigger', 'generate-daily-goals');

-- validate-streaks settles the days after `user_streaks.settled_through`: a row deleted, or set
-- back (an operator re-settling days), makes the user due at once. The job's own writes move it
-- forward, which needs nothing.
create function nudge_streaks_due() returns trigger language plpgsql as $$
begin
    -- (Not for a user being deleted, whose streak row goes with them.)
    if exists (select 1 from users where id = old.user_id) then
        perform nudge_due_now('validate-streaks', old.user_id);
    end if;
    return null;
end
$$;
create trigger user_streaks_due_deleted after delete on user_streaks
    for each row execute function nudge_streaks_due();
create trigger user_streaks_due_set_back after update of settled_through on user_streaks
    for each row when (new.settled_through is null and old.settled_through is not null
                       or new.settled_through < old.settled_through)
    execute function nudge_streaks_due();

-- push-trigger's candidates are the users with check-ins on and a push token (`push_tokens`: the
-- active devices and seed 000's `users.fcm_token`): check-ins turned on, or a first device,
-- inside the day's window makes the user due at once.
create trigger user_push_tokens_push_trigger_due_new after insert on user_push_tokens
    for each row execute function nudge_jobs_due('push-trigger');
create trigger user_push_tokens_push_trigger_due after update of active on user_push_tokens
    for each row when (old.active is distinct from new.active) execute function nudge_jobs_due('push-trigger');
create trigger users_push_trigger_due after update of fcm_token, push_enabled on users
    for each row when ((old.fcm_token, old.push_enabled) is distinct from (new.fcm_token, new.push_enabled))
    execute function nudge_jobs_due('push-trigger');
create trigger context_profiles_push_trigger_due_new after insert on context_profiles
    for each row execute function nudge_jobs_due('push-trigger');
create trigger context_profiles_push_trigger_due after update of notification_preferences on context_profiles
    for each row when (old.notification_preferences is distinct from new.notification_preferences)
    execute function nudge_jobs_due('push-trigger');

-- generate-daily-goals closes each day at the user's midnight from what is tracked by then. A
-- tracking row written, changed or deleted for a day that has ended in the user's zone (late
-- steps, a weight logged the morning after), or that ends within the quarter hour (a write that
-- commits after the midnight run read the user), makes the user due at once, and the day is
-- closed again; a change to today's row earlier in the day needs nothing: today closes at the
-- user's next midnight, their instant already. (A zone PostgreSQL cannot read: due at once, and
-- the job says why.) Joining or leaving a circle changes the week's goals.
create function nudge_goals_day_due(p_user uuid, p_day date) returns void language plpgsql as $$
declare
    zone text;
    ended timestamptz;
begin
    select timezone into zone from users where id = p_user;
    if not found then
        return;   -- the user is being deleted
    end if;
    begin
        ended := (p_day + 1)::timestamp at time zone coalesce(zone, 'UTC');
    exception when others then
        ended := 'epoch';
    end;
    if ended <= clock_timestamp() + interval '15 minutes' then
        perform nudge_due_now('generate-daily-goals', p_user);
    end if;
end
$$;
create function nudge_goals_tracking_due() returns trigger language plpgsql as $$
begin
    if tg_op in ('UPDATE', 'DELETE') then
        perform nudge_goals_day_due(old.user_id, old.date);
    end if;
    if tg_op in ('INSERT', 'UPDATE') then
        perform nudge_goals_day_due(new.user_id, new.date);
    end if;
    return null;
end
$$;
create trigger daily_tracking_goals_due_new after insert on daily_tracking
    for each row execute function nudge_goals_tracking_due();
create trigger daily_tracking_goals_due after update of date, steps, weight, mood, energy on daily_tracking
    for each row when ((old.date, old.steps, old.weight, old.mood, old.energy)
                       is distinct from (new.date, new.steps, new.weight, new.mood, new.energy))
    execute function nudge_goals_tracking_due();
create trigger daily_tracking_goals_due_deleted after delete on daily_tracking
    for each row execute function nudge_goals_tracking_due();
create trigger fitcircle_members_goals_due_new after insert on fitcircle_members
    for each row execute function nudge_jobs_due('generate-daily-goals');
create trigger fitcircle_members_goals_due after update of left_at, starting_weight, target_weight on fitcircle_members
    for each row when ((old.left_at, old.starting_weight, old.target_weight)
                       is distinct from (new.left_at, new.starting_weight, new.target_weight))
    execute function nudge_jobs_due('generate-daily-goals');

-- Every user there is now, due at once for the four jobs: the first run of each decides them
-- as the jobs always have and sets their next instant.
-- nudge:backfill users 10000
insert into job_due (job, user_id, due_at)
select j.job, u.id, 'epoch'
  from users u
 cross join (values ('validate-streaks'), ('weekly-digest'), ('push-trigger'), ('generate-daily-goals')) as j(job)
 where u.id > {{after}} and u.id <= {{through}}
on conflict (job, user_id) do nothing;
