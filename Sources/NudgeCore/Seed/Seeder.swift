import Foundation
import Logging
import PostgresNIO

/// `nudge seed`: fills an empty database with synthetic users and their history from
/// `db/seed.sql`, deterministically: the same users, seed and clock give the same rows, ids included.
public struct Seeder: Sendable {
    public let script: String

    public static let maximumUsers = 5_000_000

    public init(scriptURL: URL) throws(NudgeError) {
        guard let script = try? String(contentsOf: scriptURL, encoding: .utf8) else {
            throw NudgeError(.configuration, "cannot read the seed script \(scriptURL.path)")
        }
        self.script = script
    }

    /// The script with its parameters in place. They are integers and a formatted instant, so
    /// nothing from the command line reaches the SQL text unchecked.
    public func sql(users: Int, seed: Int, now: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = TimeZone(identifier: "UTC")
        return
            script
            .replacingOccurrences(of: "{{users}}", with: String(users))
            .replacingOccurrences(of: "{{seed}}", with: String(seed))
            .replacingOccurrences(of: "{{now}}", with: "'\(formatter.string(from: now))'::timestamptz")
    }

    /// Seeds, in one transaction; refuses a database that already has users.
    public func seed(_ database: Database, users: Int, seed: Int, now: Date) async throws -> [(table: String, rows: Int)] {
        guard (1...Self.maximumUsers).contains(users) else {
            throw NudgeError(.usage, "--users must be between 1 and \(Self.maximumUsers)")
        }
        let logger = database.logger
        return try await database.client.withConnection { connection in
            let existing = try await connection.query("select count(*) from (select 1 from users limit 1) u", logger: logger)
            for try await count in existing.decode(Int.self) where count > 0 {
                throw NudgeError(.configuration, "the database already has users; `nudge seed` fills an empty database only")
            }
            try await connection.withTransaction(logger: logger) { connection in
                try await connection.executeScript(sql(users: users, seed: seed, now: now), tag: "nudge_seed", logger: logger)
            }
            try await connection.query("analyze", logger: logger)
            let counts = try await connection.query(
                """
                select c.relname, c.reltuples::bigint from pg_class c join pg_namespace n on n.oid = c.relnamespace
                 where n.nspname = 'public' and c.relkind = 'r' and c.relname not in ('nudge_migrations')
                 order by c.relname
                """, logger: logger)
            var tables: [(String, Int)] = []
            for try await (table, rows) in counts.decode((String, Int).self) { tables.append((table, max(rows, 0))) }
            return tables
        }
    }
}
