import ArgumentParser
import Foundation
import Logging
import NudgeCore

struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run one job now.",
        discussion: """
            Cron runs each job more often than it acts; the job asks, per user, whether its local \
            moment is due and not yet done, so reruns and overlapping schedules change nothing twice. \
            Backfill with --date or --from/--to. SIGTERM or Ctrl-C finishes the batch in flight, \
            records the checkpoint and exits; the same command resumes after it.
            """)

    @Argument(help: "The job to run (`nudge list` shows them).")
    var job: String?

    @Flag(help: "Run every enabled job in turn and report on them together (CI's nightly `--all --dry-run --json`).")
    var all = false

    @Option(help: "The instant the run believes it is, ISO 8601 with a zone (default: now).")
    var now: String?

    @Option(help: "Backfill one local day, YYYY-MM-DD.")
    var date: String?

    @Option(help: "Backfill local days from this one (with --to), YYYY-MM-DD.")
    var from: String?

    @Option(help: "Backfill local days up to this one, inclusive (with --from), YYYY-MM-DD.")
    var to: String?

    @Option(name: .customLong("user"), help: "Only this user (a uuid); repeatable.")
    var users: [String] = []

    @Option(help: "Only the users of shard i of n (0 <= i < n), for example 0/4.")
    var shard: String?

    @Option(help: "Users per batch (default: the job's, usually 50).")
    var batchSize: Int?

    @Option(
        help:
            "How many users of a batch are worked on at once, for jobs that call outside services (push-trigger's LLM, dispatch's pushes; default: the job's, else 1)."
    )
    var concurrency: Int?

    @Option(
        help:
            "How long a run of a queue job (dispatch) keeps draining what falls due, in seconds (default: the job's; 0: one pass). A run at --now drains what is due at that instant and ends."
    )
    var drainSeconds: Int?

    @Option(help: "How many batches a run of a queue job (dispatch) works on at once, each claimed on its own database connection (default: the job's).")
    var lanes: Int?

    @Flag(help: "Decide and write inside each batch's transaction, then roll back: nothing is written or queued.")
    var dryRun = false

    @Flag(help: "With --dry-run: still ask the LLM for each push's copy (nothing is written or sent either way).")
    var dryRunLlm = false

    @Flag(
        help: ArgumentHelp(
            "Read every user, due or not, to prove the due index right (the weekly safety sweep of the jobs that read it).",
            discussion: "What it finds due that the index had not is done, logged at error level and counted as index_missed."))
    var sweep = false

    @Option(help: "Stop the run cleanly once it has made this many LLM calls.")
    var maxLlmCalls: Int?

    @Option(help: "Stop the run cleanly once its LLM calls have used this many tokens (input and output).")
    var maxLlmTokens: Int?

    @Flag(help: "Print a machine-readable summary on stdout (with every user's decision on a dry run of one job).")
    var json = false

    @Option(
        help: ArgumentHelp(
            "Exit 0 instead of these statuses (3, 75 or both, comma-separated), for schedulers that retry or stop on any other.",
            discussion: "Kubernetes counts a pod that exits 3 (some users failed, recorded) or 75 (another run holds the lock) as failed."))
    var exitZeroOn: String?

    /// The statuses `--exit-zero-on` turns into 0.
    private var zeroedStatuses: Set<Int32> {
        Set((exitZeroOn ?? "").split(separator: ",").compactMap { Int32($0.trimmingCharacters(in: .whitespaces)) })
    }

    func validate() throws {
        if (job == nil) == !all { throw ValidationError("name one job, or --all") }
        if let exitZeroOn {
            let codes = exitZeroOn.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard !codes.isEmpty, codes.allSatisfy({ $0 == "3" || $0 == "75" }) else {
                throw ValidationError("--exit-zero-on takes 3, 75 or 3,75: a run that was aborted (1) or misused (64) always says so")
            }
        }
        if date != nil && (from != nil || to != nil) { throw ValidationError("--date cannot be combined with --from/--to") }
        if (from == nil) != (to == nil) { throw ValidationError("--from and --to go together") }
        if let batchSize, !(1...10_000).contains(batchSize) { throw ValidationError("--batch-size must be between 1 and 10000") }
        if let concurrency, !(1...1_000).contains(concurrency) { throw ValidationError("--concurrency must be between 1 and 1000") }
        if let drainSeconds, !(0...3_600).contains(drainSeconds) { throw ValidationError("--drain-seconds must be between 0 and 3600") }
        if let lanes, !(1...64).contains(lanes) { throw ValidationError("--lanes must be between 1 and 64") }
        if dryRunLlm && !dryRun { throw ValidationError("--dry-run-llm goes with --dry-run") }
        if sweep && (date != nil || from != nil || !users.isEmpty) {
            throw ValidationError("--sweep reads every user at the run's instant: it takes no --date, --from/--to or --user")
        }
        if let maxLlmCalls, maxLlmCalls < 1 { throw ValidationError("--max-llm-calls must be at least 1") }
        if let maxLlmTokens, maxLlmTokens < 1 { throw ValidationError("--max-llm-tokens must be at least 1") }
    }

    func run() async throws {
        do {
            let (bootstrap, definitions) = try await reportingFailures { () -> (Bootstrap, [JobDefinition]) in
                let bootstrap = try Bootstrap.make()
                return (bootstrap, try job.map { [try bootstrap.definition($0)] } ?? bootstrap.catalog.definitions)
            }
            let exitCode: Int32
            if all {
                exitCode = try await runEveryJob(definitions, bootstrap: bootstrap)
            } else {
                let summary = try await reportingFailures { try await runOne(definitions[0], bootstrap: bootstrap) }
                finish(summary)
                exitCode = summary.exitCode
            }
            if exitCode != 0 { throw ExitCode(exitCode) }
        } catch let status as ExitCode where zeroedStatuses.contains(status.rawValue) {
            // The status is in the ledger, the logs and the metrics; the scheduler sees success.
            return
        }
    }

    /// `--all`: every job in turn, each as if run alone, then one report. A job that cannot run
    /// (a bad configuration, the database gone) is reported with its error and the next one runs.
    private func runEveryJob(_ definitions: [JobDefinition], bootstrap: Bootstrap) async throws -> Int32 {
        var summaries: [RunSummary] = []
        for definition in definitions {
            let summary: RunSummary
            do {
                summary = try await runOne(definition, bootstrap: bootstrap)
            } catch let error as ValidationError {
                throw error
            } catch {
                StandardError.write("nudge: error: \(definition.name): \(describe(error))\n")
                summary = .ended(job: definition.name, exitCode: exitStatus(for: error), message: describe(error))
            }
            summaries.append(summary)
            if summary.status == RunStatus.interrupted.rawValue { break }
        }
        let exitCode = RunSummary.combinedExitCode(summaries)
        if json {
            print(Self.json(CombinedReport(exitCode: exitCode, dryRun: dryRun, jobs: summaries)))
        } else {
            print(summaries.map { SummaryText($0).text }.joined(separator: "\n"))
            print("every job: exit \(exitCode)" + (dryRun ? " (dry runs: nothing was written or sent)" : ""))
        }
        return exitCode
    }

    /// One job's run, from its kill switch to its monitoring.
    private func runOne(_ definition: JobDefinition, bootstrap: Bootstrap) async throws -> RunSummary {
        let name = definition.name
        var runOptions = try runOptions(definition: definition)
        runOptions.shutdownGrace = .seconds(try bootstrap.environment.integer("NUDGE_SHUTDOWN_GRACE_SECONDS", default: 20, in: 0...30))
        if let reason = try killSwitchReason(definition, bootstrap.environment) {
            bootstrap.logger.notice("job disabled by its kill switch", metadata: ["nudge.job": "\(name)", "nudge.reason": "\(reason)"])
            return .disabled(job: name, reason: reason)
        }
        let monitoring = try RunMonitoring(
            environment: bootstrap.environment, job: name, shard: runOptions.shard,
            dryRun: runOptions.dryRun, logger: bootstrap.logger)
        // A job's own metrics may cost it a statement: read only when they are written.
        runOptions.readsJobMetrics = monitoring.metricsDirectory != nil
        let options = runOptions
        let limits = try DatabaseLimits.forJobs(bootstrap.environment)
        let migrator = try Migrator(directory: bootstrap.home.migrationsDirectory)
        let observer = makeObserver()
        await monitoring.runStarting()
        do {
            let setup = JobSetup(definition: definition, environment: bootstrap.environment, options: options)
            let summary = try await JobRegistry.withJob(setup) { implementation in
                try await bootstrap.withDatabase(
                    "run \(name)", limits: limits, stopOnSignals: true,
                    connections: max(4, options.lanes + 2)
                ) { database in
                    let pending = try await migrator.pending(database)
                    guard pending.isEmpty else {
                        throw NudgeError(.configuration, "the database lacks \(pending.joined(separator: ", ")): run `nudge migrate` first")
                    }
                    try await database.refuseRoleThatMayCreateOnItsPath(command: "run \(name)")
                    return try await runJob(implementation, options: options, database: database, observer: observer)
                }
            }
            await monitoring.runEnded(summary)
            return summary
        } catch {
            await monitoring.runEnded(.ended(job: name, exitCode: exitStatus(for: error), message: describe(error)))
            throw error
        }
    }

    private func runJob<J: Job>(_ job: J, options: RunOptions, database: Database, observer: any RunObserver) async throws -> RunSummary {
        try await JobRunner(job: job, options: options, database: database, observer: observer).run()
    }

    private func runOptions(definition: JobDefinition) throws -> RunOptions {
        let window: DayWindow?
        do {
            if let date {
                let day = try parseDay(date, option: "--date")
                window = try DayWindow(from: day, to: day)
            } else if let from, let to {
                window = try DayWindow(from: try parseDay(from, option: "--from"), to: try parseDay(to, option: "--to"))
            } else {
                window = nil
            }
        } catch let error as NudgeError {
            throw ValidationError(error.message)
        }
        let userIDs = try users.map { text in
            guard let id = UUID(uuidString: text) else { throw ValidationError("--user must be a uuid, not '\(text)'") }
            return id
        }
        var parsedShard = Shard.whole
        if let shard {
            do { parsedShard = try Shard(shard) } catch { throw ValidationError(error.message) }
        }
        var options = RunOptions(
            now: try now.map { try parseInstant($0, option: "--now") } ?? Date(),
            nowIsExplicit: now != nil, window: window, users: userIDs, shard: parsedShard,
            batchSize: batchSize ?? definition.batchSize, concurrency: concurrency ?? definition.concurrency ?? 1,
            dryRun: dryRun, dryRunCallsLLM: dryRunLlm, llmBudget: LLMBudget(maxCalls: maxLlmCalls, maxTokens: maxLlmTokens))
        options.drainFor = .seconds(drainSeconds ?? definition.drainSeconds ?? 0)
        options.lanes = lanes ?? definition.lanes ?? 1
        options.sweep = sweep
        return options
    }

    /// NUDGE_ENABLED=false stops every job; <JOB>_ENABLED=false stops this one. Both are read
    /// before the database is touched, so a disabled job changes nothing at all.
    private func killSwitchReason(_ definition: JobDefinition, _ environment: Environment) throws -> String? {
        if try !environment.flag("NUDGE_ENABLED", default: true) { return "NUDGE_ENABLED is false" }
        if try !environment.flag(definition.killSwitch, default: definition.enabledByDefault) {
            return environment[definition.killSwitch] == nil
                ? "\(definition.killSwitch) is not set and \(definition.name) ships disabled"
                : "\(definition.killSwitch) is false"
        }
        return nil
    }

    /// Whether `--json` streams every user's decision before the summary: a dry run or a run of
    /// chosen users, of one job (`--all` reports per job only).
    private var streamsDecisions: Bool { json && !all && (dryRun || !users.isEmpty) }

    private func makeObserver() -> any RunObserver {
        var observers: [any RunObserver] = []
        if StandardError.isTerminal && !json { observers.append(ProgressBar()) }
        if streamsDecisions { observers.append(DecisionStream()) }
        return observers.isEmpty ? SilentObserver() : CompositeObserver(observers: observers)
    }

    private func finish(_ summary: RunSummary) {
        if json {
            let body = Self.json(summary)
            print(streamsDecisions && summary.runID != nil ? "],\"summary\":\(body)}" : body)
        } else {
            print(SummaryText(summary).text)
        }
    }

    private static func json(_ value: some Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        return String(decoding: (try? encoder.encode(value)) ?? Data("{}".utf8), as: UTF8.self)
    }
}

/// The report of `nudge run --all --json`: every job's summary, and the status of them together.
struct CombinedReport: Encodable {
    let exitCode: Int32
    let dryRun: Bool
    let jobs: [RunSummary]

    enum CodingKeys: String, CodingKey {
        case exitCode = "exit_code"
        case dryRun = "dry_run"
        case jobs
    }
}
