import Foundation
import Logging

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What a run tells monitoring: a Prometheus textfile for node-exporter's textfile collector
/// (`NUDGE_METRICS_DIR`, one file per job and shard) and pings to a healthcheck URL
/// (`NUDGE_HEALTHCHECK_URL_<JOB>`, else `NUDGE_HEALTHCHECK_URL`, in the healthchecks.io style:
/// `URL/start`, `URL` on success, `URL/fail`). A dry run tells monitoring nothing; neither ever
/// fails a run.
public struct RunMonitoring: Sendable {
    public let job: String
    public let shard: Shard
    public let metricsDirectory: URL?
    public let healthcheckURL: URL?
    let dryRun: Bool
    let logger: Logger

    public init(
        environment: Environment, job: String, shard: Shard = .whole, dryRun: Bool = false,
        logger: Logger
    ) throws(NudgeError) {
        self.job = job
        self.shard = shard
        self.dryRun = dryRun
        metricsDirectory = environment["NUDGE_METRICS_DIR"].map { URL(fileURLWithPath: $0, isDirectory: true) }
        let own = "NUDGE_HEALTHCHECK_URL_" + job.uppercased().replacingOccurrences(of: "-", with: "_")
        if let (name, raw) = [own, "NUDGE_HEALTHCHECK_URL"].lazy.compactMap({ name in environment[name].map { (name, $0) } }).first {
            // Its path usually carries the check's secret token: https only (plain http to this
            // machine alone), and never followed elsewhere by a redirect (`ping`).
            guard let url = URL(string: raw), url.host != nil else {
                throw NudgeError(.configuration, "\(name) must be an https URL")
            }
            do {
                try ProviderHTTP.check(raw, name: name)
            } catch {
                throw NudgeError(.configuration, "\(name) must be an https URL (plain http only to this machine: 127.0.0.1, localhost, ::1)")
            }
            healthcheckURL = url
        } else {
            healthcheckURL = nil
        }
        self.logger = logger
    }

    public func runStarting() async {
        guard !dryRun else { return }
        await ping(healthcheckURL?.appendingPathComponent("start"))
    }

    public func runEnded(_ summary: RunSummary) async {
        guard !dryRun, !summary.dryRun else { return }
        writeMetrics(summary)
        // Users failing with bad data (3) and a run finding another one at work (75) are not outages.
        let failed = ![0, 3, 75].contains(summary.exitCode)
        await ping(failed ? healthcheckURL?.appendingPathComponent("fail") : healthcheckURL)
    }

    /// The textfile's name: one per job, and per shard of a sharded job, so that shards running
    /// on one machine never overwrite each other's.
    public var metricsFileName: String {
        let job = self.job.replacingOccurrences(of: "-", with: "_")
        return shard.count == 1 ? "nudge_\(job).prom" : "nudge_\(job)_shard_\(shard.index)_of_\(shard.count).prom"
    }

