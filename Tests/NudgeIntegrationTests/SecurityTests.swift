import Foundation
import Testing

@testable import NudgeCore

/// The database's own defences (docs/security.md): functions that run with the owner's rights
/// cannot be borrowed through a session's temporary schema nor through `public`, and the jobs'
/// and serve's roles refuse to start where they could plant either.
@Suite(.serialized, .dropsItsDatabases) struct DefinerFunctionTests {
    /// `deploy/sql/roles.sql` on `database`, as the owner of Nudge's tables.
    private func grantRoles(_ database: TestDatabase) async throws {
        let roles = try await database.applyRoles()
        #expect(roles.status == 0, "\(roles.stderr)")
    }

    /// `sql` run as `role` (the jobs' or serve's), in one session.
    private func psql(as role: String, _ database: TestDatabase, _ sql: String) async throws -> ProcessResult {
        #expect(database.url(as: role) != database.url)
        return await database.attempt(sql, as: role)
    }

    /// Every function of the database that runs with its owner's rights searches pg_catalog first
    /// and the session's temporary schema last: none is left to the search path of whoever
    /// migrated, nor to the caller's.
    @Test func everyDefinerFunctionSearchesPgCatalogFirstAndPgTempLast() async throws {
        try await TestDatabase.rolledBack { database in
            let definers = try await database.count(
                """
                select count(*) from pg_proc p join pg_namespace n on n.oid = p.pronamespace
                 where p.prosecdef and n.nspname not in ('pg_catalog', 'information_schema')
                """)
            #expect(definers >= 9)
            let unpinned = try await database.psql(
                """
                select p.oid::regprocedure from pg_proc p join pg_namespace n on n.oid = p.pronamespace
                 where p.prosecdef and n.nspname not in ('pg_catalog', 'information_schema')
                   and not exists (select 1 from unnest(coalesce(p.proconfig, '{}')) c
                                    where c = 'search_path=pg_catalog, public, pg_temp')
                 order by 1
                """)
            #expect(unpinned == "", "definer functions without a pinned search path: \(unpinned)")
        }
    }

    /// The app's role, which writes the submissions, plants a temporary
    /// `fitcircle_submission_marks` with a trigger and touches no submission: the marks' function,
    /// running as the owner, writes to the real table, and the trigger never runs (no table of its
    /// making appears). Without an explicit grant, Nudge's roles cannot make a temporary table at all.
    @Test func aTemporaryTableCannotBorrowTheOwnersRights() async throws {
        let database = try await TestDatabase.fresh()
        try await grantRoles(database)
        let noTemp = try await psql(as: "nudge_jobs", database, "create temp table t (x int)")
        #expect(noTemp.status != 0 && noTemp.stderr.contains("permission denied"), "\(noTemp.stderr)")
        // The jobs may not write the app's submissions (only the ranks they give them).
        let noWrite = try await psql(as: "nudge_jobs", database, "update fitcircle_data_submissions set steps = steps where false")
        #expect(noWrite.status != 0 && noWrite.stderr.contains("permission denied"), "\(noWrite.stderr)")

        // An app's role on an install that still lets every role make temporary tables.
        try await database.psql(
            """
            do $$ begin create role nudge_test_app login; exception when duplicate_object or unique_violation then null; end $$;
            grant usage on schema public to nudge_test_app;
            grant select, insert, update on fitcircle_data_submissions to nudge_test_app;
            grant temporary on database \(database.name) to nudge_test_app;
            """)
        let planted = try await psql(
            as: "nudge_test_app", database,
            """
            create temp table fitcircle_submission_marks (fitcircle_id uuid primary key, change bigint);
            create function pg_temp.plant() returns trigger language plpgsql as $$
            begin
                create table if not exists public.planted_through_temp (x int);
                return null;
            end $$;
            create trigger plant before insert on pg_temp.fitcircle_submission_marks
                for each statement execute function pg_temp.plant();
            update fitcircle_data_submissions set steps = steps where false;
            insert into fitcircle_data_submissions (fitcircle_id, user_id, submission_date, steps)
            select gen_random_uuid(), gen_random_uuid(), current_date, 1 where false;
            """)
        #expect(planted.status == 0, "\(planted.stderr)")
        #expect(try await database.value("select coalesce(to_regclass('public.planted_through_temp')::text, 'none')") == "none")
    }

