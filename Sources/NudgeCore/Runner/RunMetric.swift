import Foundation

/// A gauge a job adds to its run's metrics textfile (`RunReports.runMetrics`), besides the runner's own
/// `nudge_run_*`: its name, what it measures, and its samples with their labels. The runner
/// writes each sample with the run's own labels first (`job`, and `shard` for a sharded run), so
/// that the files of two shards never hold the same series (docs/operations.md, "Monitoring").
public struct RunMetric: Sendable, Equatable {
    public struct Sample: Sendable, Equatable {
        /// The sample's labels besides the run's; written in the order of their names.
        public let labels: [String: String]
        public let value: Double

        public init(_ labels: [String: String], _ value: Double) {
            self.labels = labels
            self.value = value
        }
    }

    public let name: String
    public let help: String
    public let samples: [Sample]

    public init(name: String, help: String, samples: [Sample]) {
        self.name = name
        self.help = help
        self.samples = samples
    }

    /// Whether node-exporter can read it beside the runner's lines: a metric name and label names
    /// as Prometheus spells them, none of the runner's (`nudge_run_*`, `job`, `shard`). A file
    /// with one bad line is dropped whole by the collector, the run's own metrics with it, so
    /// the runner leaves out a metric that is not.
    public var isWritable: Bool {
        Self.isName(name, colons: true) && !name.hasPrefix("nudge_run_")
            && samples.allSatisfy { sample in
                sample.labels.keys.allSatisfy { Self.isName($0, colons: false) && !["job", "shard"].contains($0) && !$0.hasPrefix("__") }
            }
    }

    /// The metric's lines in the text exposition format, each sample's labels after `runLabels`
    /// (`job="dispatch"`, and `,shard="0/2"` for a shard).
    func lines(runLabels: String) -> [String] {
        var lines = ["# HELP \(name) \(Self.escapeHelp(help))", "# TYPE \(name) gauge"]
        for sample in samples {
            let own = sample.labels.sorted { $0.key < $1.key }.map { "\($0.key)=\"\(Self.escapeLabel($0.value))\"" }
            lines.append("\(name){\(([runLabels] + own).joined(separator: ","))} \(Self.format(sample.value))")
        }
        return lines
    }

    private static func isName(_ text: String, colons: Bool) -> Bool {
        guard let first = text.unicodeScalars.first else { return false }
        func allowed(_ scalar: Unicode.Scalar, digits: Bool) -> Bool {
            (scalar >= "a" && scalar <= "z") || (scalar >= "A" && scalar <= "Z") || scalar == "_"
                || (colons && scalar == ":") || (digits && scalar >= "0" && scalar <= "9")
        }
        return allowed(first, digits: false) && text.unicodeScalars.dropFirst().allSatisfy { allowed($0, digits: true) }
    }

    static func escapeHelp(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\n", with: "\\n")
    }

    static func escapeLabel(_ text: String) -> String {
        escapeHelp(text).replacingOccurrences(of: "\"", with: "\\\"")
    }

    /// A whole number as one (`1200`, not `1200.0`); Prometheus's spellings of the rest.
    static func format(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return "\(value)"
    }
}
