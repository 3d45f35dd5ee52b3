import Foundation
import PostgresNIO
import Testing

@testable import NudgeCore

/// The migration files in the order they apply.
let migrationFiles = try! FileManager.default
    .contentsOfDirectory(atPath: packageRoot.appendingPathComponent("db/migrations").path)
    .filter { $0.hasSuffix(".sql") }.sorted()

@Suite(.dropsItsDatabases) struct MigrationTests {
    @Test func migrateTwiceInARowChangesNothingTheSecondTime() async throws {
        let database = try await TestDatabase.fresh(migrated: false)
        let first = try await database.nudge(["migrate"])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.stdout.contains("applied 0001_schema.sql"))
        let second = try await database.nudge(["migrate"])
        #expect(second.status == 0)
        #expect(second.stdout.contains("schema is up to date"))
        #expect(try await database.count("select count(*) from nudge_migrations") == migrationFiles.count)
    }

    @Test func twoMigrationsAtOnceApplyEachFileOnce() async throws {
        let database = try await TestDatabase.fresh(migrated: false)
        let runs = try (0..<3).map { _ in try database.startNudge(["migrate"]) }
        var results: [ProcessResult] = []
        for run in runs { results.append(await run.finished()) }
        for result in results { #expect(result.status == 0, "\(result.stderr)") }
        for file in migrationFiles {
            #expect(results.filter { $0.stdout.hasPrefix("applied") && $0.stdout.contains(file) }.count == 1, "\(file)")
        }
        #expect(try await database.count("select count(*) from nudge_migrations") == migrationFiles.count)
    }

    /// The tables' and columns' names are the apps' contract (docs/operations.md, "Migrations").
    @Test(arguments: [
        (
            "users",
            [
                "id", "timezone", "locale", "display_name", "email", "phone_number", "created_at", "last_active_at",
                "coach_persona_id", "fcm_token", "push_enabled", "notification_pref", "notification_lead_min",
            ]
        ),
        ("coach_personas", ["id", "name", "locale"]),
        (
            "daily_tracking",
            [
                "user_id", "date", "steps", "weight", "mood", "energy", "checked_in_at", "previous_day_sentiment",
                "previous_day_steps", "streak_day", "submitted_to_fitcircles", "submission_timestamp",
            ]
        ),
        ("daily_goals", ["id", "user_id", "date", "goal_type", "target_value", "actual_value", "completed", "created_at"]),
        (
            "weekly_goals",
            [
                "id", "user_id", "week_start", "goal_type", "target_value", "actual_value", "daily_breakdown",
                "completed", "fitcircle_id", "created_at",
            ]
        ),
        (
            "user_streaks",
            [
                "id", "user_id", "current_streak", "longest_streak", "last_checkin_date", "freeze_used_this_week",
                "week_start_date", "created_at", "updated_at",
            ]
        ),
        ("user_badges", ["user_id", "badge", "earned_at"]),
        ("fitcircles", ["id", "challenge_type", "timezone", "starts_on", "ends_on", "challenge_step_goal"]),
        ("fitcircle_members", ["fitcircle_id", "user_id", "joined_at", "left_at", "starting_weight", "target_weight"]),
        (
            "fitcircle_data_submissions",
            [
                "id", "fitcircle_id", "user_id", "submission_date", "steps", "weight", "submitted_at",
                "rank_after_submission", "rank_change",
            ]
        ),
        (
            "fitcircle_leaderboard_entries",
            [
                "id", "fitcircle_id", "user_id", "period", "period_start", "metric_type",
                "metric_value", "rank", "rank_change", "last_updated",
            ]
        ),
        ("user_push_tokens", ["id", "user_id", "device_token", "platform", "active", "last_used", "created_at"]),
        ("push_tokens", ["user_id", "device_token", "platform", "created_at", "updated_at"]),
        (
            "notification_preferences",
            [
                "id", "user_id", "push_enabled", "email_enabled", "inapp_enabled", "push_daily_checkin",
                "push_streak_risk", "push_weekly_goal", "push_data_submission", "push_leaderboard_change",
                "push_social_engagement", "push_weekly_digest", "push_challenge_milestone",
                "email_daily_checkin", "email_streak_risk", "email_weekly_digest", "email_monthly_report",
                "email_fitcircle_invite", "email_challenge_milestone", "daily_reminder_time", "dnd_start",
                "dnd_end", "pause_weekends", "updated_at",
            ]
        ),
        (
            "email_preferences",
            [
                "id", "user_id", "daily_checkin_reminder", "streak_at_risk", "weekly_digest", "monthly_report",
                "fitcircle_invites", "challenge_milestones", "updated_at",
            ]
        ),
        ("email_logs", ["id", "user_id", "email_type", "sent_at", "opened", "clicked"]),
        (
            "notification_logs",
            [
                "id", "user_id", "call_id", "type", "notification_type", "channel", "status", "title", "body",
                "payload", "provider_id", "error_msg", "sent_at", "delivered", "delivered_at", "opened",
                "opened_at", "created_at",
            ]
        ),
        ("push_log", ["id", "user_id", "push_type", "content", "sent_at", "opened", "metadata"]),
        ("context_profiles", ["user_id", "timezone", "notification_preferences", "coaching_preferences", "domain_styles"]),
        ("conversations", ["id", "user_id", "domain", "created_at"]),
        ("messages", ["id", "conversation_id", "role", "content", "created_at"]),
        ("learning_signals", ["user_id", "signal_type", "signal_data", "created_at"]),
        ("pattern_cache", ["user_id"]),
        ("scheduled_calls", ["id", "user_id", "scheduled_at", "status", "topic", "preview_sent", "preview_sent_at"]),
        (
            "job_runs",
            [
                "job", "parameters", "dry_run", "host", "pid", "started_at", "ended_at", "status", "processed",
                "succeeded", "skipped", "failed", "checkpoint",
            ]
        ),
        ("job_work", ["job", "user_id", "local_day", "outcome"]),
        ("notification_outbox", ["dedupe_key", "job", "user_id", "local_day", "notification_type", "deliver_after"]),
    ])
    func everyTableHasTheSeedsColumns(_ table: String, _ columns: [String]) async throws {
        try await TestDatabase.rolledBack { database in
            let present = Set(
                try await database.psql(
                    "select column_name from information_schema.columns where table_schema = 'public' and table_name = '\(table)'"
                ).split(separator: "\n").map(String.init))
            #expect(!present.isEmpty, "table \(table) is missing")
            #expect(Set(columns).subtracting(present).isEmpty, "\(table) lacks \(Set(columns).subtracting(present).sorted())")
        }
    }

    @Test func theSeedsIndexesExist() async throws {
        try await TestDatabase.rolledBack { database in
            let indexes = try await database.psql("select indexname from pg_indexes where schemaname = 'public'")
            for name in ["idx_push_log_user_sent", "idx_notif_user", "idx_notif_call", "idx_leaderboard_circle_period_rank"] {
                #expect(indexes.contains(name), "\(name)")
            }
            await #expect {
                try await database.psql(
                    "insert into users (id) values (gen_random_uuid()); insert into push_log (user_id, push_type, content) select id, 'generic', 'x' from users"
                )
            } throws: { error in
                (error as? TestSQL.Refused)?.message.contains("push_log_push_type_check") == true
            }
        }
    }
}

