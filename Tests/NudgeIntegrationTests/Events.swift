import Foundation
import NudgeCore
import NudgeStandIns
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The one bound on every wait of these tests for an event: a stand-in's request, a server's
/// port, a process's end, a session's end. It is far above what any event takes on a loaded
/// machine, so that it decides nothing but "this is never going to happen" (then the wait fails
/// and says what it waited for). `NUDGE_TEST_BUDGET_SECONDS` to see a hang sooner.
enum TestBudget {
    static let seconds = Double(ProcessInfo.processInfo.environment["NUDGE_TEST_BUDGET_SECONDS"] ?? "") ?? 300

    static var deadline: ContinuousClock.Instant { .now + .seconds(seconds) }

    static func exceeded(_ what: String) -> TestFailure {
        TestFailure("waited \(Int(seconds)) s, the tests' budget, for \(what)")
    }
}

/// Returns once `condition` holds, looking again each time one of `changes` changes (never on a
/// timer); fails when the budget ends first.
func until(
    _ what: @autoclosure () -> String, on changes: Changes..., condition: () async throws -> Bool
) async throws {
    try await until(what(), on: changes, condition: condition)
}

/// `until`, with the changes to look at as an array.
func until(
    _ what: @autoclosure () -> String, on changes: [Changes], condition: () async throws -> Bool
) async throws {
    let description = what()
    let wait = Waits.begin(description)
    defer { Waits.end(wait) }
    guard try await happens(before: TestBudget.deadline, on: changes, condition) else { throw TestBudget.exceeded(description) }
}

/// Whether `condition` holds by `deadline`, looked at again each time one of `changes` changes.
func happens(
    before deadline: ContinuousClock.Instant, on changes: [Changes], _ condition: () async throws -> Bool
) async rethrows -> Bool {
    while true {
        let counts = changes.map(\.count)
        if try await condition() { return true }
        guard await firstChange(of: changes, after: counts, before: deadline) else { return try await condition() }
    }
}

/// True once one of `changes` has changed past its count, false when `deadline` comes first.
private func firstChange(of changes: [Changes], after counts: [Int], before deadline: ContinuousClock.Instant) async -> Bool {
    await withTaskGroup(of: Bool.self) { group in
        for (changes, count) in zip(changes, counts) {
            group.addTask {
                await changes.change(after: count)
                return true
            }
        }
        group.addTask {
            try? await Task.sleep(until: deadline, clock: .continuous)   // sleeps: the budget's end
            return false
        }
        let first = await group.next() ?? false
        group.cancelAll()
        return first
    }
}

/// A value that comes once, from a callback (a server's bound port, a task's result), and the
/// tasks awaiting it.
final class Latch<Value: Sendable>: Sendable {
    private let value = Mutex<Value?>(nil)
    let changes = Changes()

    init() {}

    /// Whether the value has been set.
    var isSet: Bool { value.withLock { $0 != nil } }

    /// Sets the value; the first one set stays.
    func set(_ new: Value) {
        let first = value.withLock { value in
            guard value == nil else { return false }
            value = new
            return true
        }
        if first { changes.changed() }
    }

    /// The value, once it is set; nil when `deadline` comes first.
    func value(before deadline: ContinuousClock.Instant) async -> Value? {
        _ = await happens(before: deadline, on: [changes]) { isSet }
        return value.withLock { $0 }
    }

    /// The value, once it is set; fails when the budget ends first.
    func value(_ what: @autoclosure () -> String) async throws -> Value {
        try await until(what(), on: changes) { isSet }
        return value.withLock { $0 }!
    }
}

/// `body`'s value, or nil when it has not ended within `seconds` (the budget unless a test's
/// promise is shorter): for a test whose failure is a wait that never ends. `body` runs in a task
/// of its own, which cannot hold the test with it.
func ending<T: Sendable>(within seconds: Double = TestBudget.seconds, _ body: @escaping @Sendable () async throws -> T) async throws -> T? {
    let outcome = Latch<Result<T, any Error>>()
    let task = Task {
        do {
            outcome.set(.success(try await body()))
        } catch {
            outcome.set(.failure(error))
        }
    }
    guard let ended = await outcome.value(before: .now + .seconds(seconds)) else {
        task.cancel()
        return nil
    }
    return try ended.get()
}

