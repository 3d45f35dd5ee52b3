import Foundation
import NudgeStandIns
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A process the tests start, and its end: `posix_spawn` in a process group of its own, its input
/// from /dev/null, its output to pipes or files, and nothing else of this program's (every other
/// descriptor is closed in it); its end is awaited by `waitpid` on a thread of its own.
///
/// Not Foundation's `Process`: the new process inherited every descriptor another thread opened
/// while it was being started (Foundation closes those it saw a moment before), so that one
/// test's `nudge serve` could hold another's pipes or termination socket open, and that process's
/// end went unseen until the first ended; and it learns of each end through one shared thread.
final class Child: Sendable {
    /// Where the process's output goes.
    enum Output {
        /// To two pipes, read by `output()` as the process writes them.
        case pipes
        /// To these files (created or emptied).
        case files(out: URL, err: URL)
    }

    let pid: pid_t
    /// The read ends of its output's pipes, until `output()` takes them.
    private let pipes: Mutex<(out: Int32, err: Int32)?>
    /// The status `waitpid` returned, once it has.
    private let status = Mutex<Int32?>(nil)
    private let ended = DispatchSemaphore(value: 0)   // blocks: waited on only in threads of their own (`waitForEnd`)
    /// One change, when the process has ended: what a test awaits.
    let ends = Changes()

    private init(pid: pid_t, pipes: (out: Int32, err: Int32)?) {
        self.pid = pid
        self.pipes = Mutex(pipes)
    }

    deinit {
        if let pipes = takePipes() {
            close(pipes.out)
            close(pipes.err)
        }
    }

    private func takePipes() -> (out: Int32, err: Int32)? {
        pipes.withLock { pipes in
            defer { pipes = nil }
            return pipes
        }
    }

    /// Starts `executable` (a path: no search) with `arguments` in `environment`.
    static func start(
        _ executable: String, _ arguments: [String], environment: [String: String],
        output: Output
    ) throws -> Child {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // A process group of its own: a signal meant for the tests is not its. And the signals as
        // a new program expects them, not as the thread that starts it has them (Swift's and
        // Dispatch's threads block most; the test program ignores some): none blocked, each
        // handled as by default.
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        posix_spawnattr_setpgroup(&attributes, 0)
        var none = sigset_t()
        var all = sigset_t()
        sigemptyset(&none)
        sigfillset(&all)
        sigdelset(&all, SIGKILL)
        sigdelset(&all, SIGSTOP)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        // Every descriptor above the three is closed in it (below), whoever opened it and when.
        guard let closeFrom = closeFrom else { throw TestFailure("posix_spawn_file_actions_addclosefrom_np is missing (glibc 2.34 or later)") }

        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        var readEnds: [Int32] = []
        var writeEnds: [Int32] = []
        defer { for fd in writeEnds { close(fd) } }
        switch output {
        case .pipes:
            for target: Int32 in [1, 2] {
                var ends: [Int32] = [0, 0]
                // Close-on-exec, for any process this program starts otherwise (a child of these
                // closes every descriptor above the three anyway: below).
                guard pipe(&ends) == 0 else {
                    for fd in readEnds { close(fd) }
                    throw TestFailure("no pipe for \(executable): \(String(cString: strerror(errno)))")
                }
                for fd in ends { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
                readEnds.append(ends[0])
                writeEnds.append(ends[1])
                posix_spawn_file_actions_adddup2(&actions, ends[1], target)
            }
        case .files(let out, let err):
            posix_spawn_file_actions_addopen(&actions, 1, out.path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
            posix_spawn_file_actions_addopen(&actions, 2, err.path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        }
        _ = closeFrom(&actions, 3)

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        // Without what `stdbuf` (scripts/test) gave the test program to make its own output a line
        // at a time.
        var environment = environment
        if environment["LD_PRELOAD"]?.contains("libstdbuf") == true {
            environment["LD_PRELOAD"] = nil
            for key in environment.keys where key.hasPrefix("_STDBUF_") { environment[key] = nil }
        }
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid = pid_t()
        let failure = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard failure == 0 else {
            for fd in readEnds { close(fd) }
            throw TestFailure("could not start \(executable): \(String(cString: strerror(failure)))")
        }
        let child = Child(pid: pid, pipes: readEnds.isEmpty ? nil : (readEnds[0], readEnds[1]))
        onThreadOfItsOwn { [pid] in
            var status: Int32 = 0
            var waited: Int32
            repeat {
                waited = waitpid(pid, &status, 0)   // blocks: a thread of its own
            } while waited == -1 && errno == EINTR
            child.status.withLock { $0 = waited == pid ? status : Child.notWaited }
            child.ended.signal()
            child.ends.changed()
        }
        return child
    }

    /// glibc's `posix_spawn_file_actions_addclosefrom_np`, which Swift's Glibc module leaves out.
    private static let closeFrom: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32)? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
    }()

    /// Whether the process has ended (without waiting for it).
    var hasEnded: Bool { status.withLock { $0 != nil } }

    /// The status noted when `waitpid` failed (the process was not this program's to wait for):
    /// not a status a process can end with.
    private static let notWaited = Int32.min

    /// Sends `signal` to the process, unless it has ended (its number may be another's by now).
    func signal(_ signal: Int32) {
        status.withLock { status in
            if status == nil { kill(pid, signal) }
        }
    }

    /// Its exit status, or the signal that ended it (as Foundation's `terminationStatus`), once it
    /// has ended: blocks until then, so only ever on a thread of its own.
    func waitForEnd() -> Int32 {
        ended.wait()   // blocks: only from a thread of its own
        ended.signal()   // for a later wait
        let status = self.status.withLock { $0! }
        guard status != Self.notWaited else { return -1 }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : signal
    }

    /// What the process wrote to its pipes, to their end (`Output.pipes`): blocks until the
    /// process and any it left behind have closed them, so only ever on a thread of its own.
    func output() -> (out: Data, err: Data) {
        guard let pipes = takePipes() else { return (Data(), Data()) }
        // Both at once, so that a full pipe never blocks the process: the error output on a
        // thread started for it, the output on the caller's own.
        let group = DispatchGroup()   // blocks: only from a thread of its own
        nonisolated(unsafe) var err = Data()
        group.enter()
        onThreadOfItsOwn {
            err = FileHandle(fileDescriptor: pipes.err, closeOnDealloc: true).readDataToEndOfFile()   // blocks: a thread of its own
            group.leave()
        }
        let out = FileHandle(fileDescriptor: pipes.out, closeOnDealloc: true).readDataToEndOfFile()   // blocks: the caller's own thread
        group.wait()   // blocks: only from a thread of its own
        return (out, err)
    }
}