@Suite(.dropsItsDatabases) struct IndexTests {
    /// Deleting a user cascades through every table that references users; a foreign key without
    /// an index led by its columns makes each such delete scan the referencing table.
    @Test func everyForeignKeyHasAnIndexLedByItsColumns() async throws {
        try await TestDatabase.rolledBack { database in
            let uncovered = try await database.psql(
                """
                select c.conrelid::regclass || '(' || (select string_agg(a.attname, ', ' order by k.ord)
                                                         from unnest(c.conkey) with ordinality k(attnum, ord)
                                                         join pg_attribute a on a.attrelid = c.conrelid and a.attnum = k.attnum) || ')'
                  from pg_constraint c
                 where c.contype = 'f' and c.connamespace = 'public'::regnamespace
                   and not exists (select 1 from pg_index i
                                    where i.indrelid = c.conrelid and i.indpred is null
                                      and (i.indkey::int2[])[0:cardinality(c.conkey) - 1] @> c.conkey
                                      and (i.indkey::int2[])[0:cardinality(c.conkey) - 1] <@ c.conkey)
                 order by 1
                """)
            #expect(uncovered == "", "foreign keys without an index led by their columns:\n\(uncovered)")
        }
    }
}

@Suite(.dropsItsDatabases) struct LedgerIndexTests {
    /// Every run asks the ledger which runs are marked running and which was the last real one:
    /// after a year of runs those questions must be answered from an index, not a scan.
    @Test func theLedgersQuestionsAreAnsweredFromAnIndex() async throws {
        let database = try await TestDatabase.fresh()
        try await database.psql(
            """
            insert into job_runs (job, shard_index, shard_count, scope_key, clock, dry_run, host, pid, status)
            select (array['validate-streaks', 'generate-daily-goals', 'push-trigger'])[1 + n % 3], n % 4, 4, 'x', now(),
                   n % 7 = 0, 'host', 1, 'succeeded'
              from generate_series(1, 40000) n;
            analyze job_runs
            """)
        let shard = try Shard("1/4")
        let queries = [
            RunLedger.closeDeadRuns(job: "validate-streaks", shard: shard),
            RunLedger.lastRealRun(job: "validate-streaks", shard: shard),
            RunLedger.runningRuns(job: "validate-streaks"),
        ]
        try await database.withDatabase { db in
            for query in queries {
                var explain = query
                explain.sql = "explain " + query.sql
                var plan = ""
                for try await line in try await db.client.query(explain, logger: db.logger).decode(String.self) { plan += line + "\n" }
                #expect(!plan.contains("Seq Scan"), "\(query.sql)\n\(plan)")
            }
        }
    }
}

