import Foundation
import NudgeCore
import Synchronization

/// A one-line progress bar on a terminal's stderr, redrawn at most ten times a second.
final class ProgressBar: RunObserver {
    private struct State {
        var total: Int?
        var lastDraw = ContinuousClock.now - .seconds(1)
    }
    private let state = Mutex(State())

    func runStarted(runID: Int64, job: String, usersInScope: Int?, resumedFrom: Int64?) {
        state.withLock { $0.total = usersInScope }
        let resumed = resumedFrom.map { ", resuming run \($0)" } ?? ""
        StandardError.write("\(job): run \(runID)\(resumed), \(usersInScope.map { "\($0) users in scope" } ?? "")\n")
    }

    func batchFinished(counts: RunCounts) {
        draw(counts, force: false)
    }

    func runFinished(counts: RunCounts) {
        draw(counts, force: true)
        StandardError.write("\n")
    }

    private func draw(_ counts: RunCounts, force: Bool) {
        let line: String? = state.withLock { state in
            guard force || state.lastDraw.duration(to: .now) > .milliseconds(100) else { return nil }
            state.lastDraw = .now
            let total = max(state.total ?? counts.processed, counts.processed, 1)
            let width = 30
            let filled = min(width, counts.processed * width / total)
            return "\r[\(String(repeating: "#", count: filled))\(String(repeating: " ", count: width - filled))] "
                + "\(counts.processed)/\(total)  changed \(counts.succeeded)  nothing due \(counts.skipped)  failed \(counts.failed)"
        }
        if let line { StandardError.write(line) }
    }

    var wantsUserReports: Bool { false }

    func userDecided(_ report: UserReport) {}
}

/// Every user's decision as JSON on stdout, written as it is made so that memory stays flat: the
/// summary closes the document (`{"decisions":[…],"summary":{…}}`).
final class DecisionStream: RunObserver {
    private struct State {
        var first = true
        /// Set when stdout is closed (`| head`): the run goes on, the stream stops.
        var closed = false
    }
    private let state = Mutex(State())
    private let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }()

    func runStarted(runID: Int64, job: String, usersInScope: Int?, resumedFrom: Int64?) {
        write(Data("{\"decisions\":[".utf8))
    }

    func batchFinished(counts: RunCounts) {}

    func runFinished(counts: RunCounts) {}

    var wantsUserReports: Bool { true }

    func userDecided(_ report: UserReport) {
        guard let data = try? encoder.encode(report) else { return }
        let separator = state.withLock { state in
            defer { state.first = false }
            return state.first ? "" : ","
        }
        write(Data((separator + "\n").utf8) + data)
    }

    private func write(_ data: Data) {
        state.withLock { state in
            guard !state.closed else { return }
            do { try FileHandle.standardOutput.write(contentsOf: data) } catch { state.closed = true }
        }
    }
}

struct CompositeObserver: RunObserver {
    let observers: [any RunObserver]

    func runStarted(runID: Int64, job: String, usersInScope: Int?, resumedFrom: Int64?) {
        for observer in observers { observer.runStarted(runID: runID, job: job, usersInScope: usersInScope, resumedFrom: resumedFrom) }
    }

    func batchFinished(counts: RunCounts) { for observer in observers { observer.batchFinished(counts: counts) } }

    var wantsUserReports: Bool { observers.contains { $0.wantsUserReports } }

    func userDecided(_ report: UserReport) { for observer in observers { observer.userDecided(report) } }

    func runFinished(counts: RunCounts) { for observer in observers { observer.runFinished(counts: counts) } }
}

/// The readable end-of-run summary.
struct SummaryText {
    let summary: RunSummary

    init(_ summary: RunSummary) {
        self.summary = summary
    }

    var text: String {
        guard let runID = summary.runID else {
            return "\(summary.job): not run: \(summary.message ?? "disabled")"
        }
        let counts = summary.counts
        var lines = [
            "\(summary.job): run \(runID) \(summary.status) in \(String(format: "%.1f", summary.seconds)) s"
                + (summary.dryRun ? " (dry run: every write was rolled back)" : "")
                + (summary.resumedFrom.map { ", resumed run \($0)" } ?? ""),
            "  \(summary.noun)s: \(counts.processed) processed, \(counts.succeeded) \(summary.dryRun ? "would change" : "changed"), "
                + "\(counts.skipped) nothing due, \(counts.failed) failed",
        ]
        let outcomes = summary.tally.filter { !$0.key.hasPrefix("notification:") }.sorted { $0.key < $1.key }
        if !outcomes.isEmpty {
            lines.append("  outcomes: " + outcomes.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
        }
        let notifications = summary.tally.filter { $0.key.hasPrefix("notification:") }.sorted { $0.key < $1.key }
        if !notifications.isEmpty {
            lines.append(
                "  notifications \(summary.dryRun ? "that would be queued" : "queued"): "
                    + notifications.map { "\($0.key.dropFirst("notification:".count)) \($0.value)" }.joined(separator: ", "))
        }
        if let message = summary.message { lines.append("  \(message)") }
        if !summary.failures.isEmpty {
            lines.append(
                "  failed \(summary.noun)s\(counts.failed > summary.failures.count ? " (first \(summary.failures.count); all: nudge runs --failures \(runID))" : ""):"
            )
            for failure in summary.failures {
                lines.append("    \(failure.userID.uuidString.lowercased()): \(failure.reason)")
            }
        }
        return lines.joined(separator: "\n")
    }
}
