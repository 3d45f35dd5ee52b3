import Foundation
import Logging
import PostgresNIO

/// How a run ended, as `job_runs.status` records it.
public enum RunStatus: String, Sendable, Codable {
    case running
    /// Every user was done, skipped as not due, or had nothing to do.
    case succeeded
    /// The run completed but some users failed, each with a recorded reason (exit 3).
    case partial
    /// The run stopped on an error it could not isolate to a user, such as a lost database (exit 1).
    case aborted
    /// SIGTERM or SIGINT: the batch in flight finished and the checkpoint was kept (exit 1).
    case interrupted
    /// `nudge pause` stopped it between two batches (exit 0).
    case paused
    /// The job ended it after a batch because a run-level budget (`--max-llm-calls`) was spent;
    /// the users it did not reach are left to a later run (exit 0).
    case stopped

    public var exitCode: Int32 {
        switch self {
        case .succeeded, .paused, .stopped: 0
        case .partial: 3
        case .running, .aborted, .interrupted: 1
        }
    }

    /// The exit status of a run that ended this way with `failures` users failed: a run paused or
    /// stopped by its budget after some users failed exits 3 too, so monitoring sees them.
    public func exitCode(failures: Int) -> Int32 {
        exitCode == 0 && failures > 0 ? 3 : exitCode
    }
}

/// The counts a run reports and records.
public struct RunCounts: Sendable, Equatable, Codable {
    public var processed = 0
    public var succeeded = 0
    public var skipped = 0
    public var failed = 0

    public init() {}

    public mutating func add(_ other: RunCounts) {
        processed += other.processed
        succeeded += other.succeeded
        skipped += other.skipped
        failed += other.failed
    }
}

/// The run ledger (`job_runs`, `job_run_failures`). Operators read it; a resumed run starts from
/// its checkpoint. Correctness never depends on it: the per-user state does.
struct RunLedger: Sendable {
    let logger: Logger

    struct Resumable: Sendable {
        let runID: Int64
        let checkpoint: UUID
    }

    /// Closes the books on this job and shard's last run when it died (its lock is free, since we
    /// hold it now), and says whether this run can pick up from its checkpoint. The runs of a
    /// queue (`shared`) hold no lock and keep no checkpoint: one of them closes the others that
    /// have given no sign of life for `silentRunIsDead`, and none resumes.
    func recoverPrevious(
        job: String, shard: Shard, scopeKey: String, dryRun: Bool, shared: Bool = false,
        on connection: PostgresConnection
    ) async throws -> Resumable? {
        let dead = try await connection.query(
            shared ? Self.closeSilentRuns(job: job) : Self.closeDeadRuns(job: job, shard: shard), logger: logger)
        for try await id in dead.decode(Int64.self) {
            logger.warning("previous run did not finish", metadata: ["nudge.previous_run_id": "\(id)"])
        }
        // A dry run changes nothing, so it has nothing to resume; a queue's run leaves its work in the queue.
        guard !dryRun, !shared else { return nil }
        let rows = try await connection.query(Self.lastRealRun(job: job, shard: shard), logger: logger)
        for try await (id, status, previousScope, checkpoint, alreadyResumed) in rows.decode((Int64, String, String, UUID?, Bool).self) {
            let resumable = [RunStatus.interrupted, .paused, .stopped, .aborted].map(\.rawValue).contains(status)
            guard resumable, !alreadyResumed, previousScope == scopeKey, let checkpoint else { return nil }
            return Resumable(runID: id, checkpoint: checkpoint)
        }
        return nil
    }

    /// Marks interrupted the runs still marked running that died: those of this shard, and those
    /// of any other shard count, since this run holds the lock that excludes them all.
    static func closeDeadRuns(job: String, shard: Shard) -> PostgresQuery {
        """
        update job_runs set status = 'interrupted', ended_at = now(),
               error = 'the process ended without finishing (crash, kill -9 or lost connection)'
         where job = \(job) and status = 'running'
           and (shard_count <> \(shard.count) or shard_index = \(shard.index))
        returning id
        """
    }

    /// How long a run of a queue may go without a heartbeat (one per batch, one per pass) before
    /// another run takes it for dead: far longer than a run lasts.
    static let silentRunIsDead = 15 * 60

    /// Marks interrupted the runs of a queue still marked running that have been silent for
    /// `silentRunIsDead` seconds: their process died. Runs alive beside this one are left alone.
    static func closeSilentRuns(job: String) -> PostgresQuery {
        """
        update job_runs set status = 'interrupted', ended_at = now(),
               error = 'the process ended without finishing (crash, kill -9 or lost connection)'
         where job = \(job) and status = 'running'
           and heartbeat_at < now() - make_interval(secs => \(silentRunIsDead))
        returning id
        """
    }

