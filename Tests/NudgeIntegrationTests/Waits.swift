import Foundation
import Synchronization
import Testing

/// What the tests are waiting for at this moment: each wait on something outside the test's own
/// code (a script of TestSQL's, a process, a slot, a job run in this process) is noted while it
/// lasts, with the test it waits for. When one has lasted far longer than any should, the test
/// program prints them all, oldest first, with its child processes: a wait that never ends names
/// itself, instead of leaving a silent process for `scripts/test` to end at its bound.
enum Waits {
    private struct Entry {
        let what: String
        let test: String
        let since: ContinuousClock.Instant
    }

    private static let table = Mutex<(next: Int, entries: [Int: Entry])>((0, [:]))

    /// How old a wait may grow before the watch prints them all: far above any test's time, so
    /// that only a wait that is not going to end is reported (`NUDGE_TEST_WAITS_REPORT_AFTER`,
    /// seconds, to see it sooner).
    static let reportAfter = Double(ProcessInfo.processInfo.environment["NUDGE_TEST_WAITS_REPORT_AFTER"] ?? "") ?? 600

    /// The watch, a thread of its own started by the first wait noted: it looks at the waits every
    /// few seconds and prints them when the oldest has grown past `reportAfter`, once for each
    /// oldest wait. (A thread of its own: in a test program that hangs, Swift's cooperative
    /// threads may be what is stuck; and not a signal, which Dispatch on Linux receives only when
    /// every thread blocks it.)
    private static let watching: Bool = {
        let thread = Thread {
            var reported = 0
            while true {
                Thread.sleep(forTimeInterval: min(max(reportAfter / 4, 1), 30))   // blocks: the watch's own thread
                let oldest = table.withLock { $0.entries.min { $0.value.since < $1.value.since } }
                guard let (id, entry) = oldest, id != reported,
                    entry.since.duration(to: .now) > .seconds(reportAfter)
                else { continue }
                reported = id
                FileHandle.standardError.write(Data(report().utf8))
            }
        }
        thread.stackSize = 1 << 20
        thread.start()
        return true
    }()

    /// Notes `what` as waited for, by `test` (the current one unless named), until `end` is
    /// called with the number returned.
    static func begin(_ what: @autoclosure () -> String, test: String? = nil) -> Int {
        _ = watching
        let entry = Entry(what: what(), test: test ?? Test.current?.name ?? "(no test)", since: .now)
        return table.withLock { table in
            table.next += 1
            table.entries[table.next] = entry
            return table.next
        }
    }

    static func end(_ id: Int) {
        _ = table.withLock { $0.entries.removeValue(forKey: id) }
    }

    /// The waits in progress, oldest first, and this process's children.
    static func report() -> String {
        let now = ContinuousClock.now
        let entries = table.withLock { $0.entries.values.sorted { $0.since < $1.since } }
        var lines = ["== Waits: \(entries.count) in progress in the test program (pid \(getpid())), oldest first"]
        for entry in entries {
            let seconds = Int(entry.since.duration(to: now).components.seconds)
            lines.append("  \(seconds) s  \(entry.test): \(entry.what)")
        }
        lines.append("== its child processes")
        let me = getpid()
        for pid in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] where Int32(pid) != nil {
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { continue }
            let fields = stat[close...].dropFirst(2).split(separator: " ")
            guard fields.count > 2, Int32(fields[1]) == me else { continue }
            let command =
                (try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8))?
                .replacingOccurrences(of: "\0", with: " ") ?? ""
            lines.append("  \(pid) \(fields[0]) \(command.prefix(160))")
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