@Suite(.dropsItsDatabases) struct SchemaGuardTests {
    @Test func aJobRefusesAnUnmigratedDatabase() async throws {
        let database = try await TestDatabase.fresh(migrated: false)
        let result = try await database.nudge(["run", "validate-streaks"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("the database lacks \(migrationFiles.joined(separator: ", ")): run `nudge migrate` first"))
    }

    @Test func aCrashedDryRunIsClosedByTheNextRun() async throws {
        let database = try await TestDatabase.fresh()
        try await database.psql(
            """
            insert into job_runs (job, scope_key, clock, dry_run, host, pid) values ('validate-streaks', 'x', now(), true, 'gone', 1)
            """)
        #expect(try await database.nudge(["run", "validate-streaks", "--now", "2026-03-20T00:00:00Z"]).status == 0)
        #expect(try await database.psql("select status from job_runs order by id") == "interrupted\nsucceeded")
    }
}

/// A migration's backfill of a big table: in batches, each its own transaction, after its schema.
@Suite(.dropsItsDatabases) struct MigrationBackfillTests {
    /// The project's migrations and one more, whose backfill fills 25 rows 10 at a time.
    func folder(backfill: String) throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nudge-migrations-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        for file in migrationFiles {
            try FileManager.default.copyItem(
                at: packageRoot.appendingPathComponent("db/migrations/\(file)"),
                to: folder.appendingPathComponent(file))
        }
        try """
        create table backfill_probe (id uuid primary key default gen_random_uuid(), n integer not null, doubled integer);
        insert into backfill_probe (n) select generate_series(1, 25);
        \(backfill)
        """.write(to: folder.appendingPathComponent("0099_backfill_probe.sql"), atomically: true, encoding: .utf8)
        return folder
    }

    @Test func aBackfillRunsInBatchesAndTheMigrationIsPendingUntilItIsDone() async throws {
        let database = try await TestDatabase.fresh()
        let migrator = try Migrator(
            directory: try folder(
                backfill: """
                    -- nudge:backfill backfill_probe 10
                    update backfill_probe set doubled = 2 * n where id > {{after}} and id <= {{through}}
                    """))
        let applied = try await database.withDatabase { db in try await migrator.migrate(db) }
        #expect(applied == ["0099_backfill_probe.sql"])
        #expect(try await database.count("select count(*) from backfill_probe where doubled = 2 * n") == 25)
        // Three transactions: 10, 10 and 5 rows.
        #expect(try await database.count("select count(distinct xmin::text) from backfill_probe") == 3)
        // A backfill that stopped halfway: the migration is pending (jobs refuse to run) until
        // the next `nudge migrate` finishes it.
        try await database.psql("update nudge_migrations set backfilled = false where version = 99; update backfill_probe set doubled = null")
        #expect(try await database.withDatabase { db in try await migrator.pending(db) } == ["0099_backfill_probe.sql"])
        let again = try await database.withDatabase { db in try await migrator.migrate(db) }
        #expect(again.isEmpty)
        #expect(try await database.count("select count(*) from backfill_probe where doubled = 2 * n") == 25)
        #expect(try await database.withDatabase { db in try await migrator.pending(db) }.isEmpty)
    }

    @Test func aBackfillThatCannotBeBatchedIsRefusedBeforeAnythingRuns() throws {
        for bad in [
            "-- nudge:backfill backfill_probe\nupdate backfill_probe set doubled = 2 * n where id > {{after}} and id <= {{through}}",
            "-- nudge:backfill backfill_probe 10\nupdate backfill_probe set doubled = 2 * n",
            "-- nudge:backfill backfill_probe 10\ndelete from backfill_probe where id > {{after}} and id <= {{through}}",
        ] {
            #expect(throws: NudgeError.self, "\(bad)") { try Migrator(directory: try folder(backfill: bad)) }
        }
    }

    /// 0007 and 0008 moved their backfills out of their transaction: a database that applied
    /// their earlier text is not told they changed; any other change is still refused.
    @Test func theEarlierTextsOf0007And0008AreTheSameMigrations() async throws {
        let database = try await TestDatabase.fresh()
        try await database.psql("update nudge_migrations set checksum = 'e6ae77659d3a259926cd4bb7a467abf2' where version = 8")
        let accepted = try await database.nudge(["migrate"])
        #expect(accepted.status == 0, "\(accepted.stderr)")
        try await database.psql("update nudge_migrations set checksum = 'not-the-text' where version = 8")
        let refused = try await database.nudge(["migrate"])
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("0008_preview_due.sql was changed after it was applied"))
    }
}