    /// Every role could create in `public` (PostgreSQL 14, or a cluster upgraded from one), and the
    /// jobs' role planted `public.array_agg(text)` before `roles.sql` ran. An email's bounce then
    /// applied by the owner's function finds pg_catalog's aggregate, not the planted one.
    @Test func aPlantedAggregateInPublicIsNeverTaken() async throws {
        let database = try await TestDatabase.fresh()
        try await database.psql("grant create on schema public to public")
        try await grantRoles(database)
        try await database.psql("grant create on schema public to nudge_jobs")
        let planted = try await psql(
            as: "nudge_jobs", database,
            """
            create function public.plant_step(text[], text) returns text[] language plpgsql as $$
            begin
                create table if not exists public.planted_through_public (x int);
                return $1 || $2;
            end $$;
            create aggregate public.array_agg(text) (sfunc = public.plant_step, stype = text[]);
            """)
        #expect(planted.status == 0, "\(planted.stderr)")
        try await grantRoles(database)
        // roles.sql took CREATE back from the jobs' role as well as from PUBLIC.
        #expect(try await database.value("select has_schema_privilege('nudge_jobs', 'public', 'CREATE')") == "f")
        let user = UUID()
        try await database.psql(
            """
            insert into users (id, timezone, locale, email) values ('\(user)', 'UTC', 'en', 'someone@example.test');
            insert into notification_logs (user_id, notification_type, channel, status, provider_id, sent_at)
            values ('\(user)', 'weekly_digest', 'email', 'sent', 'e-planted-0001', now());
            insert into email_events (svix_id, svix_timestamp, email_id, type, occurred_at, bounce_type, bounce_subtype, detail)
            values ('msg_planted_1', 0, 'e-planted-0001', 'email.bounced', now(), 'Permanent', 'General', 'no such mailbox');
            """)
        let applied = try await psql(as: "nudge_jobs", database, "select nudge_apply_email_receipts(array['e-planted-0001'])")
        #expect(applied.status == 0, "\(applied.stderr)")
        #expect(try await database.value("select status from notification_logs where provider_id = 'e-planted-0001'") == "failed")
        #expect(try await database.value("select coalesce(to_regclass('public.planted_through_public')::text, 'none')") == "none")
    }

