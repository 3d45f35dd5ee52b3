-- Indexes for a million users and a year of runs, and a guard against a proactive push logged
-- twice.
--
-- Every foreign key gets an index led by its columns: deleting a user (or a run, a circle, a
-- persona) cascades or checks through each of them, and without one PostgreSQL scans the whole
-- referencing table per deleted row. A test lists the foreign keys without such an index.
-- On a database that already holds a year of job_work this migration takes a while (the table is
-- read once per index, writes to it wait): run `nudge migrate` when no job is running.

create index idx_job_work_user on job_work(user_id);
create index idx_job_work_run on job_work(run_id);
create index idx_job_runs_resumed_from on job_runs(resumed_from);
create index idx_outbox_run on notification_outbox(run_id);
create index idx_weekly_goals_fitcircle on weekly_goals(fitcircle_id);
create index idx_submissions_user on fitcircle_data_submissions(user_id);
create index idx_leaderboard_user on fitcircle_leaderboard_entries(user_id);
create index idx_users_coach_persona on users(coach_persona_id);

-- The ledger's own questions: which run of a job is marked running (every start asks), and the
-- last real run of a job and shard (the resume lookup).
create index idx_job_runs_running on job_runs(job, shard_index, shard_count) where status = 'running';
create index idx_job_runs_resume on job_runs(job, shard_index, shard_count, id desc) where not dry_run;

-- push_log (seed 002) gains the user's local day of the push, so that the database itself refuses
-- a second proactive push for one user and local day, whatever two runs race. Rows written before
-- this column existed (or by other writers) have none and are not checked.
alter table push_log add column local_day date;
create unique index push_log_one_a_local_day on push_log(user_id, local_day) where local_day is not null;

-- The run lock. Two runs of a job must never work on the same users at once: an unsharded run
-- and `--shard 0/4`, or `--shard 0/2` and `--shard 0/4`, overlap as surely as two runs of the
-- same shard. Each run holds, for the length of its session, a shared lock on its shard count
-- and an exclusive one on its shard; it may take them only while no run with another shard count
-- holds its own. Checking in is serialised by a transaction lock, so two runs cannot both find
-- the field clear. Keys: (job_key, 0) checking in, (job_key, 100000000 + count) the shard count,
-- (job_key, count * 4096 + index) the shard. Returns null when the locks are taken, 'scope' when
-- a run over overlapping users of another shard count holds them, 'shard' when a run of the same
-- shard does.
create function nudge_try_run_lock(job_key integer, shard_index integer, shard_count integer) returns text
language plpgsql as $$
declare
    count_key constant integer := 100000000 + shard_count;
    shard_key constant integer := shard_count * 4096 + shard_index;
begin
    perform pg_advisory_xact_lock(job_key, 0);
    if exists (select 1 from pg_locks
                where locktype = 'advisory' and granted and objsubid = 2
                  and database = (select oid from pg_database where datname = current_database())
                  and classid = job_key::oid
                  and objid::bigint between 100000001 and 100004096 and objid::bigint <> count_key) then
        return 'scope';
    end if;
    perform pg_advisory_lock_shared(job_key, count_key);
    if not pg_try_advisory_lock(job_key, shard_key) then
        perform pg_advisory_unlock_shared(job_key, count_key);
        return 'shard';
    end if;
    return null;
end
$$;

create function nudge_release_run_lock(job_key integer, shard_index integer, shard_count integer) returns void
language plpgsql as $$
begin
    perform pg_advisory_unlock(job_key, shard_count * 4096 + shard_index);
    perform pg_advisory_unlock_shared(job_key, 100000000 + shard_count);
end
$$;
