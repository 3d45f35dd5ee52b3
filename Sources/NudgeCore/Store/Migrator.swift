import Foundation
import Logging
import PostgresNIO

/// Applies `db/migrations/NNNN_name.sql` in order, each once, each in its own transaction, under a
/// transaction-level advisory lock so that two `nudge migrate` at once apply nothing twice.
///
/// A migration that fills a new column of a table the app may have made big does not do it in
/// that transaction: after a line `-- nudge:backfill TABLE BATCH`, its one `update` (or an `insert`
/// that fills a new table from TABLE, `on conflict do nothing`) runs in batches
/// of BATCH rows of TABLE by id, each batch its own transaction, with `{{after}}` and
/// `{{through}}` standing for the batch's id range (`c.id > {{after}} and c.id <= {{through}}`).
/// The migration is recorded when its schema is in, and its backfill as done once the last batch
/// is: until then it is still pending (jobs refuse to run), and the next `nudge migrate` runs
/// the backfill again from the start (the update must give the same rows the same values).
public struct Migrator: Sendable {
    public struct Migration: Sendable {
        public let version: Int
        public let name: String
        public let sql: String

        /// A backfill: its table, batch size and update.
        public struct Backfill: Sendable, Equatable {
            public let table: String
            public let batch: Int
            public let update: String
        }

        /// The part applied in the migration's transaction.
        public var schema: String { String(sql.components(separatedBy: Self.marker).first ?? sql) }

        static let marker = "\n-- nudge:backfill "

        /// The backfills after the schema, in order.
        public func backfills() throws(NudgeError) -> [Backfill] {
            try sql.components(separatedBy: Self.marker).dropFirst().map { (section) throws(NudgeError) -> Backfill in
                let lines = section.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
                let words = lines[0].split(separator: " ")
                let update = lines.count > 1 ? lines[1].trimmingCharacters(in: .whitespacesAndNewlines) : ""
                guard words.count == 2, let batch = Int(words[1]), batch > 0,
                    words[0].allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" }),
                    ["update ", "insert "].contains(where: update.lowercased().hasPrefix), update.contains("{{after}}"), update.contains("{{through}}"),
                    !update.dropLast(update.hasSuffix(";") ? 1 : 0).contains(";")
                else {
                    throw NudgeError(
                        .configuration,
                        """
                        migration \(name): a backfill is `-- nudge:backfill TABLE BATCH` followed by one update (or insert) using \
                        {{after}} and {{through}}
                        """)
                }
                return Backfill(
                    table: String(words[0]), batch: batch,
                    update: update.hasSuffix(";") ? String(update.dropLast()) : update)
            }
        }
    }

    /// Texts of migrations applied before they were reworded (their backfills moved out of their
    /// transaction): the same migration, accepted under their earlier checksum.
    static let earlierChecksums: [Int: Set<String>] = [
        7: ["ee4e64fc2724bf0b5525fa37ced6da96"],
        // (and two rewordings of its comment since)
        8: ["e6ae77659d3a259926cd4bb7a467abf2", "27229c7d08bb9b3b9226d27ee1e64d01", "491cadb275231ff6ef80d4413a9352eb"],
    ]

    /// The advisory lock key every `nudge migrate` takes ("nudge:migrate").
    static let lockKey: Int64 = 0x6E75_6467_656D_6967

    public let migrations: [Migration]

