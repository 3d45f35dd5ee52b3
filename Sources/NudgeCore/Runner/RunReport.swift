import Foundation

/// What a run tells the person or program that started it while it goes.
public protocol RunObserver: Sendable {
    func runStarted(runID: Int64, job: String, usersInScope: Int?, resumedFrom: Int64?)
    func batchFinished(counts: RunCounts)
    /// Whether `userDecided` is wanted: building a report for every user costs time at a million.
    var wantsUserReports: Bool { get }
    /// Every user's decision, for dry-run reports and `--user` runs.
    func userDecided(_ report: UserReport)
    func runFinished(counts: RunCounts)
}

public struct UserReport: Sendable, Codable, Equatable {
    public enum Outcome: String, Sendable, Codable {
        case changed
        case nothingDue = "nothing_due"
        case failed
    }

    public let userID: UUID
    public let outcome: Outcome
    public let detail: String
    public let work: [String]
    public let notifications: [String]

    enum CodingKeys: String, CodingKey {
        case userID = "user_id"
        case outcome, detail, work, notifications
    }
}

/// How a run ended, for the summary line, `--json` and the exit status.
public struct RunSummary: Sendable, Codable {
    public let runID: Int64?
    public let job: String
    public let status: String
    public let dryRun: Bool
    public let counts: RunCounts
    /// Outcome names and how often they occurred ("kept": 812, "notification:streak_at_risk": 40).
    public let tally: [String: Int]
    public let resumedFrom: Int64?
    public let seconds: Double
    /// Some of the users that failed, with their reasons (all of them are in `job_run_failures`).
    public let failures: [Failure]
    public let message: String?
    public let exitCode: Int32
    /// What the run's items are ("user", "circle"): what its counts count.
    public var noun: String = "user"
    /// The job's own gauges for the run's metrics textfile (`RunReports.runMetrics`); not in `--json`.
    public var jobMetrics: [RunMetric] = []

    public struct Failure: Sendable, Codable {
        public let userID: UUID
        public let reason: String

        enum CodingKeys: String, CodingKey {
            case userID = "user_id"
            case reason
        }
    }

    enum CodingKeys: String, CodingKey {
        case runID = "run_id"
        case job, status
        case dryRun = "dry_run"
        case counts, tally
        case resumedFrom = "resumed_from"
        case
            seconds, failures, message
        case exitCode = "exit_code"
        case noun
    }

    /// The status of several runs together (`nudge run --all`): 1 when any could not run or was
    /// aborted (or misused, 64), else 3 when any had failed users, else 75 when any found its lock
    /// held, else 0.
    public static func combinedExitCode(_ summaries: [RunSummary]) -> Int32 {
        let codes = Set(summaries.map(\.exitCode))
        if codes.contains(1) { return 1 }
        return [64, 3, 75].first { codes.contains($0) } ?? (codes.subtracting([0]).first ?? 0)
    }

    /// A run that did not start because a kill switch is off: exit 0, nothing written.
    public static func disabled(job: String, reason: String) -> RunSummary {
        ended(job: job, status: "disabled", exitCode: 0, message: reason)
    }

    /// A run that ended before it had a ledger row: disabled, locked out, or unable to start.
    public static func ended(job: String, status: String = "failed", exitCode: Int32, message: String) -> RunSummary {
        RunSummary(
            runID: nil, job: job, status: status, dryRun: false, counts: RunCounts(), tally: [:],
            resumedFrom: nil, seconds: 0, failures: [], message: message, exitCode: exitCode)
    }
}