    /// After `roles.sql`, each role may do what `deploy/sql/privileges.txt` lists and nothing
    /// else: each table, column, sequence and function it may use, with what it may do there,
    /// its connection limit and its sessions' settings. Running `roles.sql` over what an older one
    /// granted (every table to the jobs, and every later one) leaves the same list.
    @Test func eachRolesPrivilegesAreTheListInTheRepository() async throws {
        let database = try await TestDatabase.fresh()
        // What roles.sql granted before least privilege per table, and a later table.
        try await database.psql(
            """
            do $$ begin create role nudge_jobs login; exception when duplicate_object or unique_violation then null; end $$;
            grant select, insert, update, delete on all tables in schema public to nudge_jobs;
            alter default privileges in schema public grant select, insert, update, delete on tables to nudge_jobs;
            """)
        try await grantRoles(database)
        let listed = try String(contentsOf: packageRoot.appendingPathComponent("deploy/sql/privileges.txt"), encoding: .utf8)
            .split(separator: "\n").map(String.init).filter { !$0.hasPrefix("#") && !$0.isEmpty }
        let granted = try await database.psql(Self.privileges).split(separator: "\n").map(String.init)
        #expect(
            granted == listed,
            """
            granted, not listed: \(granted.filter { !listed.contains($0) })
            listed, not granted: \(listed.filter { !granted.contains($0) })
            """)
        // A table created later is nobody's until roles.sql names it.
        try await database.psql("create table later_table (x int)")
        #expect(try await database.value("select has_table_privilege('nudge_jobs', 'later_table', 'select')") == "f")
        // The serve role cannot turn an email back on, nor delete an opt-out, nor read an address.
        for refused in [
            "update email_preferences set weekly_digest = true", "delete from sms_opt_outs",
            "insert into notification_preferences (user_id) values (gen_random_uuid())", "select email from users",
            "select nudge_apply_email_receipts(array['x'])", "update notification_logs set opened = true",
        ] {
            let result = try await psql(as: "nudge_serve", database, refused)
            #expect(result.status != 0 && result.stderr.contains("permission denied"), "\(refused): \(result.stderr)")
        }
        // The jobs write the app's tables only in the columns Nudge keeps there.
        for refused in [
            "update users set email = 'x@example.test'", "insert into fitcircle_data_submissions (fitcircle_id) values (gen_random_uuid())",
            "update scheduled_calls set scheduled_at = now()", "delete from user_push_tokens",
            "update email_preferences set weekly_digest = true", "delete from sms_opt_outs",
        ] {
            let result = try await psql(as: "nudge_jobs", database, refused)
            #expect(result.status != 0 && result.stderr.contains("permission denied"), "\(refused): \(result.stderr)")
        }
    }

    /// Each role's privileges, one line each: `role|kind|object|privileges`, sorted.
    static let privileges = """
        with roles(name) as (values ('nudge_jobs'), ('nudge_serve')),
        relations as (
            select r.name::text, case c.relkind when 'S' then 'sequence' when 'v' then 'view' else 'table' end as kind,
                   c.relname::text as object, string_agg(a.privilege_type, ',' order by a.privilege_type) as privileges
              from pg_class c cross join lateral aclexplode(c.relacl) a join roles r on a.grantee = r.name::regrole
             where c.relnamespace = 'public'::regnamespace
             group by 1, 2, 3),
        columns as (
            select r.name, 'column' as kind, c.relname || '.' || t.attname as object,
                   string_agg(a.privilege_type, ',' order by a.privilege_type) as privileges
              from pg_attribute t join pg_class c on c.oid = t.attrelid
             cross join lateral aclexplode(t.attacl) a join roles r on a.grantee = r.name::regrole
             where c.relnamespace = 'public'::regnamespace and not t.attisdropped
             group by 1, 2, 3),
        functions as (
            select r.name, 'function' as kind, p.oid::regprocedure::text as object, 'EXECUTE' as privileges
              from pg_proc p join roles r on has_function_privilege(r.name, p.oid, 'EXECUTE')
             where p.pronamespace = 'public'::regnamespace and p.proname like 'nudge%' and p.prorettype <> 'trigger'::regtype),
        settings as (
            select r.name, 'role' as kind, 'connection limit' as object, a.rolconnlimit::text as privileges
              from pg_authid a join roles r on a.rolname = r.name
            union all
            select r.name, 'role', split_part(c, '=', 1), split_part(c, '=', 2)
              from pg_db_role_setting s join roles r on s.setrole = r.name::regrole cross join unnest(s.setconfig) c
            union all
            select r.name, 'role', 'attributes',
                   concat_ws(',', case when a.rolcanlogin then 'LOGIN' end, case when a.rolsuper then 'SUPERUSER' end,
                             case when a.rolcreaterole then 'CREATEROLE' end, case when a.rolcreatedb then 'CREATEDB' end,
                             case when a.rolbypassrls then 'BYPASSRLS' end, case when a.rolreplication then 'REPLICATION' end)
              from pg_authid a join roles r on a.rolname = r.name
            union all
            select r.name, 'member of', g.rolname::text, 'MEMBER'
              from pg_auth_members m join roles r on m.member = r.name::regrole join pg_authid g on g.oid = m.roleid
            union all
            select 'PUBLIC', 'table', c.relname::text, string_agg(a.privilege_type, ',' order by a.privilege_type)
              from pg_class c cross join lateral aclexplode(c.relacl) a
             where c.relnamespace = 'public'::regnamespace and a.grantee = 0
             group by c.relname
            union all
            select r.name, 'database', 'public', p
              from roles r cross join unnest(array['CREATE', 'TEMPORARY', 'CONNECT']) p
             where has_database_privilege(r.name, current_database(), p)
            union all
            select r.name, 'schema', 'public', p
              from roles r cross join unnest(array['CREATE', 'USAGE']) p
             where has_schema_privilege(r.name, 'public', p))
        select name || '|' || kind || '|' || object || '|' || privileges
          from (select * from relations union all select * from columns union all select * from functions union all select * from settings) x
         order by 1
        """

    /// `roles.sql` run by a role that owns Nudge's tables but not the database nor schema
    /// `public` (where every role may still create), and may not change roles: it applies every
    /// grant, says what a role administrator must run, then stops with an error naming what the
    /// database's owner must run.
    @Test func rolesSQLRunByTheTablesOwnerAloneGrantsAllThenNamesTheDatabaseOwnersPart() async throws {
        let database = try await TestDatabase.fresh()
        try await database.psql(
            """
            do $$ begin create role nudge_test_tables login; exception when duplicate_object or unique_violation then null; end $$;
            do $$ begin create role nudge_jobs login; exception when duplicate_object or unique_violation then null; end $$;
            do $$ begin create role nudge_serve login; exception when duplicate_object or unique_violation then null; end $$;
            grant create on schema public to public;
            do $$
            declare r record;
            begin
                for r in select c.oid::regclass as name from pg_class c
                          where c.relnamespace = 'public'::regnamespace and c.relkind in ('r', 'p', 'v') loop
                    execute format('alter table %s owner to nudge_test_tables', r.name);
                end loop;
                for r in select c.oid::regclass as name from pg_class c
                          where c.relnamespace = 'public'::regnamespace and c.relkind = 'S'
                            and not exists (select 1 from pg_depend d where d.objid = c.oid and d.deptype in ('a', 'i')) loop
                    execute format('alter sequence %s owner to nudge_test_tables', r.name);
                end loop;
                for r in select p.oid::regprocedure as name from pg_proc p
                          where p.pronamespace = 'public'::regnamespace and p.proname like 'nudge%' loop
                    execute format('alter function %s owner to nudge_test_tables', r.name);
                end loop;
            end $$;
            """)
        let result = try await database.applyRoles(as: "nudge_test_tables")
        #expect(result.status != 0)
        #expect(
            result.stderr.contains("a role other than the owner may still create in schema public (every grant above is applied)"),
            "\(result.stderr)")
        #expect(result.stderr.contains("revoke create on schema public from public, nudge_jobs, nudge_serve"), "\(result.stderr)")
        // Nor may it change roles (no CREATEROLE): it says what to run instead.
        #expect(
            result.stderr.contains("nudge_test_tables may not change roles; as a role with CREATEROLE, run: alter role nudge_jobs connection limit 100"),
            "\(result.stderr)")
        #expect(try await database.value("select has_table_privilege('nudge_jobs', 'job_runs', 'insert')") == "t")
        #expect(try await database.value("select has_function_privilege('nudge_serve', 'nudge_unsubscribe(uuid, text)', 'execute')") == "t")
    }

    /// roles.sql on a database not migrated to the functions serve writes through changes
    /// nothing (one transaction) and says to migrate; a role given more than its grants (the
    /// membership of another role, which could be pg_write_all_data) is named as an error.
    @Test func rolesSQLChangesNothingBeforeItsMigrationAndRefusesWiderRoles() async throws {
        let database = try await TestDatabase.fresh()
        try await grantRoles(database)
        try await database.psql("alter function nudge_sms_status(text, text, text, bigint) rename to nudge_sms_status_away")
        try await database.psql("grant select on email_preferences to nudge_serve")
        let early = try await database.applyRoles()
        #expect(early.status != 0 && early.stderr.contains("lacks migration 0028"), "\(early.stderr)")
        #expect(try await database.value("select has_table_privilege('nudge_serve', 'email_preferences', 'select')") == "t")
        try await database.psql("alter function nudge_sms_status_away(text, text, text, bigint) rename to nudge_sms_status")
        // (A group that holds nothing, so that no other test's role gains a right meanwhile; this
        // suite runs one test at a time, for the list test's sake.)
        try await database.psql(
            """
            do $$ begin create role nudge_test_group nologin; exception when duplicate_object or unique_violation then null; end $$;
            grant nudge_test_group to nudge_serve;
            """)
        let wider: ProcessResult
        do {
            wider = try await database.applyRoles()
        } catch {
            _ = try? await database.psql("revoke nudge_test_group from nudge_serve")
            throw error
        }
        _ = try? await database.psql("revoke nudge_test_group from nudge_serve")
        #expect(wider.status != 0 && wider.stderr.contains("holds more than its grants"), "\(wider.stderr)")
        #expect(try await database.value("select has_table_privilege('nudge_serve', 'email_preferences', 'select')") == "f")
    }

    /// The owner's functions that serve calls know each email type by the same two switches as
    /// Nudge, and refuse any other name (no column of the caller's choosing).
    @Test func theServeFunctionsKnowEachEmailTypesSwitches() async throws {
        let database = try await TestDatabase.fresh()
        for type in EmailType.allCases {
            #expect(
                try await database.psql("select email_column, notification_column from nudge_email_type_columns('\(type.rawValue)')")
                    == "\(type.emailPreference)|\(type.notificationPreference)")
        }
        let other = await database.attempt("select * from nudge_unsubscribe(gen_random_uuid(), 'fitcircle_invites')")
        #expect(other.status != 0 && other.stderr.contains("no email type 'fitcircle_invites'"), "\(other.stderr)")
    }

    /// As the jobs' role, with only the rights roles.sql gives it: a run whose user fails writes
    /// the failure (its upsert needs UPDATE) and exits 3, and the operators' commands (runs,
    /// failures, pause, resume, report) work.
    @Test func theJobsRoleRecordsAFailureAndServesTheOperatorsCommands() async throws {
        let database = try await TestDatabase.fresh()
        try await grantRoles(database)
        try await Fixture.population(database, count: 3, signup: "2026-03-01T00:00:00Z", from: "2026-03-01", to: "2026-03-09")
        try await database.psql("insert into users (id, timezone, created_at) values ('\(Fixture.userID(9))', 'Mars/Olympus', '2026-03-01T00:00:00Z')")
        let jobs = ["DATABASE_URL": database.url(as: "nudge_jobs")]
        let run = try await database.nudge(["run", "validate-streaks", "--now", "2026-03-10T09:00:00Z"], environment: jobs)
        #expect(run.status == 3, "\(run.stderr)")
        #expect(try await database.count("select count(*) from job_run_failures") == 1)
        let again = try await database.nudge(["run", "validate-streaks", "--now", "2026-03-10T09:30:00Z", "--sweep"], environment: jobs)
        #expect(again.status == 3, "\(again.stderr)")
        for command in [
            ["runs"], ["runs", "--failures", "1"], ["pause", "validate-streaks"], ["resume", "validate-streaks"],
            ["report", "--from", "2026-03-01", "--to", "2026-03-10", "--now", "2026-03-10T09:00:00Z"],
        ] {
            let result = try await database.nudge(command, environment: jobs)
            #expect(result.status == 0, "\(command): \(result.stderr)")
        }
    }

    /// `nudge run` as a role that may create in `public` refuses to start, naming the fix; once
    /// `roles.sql` revoked it, it runs.
    @Test func aJobRoleThatMayCreateOnItsPathIsRefused() async throws {
        let database = try await TestDatabase.fresh()
        try await grantRoles(database)
        try await database.psql("grant create on schema public to nudge_jobs")
        let jobsURL = database.url(as: "nudge_jobs")
        let refused = try await database.nudge(
            ["run", "validate-streaks", "--now", "2026-03-10T09:00:00Z"],
            environment: ["DATABASE_URL": jobsURL])
        #expect(refused.status == 1, "\(refused.status) \(refused.stderr)")
        #expect(refused.stderr.contains("the role nudge_jobs may create objects in schema public"), "\(refused.stderr)")
        #expect(refused.stderr.contains("revoke create on schema public from public, nudge_jobs"))
        try await grantRoles(database)
        let ran = try await database.nudge(
            ["run", "validate-streaks", "--now", "2026-03-10T09:00:00Z"],
            environment: ["DATABASE_URL": jobsURL])
        #expect(ran.status == 0, "\(ran.stderr)")
    }
}