    /// The last run of a job and shard that was not a dry run, and whether a later run resumed it
    /// (served by `idx_job_runs_resume`).
    static func lastRealRun(job: String, shard: Shard) -> PostgresQuery {
        """
        select r.id, r.status, r.scope_key, r.checkpoint,
               exists (select 1 from job_runs later where later.resumed_from = r.id)
          from (select id, status, scope_key, checkpoint from job_runs
                 where job = \(job) and shard_index = \(shard.index) and shard_count = \(shard.count) and not dry_run
                 order by id desc limit 1) r
        """
    }

    /// The runs of a job marked running, newest first: who holds its lock (`idx_job_runs_running`).
    static func runningRuns(job: String) -> PostgresQuery {
        """
        select id, shard_index, shard_count, host, pid, started_at from job_runs
         where job = \(job) and status = 'running' order by id desc limit 20
        """
    }

    func begin(job: String, options: RunOptions, scopeKey: String, resumedFrom: Int64?, on connection: PostgresConnection) async throws -> Int64 {
        let host = ProcessInfo.processInfo.hostName
        let pid = Int(ProcessInfo.processInfo.processIdentifier)
        let rows = try await connection.query(
            """
            insert into job_runs (job, shard_index, shard_count, parameters, scope_key, clock, dry_run, host, pid, resumed_from)
            values (\(job), \(options.shard.index), \(options.shard.count), \(options.ledgerParameters)::jsonb,
                    \(scopeKey), \(options.now), \(options.dryRun), \(host), \(pid), \(resumedFrom))
            returning id
            """, logger: logger)
        for try await id in rows.decode(Int64.self) { return id }
        throw NudgeError(.database, "the run ledger did not return the new run's id")
    }

    /// Records a batch's progress: its failures and the checkpoint. Inside the batch's transaction
    /// for a real run, so that the checkpoint never runs ahead of the writes.
    /// The batch's failures and the run's checkpoint and counts, as steps of the batch's statement.
    /// `progress` false leaves the run's row alone (only the failures are written): the lanes of a
    /// queue's run would otherwise queue up behind that one row's lock, batch after batch.
    ///
    /// A failure a run of the same job recorded within the day before this run's clock, for the
    /// same item and reason, is not recorded again: an item that fails every run is in the ledger
    /// once a day, not once a run (the run's count of failures still counts it).
    func batchRecord(
        runID: Int64, checkpoint: UUID?, counts: RunCounts, failures: [(UUID, String)],
        progress: Bool = true
    ) -> BatchWrites {
        var writes = BatchWrites()
        if !failures.isEmpty {
            writes.step(
                "nudge_failures",
                """
                insert into job_run_failures (run_id, item_id, reason)
                select \(runID), f.item_id, f.reason from unnest(\(failures.map(\.0)), \(failures.map(\.1))) as f(item_id, reason)
                 where not exists (
                       select 1 from job_run_failures p join job_runs r on r.id = p.run_id
                        where p.item_id = f.item_id and p.reason = f.reason and p.run_id <> \(runID)
                          and r.job = (select job from job_runs where id = \(runID))
                          and r.clock > (select clock from job_runs where id = \(runID)) - interval '1 day'
                          and r.clock <= (select clock from job_runs where id = \(runID)))
                on conflict (run_id, item_id) do update set reason = excluded.reason
                """)
        }
        guard progress else { return writes }
        writes.step(
            "nudge_checkpoint",
            """
            update job_runs set checkpoint = \(checkpoint), heartbeat_at = now(),
                   processed = \(counts.processed), succeeded = \(counts.succeeded),
                   skipped = \(counts.skipped), failed = \(counts.failed)
             where id = \(runID)
            """)
        return writes
    }

    /// A queue's run between two passes: alive, with its counts so far.
    static func heartbeat(runID: Int64, counts: RunCounts) -> PostgresQuery {
        """
        update job_runs set heartbeat_at = now(), processed = \(counts.processed), succeeded = \(counts.succeeded),
               skipped = \(counts.skipped), failed = \(counts.failed)
         where id = \(runID)
        """
    }

    func finish(
        runID: Int64, status: RunStatus, counts: RunCounts, tally: [String: Int], error: String?,
        on connection: PostgresConnection
    ) async throws {
        let summary = String(decoding: try JSONSerialization.data(withJSONObject: tally, options: [.sortedKeys]), as: UTF8.self)
        try await connection.query(
            """
            update job_runs set status = \(status.rawValue), ended_at = now(), heartbeat_at = now(),
                   processed = \(counts.processed), succeeded = \(counts.succeeded),
                   skipped = \(counts.skipped), failed = \(counts.failed),
                   summary = \(summary)::jsonb, error = \(error)
             where id = \(runID)
            """, logger: logger)
    }
}
