import Foundation
import Logging
import Synchronization

/// One JSON object per line on stderr, for cron, journald and log shippers. Metadata keys are
/// the dotted `nudge.*` names; values are strings.
public struct JSONLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    public var logLevel: Logger.Level
    private let label: String

    public init(label: String, level: Logger.Level) {
        self.label = label
        self.logLevel = level
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var fields: [String: String] = [
            "ts": Self.timestamp(),
            "level": event.level.rawValue,
            "msg": event.message.description,
            "logger": label,
        ]
        for (key, value) in metadata { fields[key] = value.description }
        for (key, value) in metadataProvider?.get() ?? [:] { fields[key] = value.description }
        for (key, value) in event.metadata ?? [:] { fields[key] = value.description }
        if let error = event.error { fields["error"] = String(describing: error) }
        guard let data = try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys, .withoutEscapingSlashes])
        else { return }
        StandardError.write(String(decoding: data, as: UTF8.self) + "\n")
    }

    private static func timestamp() -> String {
        // Log lines carry the wall-clock time they were written, not the run's logical clock.
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: Date())
    }
}

/// Short readable lines for a person at a terminal.
public struct TerminalLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    public var logLevel: Logger.Level

    public init(level: Logger.Level) {
        self.logLevel = level
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let details = (event.metadata ?? [:]).sorted { $0.key < $1.key }
            .map { "\($0.key.replacingOccurrences(of: "nudge.", with: ""))=\($0.value)" }
            .joined(separator: " ")
        StandardError.write("\(event.level.rawValue): \(event.message)\(details.isEmpty ? "" : "  " + details)\n")
    }
}

/// Writes to stderr from any thread without interleaving partial lines. A closed stderr (a
/// reader that went away) loses the text, never the run.
public enum StandardError {
    private static let lock = Mutex(())

    public static func write(_ text: String) {
        lock.withLock { _ in try? FileHandle.standardError.write(contentsOf: Data(text.utf8)) }
    }

    public static var isTerminal: Bool { isatty(STDERR_FILENO) == 1 }
}