    public init(directory: URL) throws(NudgeError) {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
                .filter { $0.hasSuffix(".sql") }.sorted()
        } catch {
            throw NudgeError(.configuration, "cannot read the migrations folder \(directory.path)")
        }
        var migrations: [Migration] = []
        for name in names {
            guard let version = Int(name.prefix { $0.isNumber }), version > 0 else {
                throw NudgeError(.configuration, "migration \(name) must start with its version number, e.g. 0002_")
            }
            guard migrations.last.map({ $0.version < version }) ?? true else {
                throw NudgeError(.configuration, "two migrations have version \(version)")
            }
            guard let sql = try? String(contentsOf: directory.appendingPathComponent(name), encoding: .utf8) else {
                throw NudgeError(.configuration, "cannot read migration \(name)")
            }
            let migration = Migration(version: version, name: name, sql: sql)
            _ = try migration.backfills()
            migrations.append(migration)
        }
        self.migrations = migrations
    }

    /// The migrations this database lacks, or whose backfill is not done: a job refuses to run on
    /// an older schema.
    public func pending(_ database: Database) async throws -> [String] {
        let logger = database.logger
        let applied: Set<Int>? = try await database.withConnection { connection in
            try await database.bounded(connection) {
                do {
                    // (`backfilled` through the row's JSON: a database migrated before it has no such column.)
                    let rows = try await connection.query(
                        """
                        select coalesce(array_agg(version), '{}') from nudge_migrations m
                         where coalesce((to_jsonb(m)->>'backfilled')::boolean, true)
                        """, logger: logger)
                    for try await versions in rows.decode([Int].self) { return Set(versions) }
                    return []
                } catch let error as PSQLError where error.serverInfo?[.sqlState] == "42P01" {
                    return nil   // no nudge_migrations table: nothing is applied
                }
            }
        }
        return migrations.filter { !(applied ?? []).contains($0.version) }.map(\.name)
    }

    /// Applies what is missing; returns the names applied now.
    public func migrate(_ database: Database) async throws -> [String] {
        let logger = database.logger
        var applied: [String] = []
        try await database.client.withConnection { connection in
            // The ledger of migrations, once, under the lock (two first migrations at once).
            try await connection.withTransaction(logger: logger) { connection in
                try await connection.query("select pg_advisory_xact_lock(\(Self.lockKey))", logger: logger)
                try await connection.query(
                    """
                    create table if not exists nudge_migrations (
                        version integer primary key,
                        name text not null,
                        checksum text not null,
                        applied_at timestamptz not null default now())
                    """, logger: logger)
                try await connection.query(
                    """
                    alter table nudge_migrations add column if not exists backfilled boolean not null default true
                    """, logger: logger)
            }
            for migration in migrations {
                let step = try await connection.withTransaction(logger: logger) { connection in
                    try await connection.query("select pg_advisory_xact_lock(\(Self.lockKey))", logger: logger)
                    let rows = try await connection.query(
                        """
                        select name, checksum, md5(\(migration.sql)), backfilled from nudge_migrations where version = \(migration.version)
                        """, logger: logger)
                    for try await (name, checksum, expected, backfilled) in rows.decode((String, String, String, Bool).self) {
                        guard checksum == expected || Self.earlierChecksums[migration.version]?.contains(checksum) == true else {
                            throw NudgeError(
                                .configuration,
                                """
                                migration \(name) was changed after it was applied; add a new migration instead
                                """)
                        }
                        return Step(applied: false, backfill: !backfilled)
                    }
                    try await connection.executeScript(migration.schema, tag: "nudge_migration", logger: logger)
                    let backfills = try migration.backfills()
                    try await connection.query(
                        """
                        insert into nudge_migrations (version, name, checksum, backfilled)
                        values (\(migration.version), \(migration.name), md5(\(migration.sql)), \(backfills.isEmpty))
                        """, logger: logger)
                    return Step(applied: true, backfill: !backfills.isEmpty)
                }
                // A backfill left unfinished (by this run, or one that stopped) is finished now;
                // the migration was applied by whoever applied its schema.
                if step.backfill {
                    try await backfill(migration, on: connection, logger: logger)
                }
                if step.applied {
                    logger.info("migration applied", metadata: ["nudge.migration": "\(migration.name)"])
                    applied.append(migration.name)
                }
            }
        }
        return applied
    }

    /// What became of a migration in its transaction: applied now, and whether its backfill is to run.
    struct Step: Sendable {
        let applied: Bool
        let backfill: Bool
    }

    /// How long a backfill's batch may wait for a row the app holds, and run: a stuck batch fails
    /// `nudge migrate` with the reason (run it again), it does not hang.
    static let batchLockTimeout = "30s", batchTimeout = "10min"

    /// Runs a migration's backfills, batch by batch, each batch in its own transaction, then
    /// records it as done; under the migrations' lock, held for the session meanwhile, so that
    /// a second `nudge migrate` waits for it and then finds it done.
    func backfill(_ migration: Migration, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query("select pg_advisory_lock(\(Self.lockKey))", logger: logger)
        do {
            try await backfillLocked(migration, on: connection, logger: logger)
        } catch {
            _ = try? await connection.query("select pg_advisory_unlock(\(Self.lockKey))", logger: logger)
            throw error
        }
        try await connection.query("select pg_advisory_unlock(\(Self.lockKey))", logger: logger)
    }

    private func backfillLocked(_ migration: Migration, on connection: PostgresConnection, logger: Logger) async throws {
        var done = false
        let state = try await connection.query(
            "select backfilled from nudge_migrations where version = \(migration.version)",
            logger: logger)
        for try await backfilled in state.decode(Bool.self) { done = backfilled }
        guard !done else { return }
        for backfill in try migration.backfills() {
            var after = UUID.allZeros
            var batches = 0
            while true {
                var through: UUID?
                let rows = try await connection.query(
                    PostgresQuery(
                        unsafeSQL: """
                            select id from (select id from \(backfill.table) where id > '\(after.uuidString)' order by id
                                            limit \(backfill.batch)) batch
                             order by id desc limit 1
                            """), logger: logger)
                for try await last in rows.decode(UUID.self) { through = last }
                guard let through else { break }
                let update = backfill.update.replacingOccurrences(of: "{{after}}", with: "'\(after.uuidString.lowercased())'")
                    .replacingOccurrences(of: "{{through}}", with: "'\(through.uuidString.lowercased())'")
                try await connection.withTransaction(logger: logger) { connection in
                    try await connection.query(
                        PostgresQuery(unsafeSQL: "set local lock_timeout = '\(Self.batchLockTimeout)'"),
                        logger: logger)
                    try await connection.query(
                        PostgresQuery(unsafeSQL: "set local statement_timeout = '\(Self.batchTimeout)'"),
                        logger: logger)
                    try await connection.query(PostgresQuery(unsafeSQL: update), logger: logger)
                }
                after = through
                batches += 1
            }
            logger.info(
                "migration backfilled",
                metadata: [
                    "nudge.migration": "\(migration.name)", "nudge.table": "\(backfill.table)", "nudge.batches": "\(batches)",
                ])
        }
        try await connection.query(
            "update nudge_migrations set backfilled = true where version = \(migration.version)",
            logger: logger)
    }
}