/// The deadline of the next sleeper of `clock` (the one a waiting task set), once one waits;
/// nil when none does within the budget.
func nextSleeper(of clock: ManualWaitClock) async throws -> Duration? {
    try await ending { () async -> Duration? in
        for await deadline in clock.sleepers { return deadline }
        return nil
    } ?? nil
}

/// Returns once the processes `pids` of this machine (a database's sessions, say) have ended,
/// each told by its process file descriptor, awaited on a thread of its own; fails when the
/// budget ends first. A process already gone counts as ended.
func processesEnded(_ pids: [Int32], _ what: @autoclosure () -> String) async throws {
    let description = what()
    guard ProcessEnd.available else { throw TestFailure("pidfd_open is missing from the C library (glibc 2.36 or later has it)") }
    let wait = Waits.begin(description)
    defer { Waits.end(wait) }
    // One deadline for them all, not a budget each.
    let deadline = TestBudget.deadline
    let ended: Bool = await withCheckedContinuation { continuation in
        onThreadOfItsOwn {
            let ended = pids.allSatisfy { ProcessEnd.wait(for: $0, until: deadline) }   // blocks: a thread of its own
            continuation.resume(returning: ended)
        }
    }
    guard ended else { throw TestBudget.exceeded(description) }
}

/// The end of a process that is not this one's child, told by the kernel through a process file
/// descriptor (`pidfd_open`, found at run time: the C library's header is not in Swift's view).
/// The pid is read from a list just before (a database's sessions), so it could in principle be
/// another process's by then: one that outlives the budget fails the wait, never passes it.
private enum ProcessEnd {
    private typealias Open = @convention(c) (pid_t, UInt32) -> Int32

    private static let open: Open? = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "pidfd_open").map { unsafeBitCast($0, to: Open.self) }

    static var available: Bool { open != nil }

    /// Whether `pid` ended (or was gone already) by `deadline`. Blocks its thread.
    static func wait(for pid: Int32, until deadline: ContinuousClock.Instant) -> Bool {
        guard let open else { return false }
        let descriptor = open(pid, 0)
        guard descriptor >= 0 else { return errno == ESRCH }
        defer { close(descriptor) }
        var watched = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            let milliseconds = left <= .zero ? 0 : Int32(min(Double(Int32.max), left / .milliseconds(1) + 1))
            let ready = poll(&watched, 1, milliseconds)   // blocks: processesEnded's own thread
            if ready > 0 { return true }
            if ready == 0 { return false }
            guard errno == EINTR else { return false }
        }
    }
}

/// A named pipe a child process writes one line to when it is ready (a server: its port), and
/// that line, read on a thread of its own: the test learns of the moment, never polls for it.
/// The pipe is open at both ends from the start (Linux opens a pipe for reading and writing at
/// once without waiting), so its reader never waits for a writer that may never come: when the
/// process ends without a word, the test ends the reading itself.
final class ReadyPipe: Sendable {
    let path: String
    private let line = Latch<String>()

    init(in folder: URL) throws {
        path = try namedPipe(in: folder, "ready")
        let descriptor = open(path, O_RDWR)
        guard descriptor >= 0 else { throw TestFailure("open \(path): \(String(cString: strerror(errno)))") }
        let (line, path) = (self.line, self.path)
        onThreadOfItsOwn {
            var read: [UInt8] = []
            readPieces(of: descriptor) { piece in
                read += piece
                return !read.contains(UInt8(ascii: "\n"))
            }
            close(descriptor)
            unlink(path)
            line.set(String(decoding: read.prefix { $0 != UInt8(ascii: "\n") }, as: UTF8.self))
        }
    }

