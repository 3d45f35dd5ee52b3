import Foundation

/// An inclusive range of local days: `--date D` is `D...D`, `--from A --to B` is `A...B`.
public struct DayWindow: Sendable, Equatable {
    public let from: LocalDate
    public let to: LocalDate

    public init(from: LocalDate, to: LocalDate) throws(NudgeError) {
        guard from <= to else { throw NudgeError(.usage, "--from \(from) is after --to \(to)") }
        guard to.days(since: from) < 3660 else { throw NudgeError(.usage, "--from/--to may span ten years at most") }
        self.from = from
        self.to = to
    }

    public func contains(_ day: LocalDate) -> Bool { from <= day && day <= to }
}

/// Shard `index` of `count`: a contiguous range of the id space, so that a shard's pages are a range
/// of the primary key (ids are random UUIDs, so the ranges hold as many users each). The range is
/// that of the ids' first 32 bits, `[⌈index·2³²/count⌉, ⌈(index+1)·2³²/count⌉)`: any tool can
/// compute a user's shard, `('x' || left(id::text, 8))::bit(32)::bigint * count / 4294967296`.
/// Another shard count simply re-partitions the same ids.
public struct Shard: Sendable, Equatable, CustomStringConvertible {
    public let index: Int
    public let count: Int

    public static let whole = Shard(uncheckedIndex: 0, count: 1)

    private init(uncheckedIndex: Int, count: Int) {
        self.index = uncheckedIndex
        self.count = count
    }

    /// The first id of the shard's range.
    public var lowerBound: UUID { Self.id(prefix: Self.start(of: index, count: count)) }

    /// The first id after the shard's range; nil for the last shard, which reaches the end.
    public var upperBound: UUID? {
        index + 1 == count ? nil : Self.id(prefix: Self.start(of: index + 1, count: count))
    }

    /// The first 32-bit prefix of shard `index`: ⌈index·2³²/count⌉.
    static func start(of index: Int, count: Int) -> UInt64 {
        ((UInt64(index) << 32) + UInt64(count) - 1) / UInt64(count)
    }

    /// The smallest id whose first 32 bits are `prefix`.
    static func id(prefix: UInt64) -> UUID {
        let p = UInt32(truncatingIfNeeded: prefix)
        return UUID(
            uuid: (
                UInt8(p >> 24), UInt8(p >> 16 & 0xFF), UInt8(p >> 8 & 0xFF), UInt8(p & 0xFF),
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
            ))
    }

    /// Parses `i/n` with 0 ≤ i < n, as Kubernetes' `JOB_COMPLETION_INDEX` counts.
    public init(_ text: String) throws(NudgeError) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let index = Int(parts[0]), let count = Int(parts[1]), count >= 1, count <= 4096,
            index >= 0, index < count
        else {
            throw NudgeError(.usage, "--shard must be i/n with 0 <= i < n <= 4096 (for example 0/4), not '\(text)'")
        }
        self.init(uncheckedIndex: index, count: count)
    }

    public var description: String { "\(index)/\(count)" }
}

/// How one `nudge run` was asked to run.
public struct RunOptions: Sendable {
    /// The instant the run starts at: `--now`, or the real time when it started.
    public var now: Date
    /// Whether `--now` was given: a run at an explicit instant can be resumed by the same command.
    public var nowIsExplicit: Bool
    /// The time each batch is decided at: fixed at `--now` when given, the real time otherwise.
    public var clock: any RunClock
    public var window: DayWindow?
    public var users: [UUID]
    public var shard: Shard
    public var batchSize: Int
    public var concurrency: Int
    public var dryRun: Bool
    /// Whether a dry run still asks the LLM for copy (`--dry-run-llm`); it writes nothing either way.
    public var dryRunCallsLLM: Bool
    public var llmBudget: LLMBudget
    /// After SIGTERM, how long the outside calls in flight (the LLM's) may take before they are
    /// cancelled and their users left undone for the next run.
    public var shutdownGrace: Duration = .seconds(20)
    /// How long a run of a queue job (dispatch) keeps draining: passes over what is due until
    /// then, so that items leave within seconds of their time. Zero: one pass. A run at an
    /// explicit `--now` always makes its passes at that instant and ends.
    public var drainFor: Duration = .zero
    /// How many batch loops a queue job runs at once in this process (each on its own
    /// connection): as many dispatchers sharing one run.
    public var lanes = 1
    /// `--sweep`: a job that reads through the due index reads every user once, due or not, to
    /// prove the index right (DESIGN "Finding the work"): what it finds due that the index had
    /// not is done, logged and counted (`index_missed`).
    public var sweep = false
    /// Whether the run asks its job for metrics of its own (`RunReports.runMetrics`) at its end: only
    /// when someone writes them (`nudge run` with `NUDGE_METRICS_DIR`), since they may cost the
    /// job a statement.
    public var readsJobMetrics = false
    /// What the run's waits are measured on (the drain, the claims, the pause between batches,
    /// the outside calls' bound, the shutdown grace): the real time, unless a test moves it.
    public var waitClock: any WaitClock = SystemWaitClock()

