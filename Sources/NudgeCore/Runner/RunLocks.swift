import Foundation
import Logging
import PostgresNIO

/// The lock that keeps two runs of a job off the same users, across machines: PostgreSQL
/// session advisory locks, taken by `nudge_try_run_lock` (migration 0004). Runs of different
/// shards of one shard count run side by side; a run of the same shard, or of any other shard
/// count (an unsharded run and `--shard 0/4` share users), is refused. The locks die with the
/// session, so a crashed run never blocks the next one. Dry runs take them too, so that they never
/// interleave with a real run.
struct RunLocks: Sendable {
    let job: String
    let shard: Shard

    /// The job's half of every key: a positive 32-bit FNV-1a hash of its name.
    static func jobKey(_ job: String) -> Int32 {
        var hash: UInt32 = 0x811c_9dc5
        for byte in "nudge:job:\(job)".utf8 {
            hash ^= UInt32(byte)
            hash = hash &* 0x0100_0193
        }
        return Int32(bitPattern: hash & 0x7fff_ffff)
    }

    enum Conflict: String {
        /// A run of another shard count (or an unsharded one) holds it: their users overlap.
        case scope
        /// A run of the same shard holds it.
        case shard
    }

    /// Takes the locks, or says which run holds them.
    func acquire(on connection: PostgresConnection, logger: Logger) async throws -> Conflict? {
        let rows = try await connection.query(
            """
            select nudge_try_run_lock(\(Self.jobKey(job)), \(Int32(shard.index)), \(Int32(shard.count)))
            """, logger: logger)
        for try await conflict in rows.decode(String?.self) {
            return conflict.flatMap(Conflict.init(rawValue:))
        }
        throw NudgeError(.database, "the run lock gave no answer")
    }

    func release(on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query(
            """
            select nudge_release_run_lock(\(Self.jobKey(job)), \(Int32(shard.index)), \(Int32(shard.count)))
            """, logger: logger)
    }
}
