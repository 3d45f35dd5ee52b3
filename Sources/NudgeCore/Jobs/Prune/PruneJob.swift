import Foundation
import PostgresNIO

/// prune (docs/jobs/prune.md): once a day, deletes what no job reads any more, each table's rows past the
/// age `jobs/prune.json` gives it (`RetentionRule`), in chunks of at most the batch size of rows,
/// each chunk its own short transaction, so that the tables stay bounded at a million users and
/// no delete holds a lock for long. Its chunks are paged by the runner (`RetentionSource`), with
/// the job's lock, kill switch, dry run and ledger; the run's tally says how many rows of each
/// table went.
public struct PruneJob: PlainJob {
    public static let jobName = "prune"

    public typealias Source = RetentionSource

    public let definition: JobDefinition
    public let rules: [RetentionRule]

    public init(definition: JobDefinition) throws(NudgeError) {
        self.definition = definition
        guard let days = definition.retentionDays else {
            throw NudgeError(.configuration, "jobs/\(definition.name).json: prune needs retentionDays")
        }
        self.rules = try RetentionRule.configured(days)
    }

    public var source: RetentionSource { RetentionSource(rules: rules) }

    public struct Facts: Sendable {}

    public typealias Change = RetentionChunk

    /// Nothing to read beyond the chunk itself.
    public func loadFacts(for items: [RetentionChunk], run: RunContext, on connection: PostgresConnection) async throws -> [UUID: Facts] {
        [:]
    }

    public func decide(for chunk: RetentionChunk, facts: Facts?, run: RunContext) throws -> Decision<RetentionChunk> {
        .act(
            PlannedChange(
                itemID: chunk.id, change: chunk, work: [], notifications: [],
                tally: ["pruned:\(chunk.rule.table)": chunk.rows]))
    }

    /// Deletes each chunk's rows: past the age, between the chunk's ages, that may go.
    public func writes(for changes: [PlannedChange<RetentionChunk>], run: RunContext) -> BatchWrites {
        var writes = BatchWrites()
        for (index, change) in changes.enumerated() {
            let chunk = change.change
            writes.step(
                "pruned_\(index)",
                """
                delete from \(unescaped: chunk.rule.table)
                 where \(RetentionSource.rows(of: chunk.rule, cutoff: chunk.cutoff, after: chunk.after, through: chunk.through))
                """)
        }
        return writes
    }
}