    /// `clock` defaults to `now` itself for an explicit `--now`, and to the real time otherwise.
    public init(
        now: Date, nowIsExplicit: Bool, clock: (any RunClock)? = nil, window: DayWindow? = nil, users: [UUID] = [],
        shard: Shard = .whole, batchSize: Int, concurrency: Int = 1, dryRun: Bool = false,
        dryRunCallsLLM: Bool = false, llmBudget: LLMBudget = LLMBudget()
    ) {
        self.now = now
        self.nowIsExplicit = nowIsExplicit
        self.clock = clock ?? (nowIsExplicit ? FixedClock(now) : SystemClock())
        self.window = window
        self.users = users
        self.shard = shard
        self.batchSize = batchSize
        self.concurrency = concurrency
        self.dryRun = dryRun
        self.dryRunCallsLLM = dryRunCallsLLM
        self.llmBudget = llmBudget
    }

    /// Whether this run calls the LLM at all: always, except a dry run without `--dry-run-llm`.
    public var callsLLM: Bool { !dryRun || dryRunCallsLLM }

    /// What a resumed run must share with the interrupted one: the job, shard, days and users, and
    /// the clock when it matters (an explicit `--now`, or a cron run's real time, which no later
    /// run shares: the next cron run makes a full pass, and the per-user state makes that safe).
    func scopeKey(job: String) -> String {
        let clock: String
        if nowIsExplicit {
            clock = ISO8601DateFormatter().string(from: now)
        } else if window != nil {
            clock = "any"
        } else {
            clock = "cron@" + ISO8601DateFormatter().string(from: now)
        }
        let users = self.users.map { $0.uuidString.lowercased() }.sorted().joined(separator: ",")
        return [job, shard.description, window.map { "\($0.from)..\($0.to)" } ?? "-", users, clock]
            .joined(separator: "|") + (sweep ? "|sweep" : "")
    }

    /// What picks up after this run if it ends early: the same command resumes a run at an
    /// explicit `--now` or a backfill; a cron run's successor makes a full pass.
    var resumeHint: String {
        nowIsExplicit || window != nil
            ? "the same command resumes after the checkpoint"
            : "the next run makes a full pass (the per-user state keeps it from doing anything twice)"
    }

    var ledgerParameters: String {
        var fields: [String: String] = [
            "now": ISO8601DateFormatter().string(from: now),
            "shard": shard.description,
            "batch_size": String(batchSize),
            "concurrency": String(concurrency),
        ]
        if let maxCalls = llmBudget.maxCalls { fields["max_llm_calls"] = String(maxCalls) }
        if let maxTokens = llmBudget.maxTokens { fields["max_llm_tokens"] = String(maxTokens) }
        if dryRunCallsLLM { fields["dry_run_llm"] = "true" }
        if drainFor > .zero { fields["drain_seconds"] = String(Int(drainFor.seconds)) }
        if lanes > 1 { fields["lanes"] = String(lanes) }
        if sweep { fields["sweep"] = "true" }
        if let window {
            fields["from"] = window.from.description
            fields["to"] = window.to.description
        }
        if !users.isEmpty { fields["users"] = users.map { $0.uuidString.lowercased() }.joined(separator: ",") }
        let data = try! JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys])
        return String(decoding: data, as: UTF8.self)
    }
}
