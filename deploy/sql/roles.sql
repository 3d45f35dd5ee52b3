-- Nudge's database roles, least privilege: run as the role that owns Nudge's tables (the one
-- `nudge migrate` runs as), after migrating, and again after every upgrade (a migration's new
-- table or function gets its grants here, and nowhere else). Idempotent.
--
--   psql "$OWNER_URL" -v ON_ERROR_STOP=1 -f deploy/sql/roles.sql
--   psql "$OWNER_URL" -c '\password nudge_jobs'     (and nudge_serve; never a password on a command line)
--
-- nudge_jobs: the jobs (`nudge run`, `nudge runs`, `pause`, `report`…). Each table its SQL names,
--   with the rights its statements need: it reads the app's tables and writes none of them but
--   the columns Nudge keeps there; it writes Nudge's own; it changes no table, and a table a later
--   migration creates is nobody's until this file names it (the owner runs `nudge migrate` and
--   `nudge seed`).
-- nudge_serve: `nudge serve`, which faces the internet. It answers one-click unsubscribes, Twilio's
--   callbacks and replies, and Resend's webhooks, and can do nothing else: its writes go through
--   functions that run with the owner's rights and do only that (an email turned off, never on;
--   a reply applied once; an event kept once; an SMS's status on its own log). It reads no
--   table, no address, no outbox and no notification's copy.
-- deploy/sql/privileges.txt lists what each role may do once this has run; a test compares.
--
-- The grants are one transaction: an error (a database not migrated yet) leaves every role as it
-- was, and psql stops there (ON_ERROR_STOP, set here too). The checks that follow it name what
-- only the database's owner can do.
\set ON_ERROR_STOP on
begin;

do $$
begin
    if pg_catalog.to_regprocedure('public.nudge_sms_status(text, text, text, bigint)') is null then
        raise exception 'roles.sql: this database lacks migration 0028 (the functions nudge serve writes through): run `nudge migrate` first, as the owner';
    end if;
end
$$;

do $$
begin
    if not exists (select 1 from pg_roles where rolname = 'nudge_jobs') then
        create role nudge_jobs login;
    end if;
    if not exists (select 1 from pg_roles where rolname = 'nudge_serve') then
        create role nudge_serve login;
    end if;
exception when duplicate_object or unique_violation then
    null;  -- created meanwhile by another session
end
$$;

grant usage on schema public to nudge_jobs, nudge_serve;

