-- Nudge's database roles, least privilege: run as the role that owns Nudge's tables (the one
-- `nudge migrate` runs as), after migrating, and again after every upgrade (a migration's new
-- table gets its grants here). Idempotent.
--
--   psql "$OWNER_URL" -v ON_ERROR_STOP=1 -f deploy/sql/roles.sql
--   psql "$OWNER_URL" -c '\password nudge_jobs'     (and nudge_serve; never a password on a command line)
--
-- nudge_jobs: the jobs (`nudge run`, `nudge runs`, `pause`, `report`…). Reads and writes rows,
--   changes no table (the owner runs `nudge migrate`, `nudge seed` and `nudge prune --vacuum`).
-- nudge_serve: `nudge serve`, which faces the internet. It answers one-click unsubscribes, Twilio's
--   callbacks and replies, and Resend's webhooks, and can do nothing else: it reads no outbox and
--   no notification's copy (of the logs, only what finds a receipt's row), of `users` only the
--   id, locale and email address; it writes only preferences, receipts and opt-outs.
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

-- The jobs: every row of every table, no DDL.
grant select, insert, update, delete on all tables in schema public to nudge_jobs;
grant usage, select on all sequences in schema public to nudge_jobs;
revoke insert, update, delete on nudge_migrations from nudge_jobs;
grant execute on function nudge_apply_email_receipts(text[]) to nudge_jobs;
-- Tables and sequences a later migration creates (as the role running this) are the jobs' too.
alter default privileges in schema public grant select, insert, update, delete on tables to nudge_jobs;
alter default privileges in schema public grant usage, select on sequences to nudge_jobs;

-- serve: what its routes read and write, nothing else.
revoke all on all tables in schema public from nudge_serve;
revoke all on all sequences in schema public from nudge_serve;
grant select (id, locale, email) on users to nudge_serve;
-- One-click unsubscribe (and a complaint's optional emails off).
grant select, insert, update on email_preferences, notification_preferences to nudge_serve;
-- (A preferences row an unsubscribe creates makes its user due for reminders: a trigger, through
-- nudge_due_now, which runs with the owner's rights.)
-- Receipts: Twilio's statuses on the SMS's log row (found by its SID or its outbox row); Resend's
-- events are kept here and applied to the email's log by nudge_apply_email_receipts, which runs
-- with the owner's rights: no title, body or payload of any notification is serve's to read.
grant select (id, user_id, channel, provider_id, outbox_id, status, error_msg, delivered, delivered_at)
    on notification_logs to nudge_serve;
grant update (status, delivered, delivered_at, error_msg, provider_id) on notification_logs to nudge_serve;
grant execute on function nudge_apply_email_receipts(text[]) to nudge_serve;
grant select, insert, update on email_events to nudge_serve;
grant select, insert on email_suppressions to nudge_serve;
grant select, insert, update, delete on sms_status_early to nudge_serve;
-- SMS replies: STOP and START.
grant select, insert, delete on sms_opt_outs to nudge_serve;
-- Each reply applied once, by its MessageSid (a replayed one changes nothing).
grant select, insert on sms_replies to nudge_serve;

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
    if create_open then
        raise exception 'roles.sql: a role other than the owner may still create in schema public (every grant above is applied); as %, run: revoke create on schema public from public, nudge_jobs, nudge_serve',
            database_owner;
    end if;
end
$$;
