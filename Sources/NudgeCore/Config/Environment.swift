import Foundation

/// Nudge's configuration, read from the process environment through this one type so that every
/// variable is named in one place and a bad value gets an error naming the variable.
public struct Environment: Sendable {
    public let values: [String: String]

    public init(_ values: [String: String] = ProcessInfo.processInfo.environment) {
        self.values = values
    }

    public subscript(name: String) -> String? {
        guard let value = values[name], !value.isEmpty else { return nil }
        return value
    }

    public func require(_ name: String, hint: String) throws(NudgeError) -> String {
        guard let value = self[name] else {
            throw NudgeError(.configuration, "\(name) is not set: \(hint)")
        }
        return value
    }

    /// A boolean switch: true/false, 1/0, yes/no, on/off; `defaultValue` when unset.
    public func flag(_ name: String, default defaultValue: Bool) throws(NudgeError) -> Bool {
        guard let raw = self[name] else { return defaultValue }
        switch raw.lowercased() {
        case "1", "true", "yes", "on": return true
        case "0", "false", "no", "off": return false
        default: throw NudgeError(.configuration, "\(name) must be true or false, not '\(raw)'")
        }
    }

    /// A whole number within `range`; `defaultValue` when unset.
    public func integer(_ name: String, default defaultValue: Int, in range: ClosedRange<Int>) throws(NudgeError) -> Int {
        guard let text = self[name] else { return defaultValue }
        guard let number = Int(text), range.contains(number) else {
            throw NudgeError(.configuration, "\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound), not '\(text)'")
        }
        return number
    }

    /// The switch variable for a job: `validate-streaks` → `VALIDATE_STREAKS_ENABLED`.
    public static func killSwitchName(forJob job: String) -> String {
        job.uppercased().replacingOccurrences(of: "-", with: "_") + "_ENABLED"
    }
}