/// SMS replies (docs/serve.md): each is applied once, by its MessageSid.
@Suite(.dropsItsDatabases) struct SMSReplyTests {
    /// A user replies START, later STOP; the START, captured and replayed (Twilio's signature holds
    /// no time), changes nothing: SMS to the number stay stopped. REVOKE and OPTOUT stop them too.
    @Test func aReplayedStartAfterAStopChangesNothing() async throws {
        let database = try await TestDatabase.fresh()
        let phone = "+15551230042"
        func reply(_ body: String, sid: String) async throws -> SMSStatus.Outcome {
            try await database.withDatabase { db in
                try await db.withConnection { connection in
                    try await SMSStatus.record(
                        fields: [("MessageSid", sid), ("From", phone), ("Body", body), ("SmsStatus", "received")],
                        outboxID: nil, on: connection, logger: db.logger)
                }
            }
        }
        #expect(try await reply("START", sid: "SM00000000000000000000000000000001") == .optOut(false))
        #expect(try await reply("STOP", sid: "SM00000000000000000000000000000002") == .optOut(true))
        #expect(try await reply("START", sid: "SM00000000000000000000000000000001") == .ignored)
        #expect(try await database.count("select count(*) from sms_opt_outs where phone_number = '\(phone)'") == 1)
        // A new START from the user is theirs to send.
        #expect(try await reply("START", sid: "SM00000000000000000000000000000003") == .optOut(false))
        #expect(try await database.count("select count(*) from sms_opt_outs") == 0)
        for (word, n) in [("REVOKE", 4), ("optout", 5)] {
            #expect(try await reply(word, sid: "SM0000000000000000000000000000000\(n)") == .optOut(true))
            #expect(try await database.count("select count(*) from sms_opt_outs") == 1)
            try await database.psql("delete from sms_opt_outs")
        }
        #expect(try await database.count("select count(*) from sms_replies") == 5)
        // A status callback without its SID is no message of Nudge's (not an error: no 500).
        let blank = try await database.withDatabase { db in
            try await db.withConnection { connection in
                try await SMSStatus.record(
                    fields: [("MessageSid", ""), ("MessageStatus", "delivered")], outboxID: 7,
                    on: connection, logger: db.logger)
            }
        }
        #expect(blank == .unknownMessage)
    }
}