    /// The metrics of one run, as node-exporter's textfile collector reads them.
    public static func metrics(_ summary: RunSummary, shard: Shard = .whole, endedAt: Date) -> String {
        let job = summary.job
        let labels = "job=\"\(job)\"" + (shard.count == 1 ? "" : ",shard=\"\(shard)\"")
        var lines = [
            "# HELP nudge_run_users Users of the last run of the job, by outcome.",
            "# TYPE nudge_run_users gauge",
            "nudge_run_users{\(labels),outcome=\"processed\"} \(summary.counts.processed)",
            "nudge_run_users{\(labels),outcome=\"changed\"} \(summary.counts.succeeded)",
            "nudge_run_users{\(labels),outcome=\"nothing_due\"} \(summary.counts.skipped)",
            "nudge_run_users{\(labels),outcome=\"failed\"} \(summary.counts.failed)",
            "# HELP nudge_run_seconds How long the last run of the job took.",
            "# TYPE nudge_run_seconds gauge",
            "nudge_run_seconds{\(labels)} \(summary.seconds)",
            "# HELP nudge_run_exit_code The exit status of the last run of the job.",
            "# TYPE nudge_run_exit_code gauge",
            "nudge_run_exit_code{\(labels)} \(summary.exitCode)",
            "# HELP nudge_run_last_end_timestamp_seconds When the last run of the job ended.",
            "# TYPE nudge_run_last_end_timestamp_seconds gauge",
            "nudge_run_last_end_timestamp_seconds{\(labels)} \(Int(endedAt.timeIntervalSince1970))",
            "# HELP nudge_run_outcomes What the last run of the job decided, by outcome.",
            "# TYPE nudge_run_outcomes gauge",
        ]
        for (outcome, count) in summary.tally.sorted(by: { $0.key < $1.key }) {
            lines.append("nudge_run_outcomes{\(labels),outcome=\"\(outcome)\"} \(count)")
        }
        // The job's own (dispatch: its providers), each sample labelled with the run's labels.
        for metric in summary.jobMetrics where metric.isWritable {
            lines += metric.lines(runLabels: labels)
        }
        return lines.joined(separator: "\n") + "\n"
    }

    private func writeMetrics(_ summary: RunSummary) {
        guard let metricsDirectory else { return }
        let target = metricsDirectory.appendingPathComponent(metricsFileName)
        let temporary = metricsDirectory.appendingPathComponent(".\(target.lastPathComponent).\(ProcessInfo.processInfo.processIdentifier)")
        do {
            // Written beside the target and renamed, so the collector never reads half a file.
            // The end time is the wall clock: monitoring asks when the run really ended.
            unlink(temporary.path)   // a crashed run's (a link is removed, never followed)
            try Self.writeNew(temporary.path, Data(Self.metrics(summary, shard: shard, endedAt: Date()).utf8))
            guard rename(temporary.path, target.path) == 0 else {
                throw NudgeError(.configuration, "cannot rename into \(target.path): \(String(cString: strerror(errno)))")
            }
        } catch {
            try? FileManager.default.removeItem(at: temporary)
            logger.warning(
                "could not write the run's metrics",
                metadata: [
                    "nudge.reason": "\(describe(error))",
                    "nudge.path": "\(target.path)",
                ])
        }
    }

    /// Writes `data` to a file that must not exist yet (`O_EXCL`) and is no link (`O_NOFOLLOW`):
    /// in a folder others can write to, a link planted at the temporary name never redirects the
    /// write. Mode 0644 whatever the umask: the collector runs as another user.
    static func writeNew(_ path: String, _ data: Data) throws {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            throw NudgeError(.configuration, "cannot create \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        _ = fchmod(descriptor, 0o644)
        try data.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                guard written > 0 else {
                    if written < 0 && errno == EINTR { continue }
                    throw NudgeError(.configuration, "cannot write \(path): \(String(cString: strerror(errno)))")
                }
                offset += written
            }
        }
    }

    private func ping(_ url: URL?) async {
        guard let url else { return }
        var request = URLRequest(url: url, timeoutInterval: 5)
        request.httpMethod = "POST"
        request.httpBody = Data(job.utf8)
        // A redirect is an answer, never followed: it would carry the check's token elsewhere.
        let session = URLSession(configuration: .ephemeral, delegate: RefuseRedirects(), delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        do {
            let (_, response) = try await session.data(for: request)
            if let status = (response as? HTTPURLResponse)?.statusCode, !(200..<300).contains(status) {
                logger.warning("healthcheck ping refused", metadata: ["nudge.status": "\(status)"])
            }
        } catch {
            // The URL may carry a secret token: log that the ping failed, never where it went.
            logger.warning("healthcheck ping failed", metadata: ["nudge.reason": "\(type(of: error))"])
        }
    }
}

/// Answers every redirect with "do not follow": the 3xx itself is the ping's answer.
private final class RefuseRedirects: NSObject, URLSessionTaskDelegate, Sendable {
    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(nil)
    }
}