    /// The line `process` wrote, once it has; fails when the process ends first or the budget does.
    func message(_ what: @autoclosure () -> String, from process: RunningProcess) async throws -> String {
        let description = what()
        do {
            try await until(description, on: line.changes, process.end) { line.isSet || process.hasExited }
        } catch {
            wake()
            throw error
        }
        if !line.isSet {
            // The process ended: whatever it wrote before is in the pipe, read before the test's
            // own empty line, which ends the reading.
            wake()
        }
        let said = try await line.value(description)
        guard !said.isEmpty else {
            let result = await process.finished()
            throw TestFailure("the process ended before \(description) (status \(result.status)): \(result.stderr)")
        }
        return said
    }

    /// Ends the reading with an empty line of the test's own, through a descriptor of its own (the
    /// reader's may be closed, and its number another's, by now): the pipe always has its reader,
    /// so the open never waits; once the reader is done the path is gone, and nothing is written.
    private func wake() {
        let writer = open(path, O_WRONLY | O_NONBLOCK)
        guard writer >= 0 else { return }
        _ = "\n".utf8CString.withUnsafeBufferPointer { write(writer, $0.baseAddress, 1) }
        close(writer)
    }
}

/// What a child process writes to a named pipe (its standard error, say), gathered as it comes
/// by a thread of its own, with a change for each piece and one at its end: a test waits for a
/// line, never polls a file for it.
final class StreamedOutput: Sendable {
    let path: String
    let changes = Changes()
    private let state = Mutex<(text: String, ended: Bool)>(("", false))

    init(in folder: URL) throws {
        let path = try namedPipe(in: folder, "output")
        self.path = path
        onThreadOfItsOwn { [self] in
            let descriptor = open(path, O_RDONLY)   // blocks: a thread of its own, until the writer opens the pipe
            unlink(path)
            var pending: [UInt8] = []
            if descriptor >= 0 {
                readPieces(of: descriptor) { piece in
                    pending += piece
                    // Whole characters only: a piece may end inside one.
                    var whole = pending.count
                    if String(validating: pending, as: UTF8.self) == nil {
                        whole = (pending.lastIndex { $0 < 0x80 }).map { $0 + 1 } ?? 0
                    }
                    let text = String(decoding: pending[0..<whole], as: UTF8.self)
                    pending.removeFirst(whole)
                    state.withLock { $0.text += text }
                    changes.changed()
                    return true
                }
                close(descriptor)
            }
            state.withLock {
                $0.text += String(decoding: pending, as: UTF8.self)
                $0.ended = true
            }
            changes.changed()
        }
    }

    /// Everything written so far.
    var text: String { state.withLock { $0.text } }

    /// Whether the writer has closed its end (the process ended).
    var ended: Bool { state.withLock { $0.ended } }

    /// Ends the reading thread when no process will ever open the pipe (it failed to start): a
    /// writer that opens and closes it at once is an end. (Opened for reading and writing, which
    /// never waits; a reader that had not yet begun to wait would wait on, for a process that
    /// failed to start, holding only its own thread.)
    func abandon() {
        let descriptor = open(path, O_RDWR | O_NONBLOCK)
        if descriptor >= 0 { close(descriptor) }
    }
}

/// A named pipe made in `folder`, its name beginning with `prefix`: its path.
private func namedPipe(in folder: URL, _ prefix: String) throws -> String {
    let path = folder.appendingPathComponent("\(prefix)-\(UUID().uuidString)").path
    guard mkfifo(path, 0o600) == 0 else { throw TestFailure("mkfifo \(path): \(String(cString: strerror(errno)))") }
    return path
}

/// Reads `descriptor` a piece at a time (a read cut by a signal is tried again) until its end,
/// or until `piece` answers false. Blocks its thread.
private func readPieces(of descriptor: Int32, _ piece: ([UInt8]) -> Bool) {
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = read(descriptor, &buffer, buffer.count)   // blocks: the caller's own thread
        if count < 0, errno == EINTR { continue }
        guard count > 0, piece(Array(buffer[0..<count])) else { return }
    }
}
