import Foundation
import Logging
import PostgresNIO

/// Applies `db/migrations/NNNN_name.sql` in order, each once, each in its own transaction, under a
/// transaction-level advisory lock so that two `nudge migrate` at once apply nothing twice.
public struct Migrator: Sendable {
    public struct Migration: Sendable {
        public let version: Int
        public let name: String
        public let sql: String
    }

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
            migrations.append(Migration(version: version, name: name, sql: sql))
        }
        self.migrations = migrations
    }

    /// The migrations this database lacks: a job refuses to run on an older schema.
    public func pending(_ database: Database) async throws -> [String] {
        let logger = database.logger
        let applied: Set<Int>? = try await database.withConnection { connection in
            try await database.bounded(connection) {
                do {
                    let rows = try await connection.query("select coalesce(array_agg(version), '{}') from nudge_migrations",
                                                          logger: logger)
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
            for migration in migrations {
                let didApply = try await connection.withTransaction(logger: logger) { connection in
                    try await connection.query("select pg_advisory_xact_lock(\(Self.lockKey))", logger: logger)
                    try await connection.query("""
                        create table if not exists nudge_migrations (
                            version integer primary key,
                            name text not null,
                            checksum text not null,
                            applied_at timestamptz not null default now())
                        """, logger: logger)
                    let rows = try await connection.query(
                        "select name, checksum, md5(\(migration.sql)) from nudge_migrations where version = \(migration.version)",
                        logger: logger)
                    for try await (name, checksum, expected) in rows.decode((String, String, String).self) {
                        guard checksum == expected else {
                            throw NudgeError(.configuration, """
                                migration \(name) was changed after it was applied; add a new migration instead
                                """)
                        }
                        return false
                    }
                    try await connection.executeScript(migration.sql, tag: "nudge_migration", logger: logger)
                    try await connection.query("""
                        insert into nudge_migrations (version, name, checksum)
                        values (\(migration.version), \(migration.name), md5(\(migration.sql)))
                        """, logger: logger)
                    return true
                }
                if didApply {
                    logger.info("migration applied", metadata: ["nudge.migration": "\(migration.name)"])
                    applied.append(migration.name)
                }
            }
        }
        return applied
    }
}