-- No role but the owner creates anything where Nudge's functions look: PostgreSQL 14 and older,
-- and clusters upgraded from one, let every role create in public (a function of a closer
-- signature than pg_catalog's would be taken by a function running with the owner's rights).
-- No Nudge role needs temporary tables of its own (the owner's seeds keep theirs): none may plant
-- one in a session's path. `nudge run` and `nudge serve` refuse to start as a role that may
-- create in a schema on their path (docs/security.md).
revoke create on schema public from public, nudge_jobs, nudge_serve;
do $$
begin
    execute format('revoke temporary on database %I from public, nudge_jobs, nudge_serve', current_database());
    execute format('grant temporary on database %I to %I', current_database(), current_user);
end
$$;

-- Each role gets what is named below and nothing else: what an older roles.sql granted (every
-- table to the jobs, and to every table created later) is taken back first.
revoke all on all tables in schema public from nudge_jobs, nudge_serve;
revoke all on all sequences in schema public from nudge_jobs, nudge_serve;
do $$
declare
    f regprocedure;
begin
    for f in select p.oid::regprocedure from pg_catalog.pg_proc p
              where p.pronamespace = 'public'::regnamespace and p.proname like 'nudge%' loop
        execute format('revoke all on function %s from nudge_jobs, nudge_serve', f);
    end loop;
end
$$;
alter default privileges in schema public revoke all on tables from nudge_jobs;
alter default privileges in schema public revoke all on sequences from nudge_jobs;

-- The jobs. The app's tables: read; of them, only the columns Nudge keeps are written.
grant select on users, daily_tracking, fitcircle_data_submissions, fitcircles, fitcircle_members, scheduled_calls,
                user_push_tokens, push_tokens, conversations, messages, context_profiles, pattern_cache, coach_personas,
                email_preferences, notification_preferences, nudge_migrations
    to nudge_jobs;
grant update (push_enabled) on users to nudge_jobs;                                -- an FCM token found gone
grant update (streak_day) on daily_tracking to nudge_jobs;                         -- validate-streaks
grant update (rank_after_submission, rank_change) on fitcircle_data_submissions to nudge_jobs;   -- leaderboard-refresh
grant update (preview_sent, preview_sent_at, preview_note, preview_for, updated_at) on scheduled_calls to nudge_jobs;
grant insert (user_id, device_token, platform, active, last_used), update (active, last_used)
    on user_push_tokens to nudge_jobs;                                              -- dispatch: tokens found gone
-- Nudge's own tables: what each job writes, and prune deletes.
grant select, insert, update on daily_goals, weekly_goals, user_streaks, job_due, dispatch_leases,
                                provider_health, provider_pace, provider_tokens to nudge_jobs;
grant select, insert on user_badges, reminder_milestones, email_logs, sms_opt_outs to nudge_jobs;
grant select, insert, update on job_run_failures to nudge_jobs;                 -- a failure's detail, kept once per item
grant select, insert, update, delete on notification_outbox, notification_logs, job_runs, job_work, job_pauses,
                                        leaderboard_boards, fitcircle_leaderboard_entries to nudge_jobs;
grant select, insert, delete on llm_calls, push_log to nudge_jobs;
grant select, delete on email_events, user_timezone_history, sms_status_early to nudge_jobs;
grant select on email_suppressions, fitcircle_submission_marks to nudge_jobs;
grant usage on sequence job_runs_id_seq, notification_outbox_id_seq, llm_calls_id_seq to nudge_jobs;
-- Nudge's own helpers: the jobs' alone (every role could call them before).
revoke execute on function nudge_try_run_lock(integer, integer, integer), nudge_release_run_lock(integer, integer, integer),
                           nudge_expect(boolean, text), nudge_email_receipts(notification_logs)
    from public;
grant execute on function nudge_apply_email_receipts(text[]), nudge_apply_kept_sms_statuses(double precision),
                          nudge_try_run_lock(integer, integer, integer),
                          nudge_release_run_lock(integer, integer, integer), nudge_expect(boolean, text),
                          nudge_email_receipts(notification_logs)
    to nudge_jobs;

-- serve: what its routes do, nothing else, each through a function that runs as the owner and
-- does only that (migration 0028): an unsubscribe, an SMS reply, Resend's event, Twilio's status.
grant execute on function nudge_unsubscribe_state(uuid, text), nudge_unsubscribe(uuid, text),
                          nudge_sms_reply(text, text, boolean),
                          nudge_email_event(text, bigint, text, text, timestamptz, text, text, text, text, timestamptz),
                          nudge_sms_status(text, text, text, bigint)
    to nudge_serve;

-- Bounds of each role's sessions, whoever opens them: the jobs' processes set tighter ones of
-- their own (NUDGE_DB_STATEMENT_TIMEOUT_SECONDS); these hold for an operator's psql as the role,
-- and keep a runaway from taking every connection of the server. 100 for the jobs is room for
-- every job at once on one machine with dispatch's default lanes: raise it with lanes and shards
-- (docs/security.md). Changing a role takes CREATEROLE (and, on PostgreSQL 16, ADMIN OPTION on
-- it): without it, a warning says what to run.
do $$
declare
    statements text[] := array[
        'alter role nudge_jobs connection limit 100',
        'alter role nudge_jobs set statement_timeout = ''1h''',
        'alter role nudge_jobs set idle_in_transaction_session_timeout = ''10min''',
        'alter role nudge_serve connection limit 40',
        'alter role nudge_serve set statement_timeout = ''5s''',
        'alter role nudge_serve set idle_in_transaction_session_timeout = ''30s'''];
    statement text;
begin
    foreach statement in array statements loop
        begin
            execute statement;
        exception when insufficient_privilege then
            raise warning 'roles.sql: % may not change roles; as a role with CREATEROLE, run: %;', current_user,
                array_to_string(statements, '; ');
            exit;
        end;
    end loop;
end
$$;

commit;

-- Last, once every grant above is in place: what the revokes at the top could not do, run by a
-- role that owns Nudge's tables but not the database or schema public (they only warn then). A
-- role that may create in public is an error (`nudge run` and `nudge serve` refuse it too);
-- temporary tables left to every role, a warning (Nudge's functions search them last).
do $$
declare
    database_owner text := (select pg_get_userbyid(d.datdba) from pg_database d where d.datname = current_database());
    create_open boolean;
    temporary_open boolean;
begin
    select has_schema_privilege('nudge_jobs', n.oid, 'CREATE') or has_schema_privilege('nudge_serve', n.oid, 'CREATE')
           or exists (select 1 from aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) a
                       where a.grantee = 0 and a.privilege_type = 'CREATE')
      into create_open
      from pg_namespace n where n.nspname = 'public';
    select has_database_privilege('nudge_jobs', d.oid, 'TEMPORARY') or has_database_privilege('nudge_serve', d.oid, 'TEMPORARY')
           or exists (select 1 from aclexplode(coalesce(d.datacl, acldefault('d', d.datdba))) a
                       where a.grantee = 0 and a.privilege_type = 'TEMPORARY')
      into temporary_open
      from pg_database d where d.datname = current_database();
    if temporary_open then
        raise warning 'roles.sql: every role may still make temporary tables in this database; as %, run: revoke temporary on database % from public, nudge_jobs, nudge_serve; grant temporary on database % to %',
            database_owner, quote_ident(current_database()), quote_ident(current_database()), quote_ident(current_user);
    end if;
    if exists (select 1 from pg_catalog.pg_roles r
                where r.rolname in ('nudge_jobs', 'nudge_serve')
                  and (r.rolsuper or r.rolbypassrls or r.rolcreaterole or r.rolcreatedb or r.rolreplication))
       or exists (select 1 from pg_catalog.pg_auth_members m
                   where m.member in ('nudge_jobs'::regrole, 'nudge_serve'::regrole)) then
        raise exception 'roles.sql: nudge_jobs or nudge_serve holds more than its grants (a superuser, BYPASSRLS, CREATEROLE, CREATEDB or REPLICATION attribute, or membership of another role such as pg_write_all_data): remove it (alter role … nosuperuser nobypassrls nocreaterole nocreatedb noreplication; revoke <role> from …)';
    end if;
    if create_open then
        raise exception 'roles.sql: a role other than the owner may still create in schema public (every grant above is applied); as %, run: revoke create on schema public from public, nudge_jobs, nudge_serve',
            database_owner;
    end if;
end
$$;