/// Twilio's auth token is serve's alone, and rotates without losing a callback (docs/serve.md).
@Suite(.dropsItsDatabases) struct TwilioTokenRotationTests {
    /// Through a rotation, a reply signed with the token being replaced
    /// (`TWILIO_AUTH_TOKEN_PREVIOUS`) is accepted like one signed with the new token; one signed
    /// with any other is refused.
    @Test func aCallbackSignedWithThePreviousTokenIsAcceptedThroughARotation() async throws {
        let database = try await TestDatabase.fresh()
        let new = "twilio-auth-token-new-0000000000000"
        let old = "twilio-auth-token-old-1111111111111"
        let serve = try await ServeProcess.start(database, environment: ["TWILIO_AUTH_TOKEN": new, "TWILIO_AUTH_TOKEN_PREVIOUS": old])
        defer { Task { await serve.stop() } }
        func reply(_ sid: String, from phone: String, signedWith token: String) async throws -> String {
            let fields = [("MessageSid", sid), ("From", phone), ("Body", "STOP"), ("SmsStatus", "received")]
            let signature = TwilioWebhook.signature(url: "http://127.0.0.1:1/webhooks/twilio", fields: fields, authToken: token)
            return try await runProcessOffThePool(
                "/usr/bin/curl",
                [
                    "--max-time", "10", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "-H", "X-Twilio-Signature: \(signature)",
                    "-d", "MessageSid=\(sid)", "--data-urlencode", "From=\(phone)", "-d", "Body=STOP",
                    "-d", "SmsStatus=received", "http://127.0.0.1:\(serve.port)/webhooks/twilio",
                ]
            ).stdout
        }
        #expect(try await reply("SM00000000000000000000000000000011", from: "+15551230011", signedWith: new) == "200")
        #expect(try await reply("SM00000000000000000000000000000012", from: "+15551230012", signedWith: old) == "200")
        #expect(try await reply("SM00000000000000000000000000000013", from: "+15551230013", signedWith: "someone-else") == "403")
        #expect(try await database.psql("select phone_number from sms_opt_outs order by 1") == "+15551230011\n+15551230012")
    }
}
