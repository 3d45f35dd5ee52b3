import Foundation
import Logging
import NIOCore
import NIOPosix
import NudgeStandIns
import Synchronization
import Testing

@testable import NudgeCore

/// The checkout these tests live in: the `nudge` binary is in its .build, its jobs/ and db/ beside.
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// The PostgreSQL server `scripts/test` started for this test run.
enum TestServer {
    static let url: String? = ProcessInfo.processInfo.environment["NUDGE_TEST_DATABASE_URL"]

    static func serverURL() throws -> String {
        guard let url else {
            throw TestFailure("NUDGE_TEST_DATABASE_URL is not set: run the tests with scripts/test, which starts a private PostgreSQL")
        }
        return url
    }

    /// One migrated template per test process; each test clones it, which takes milliseconds.
    static let template = Template()

    /// Built once, by whichever test asks first; the others await the same task (an actor alone
    /// would let a second caller in while the first awaits the migration).
    actor Template {
        private var creation: Task<String, any Error>?

        func ensure() async throws -> String {
            if let creation { return try await creation.value }
            let creation = Task { try await Self.create() }
            self.creation = creation
            return try await creation.value
        }

        private static func create() async throws -> String {
            let name = "nudge_template_\(ProcessInfo.processInfo.processIdentifier)"
            let admin = try TestDatabase(named: "postgres")
            try await admin.psql("drop database if exists \(name)")
            try await admin.psql("create database \(name)")
            let template = try TestDatabase(named: name)
            let result = try await template.nudge(["migrate"])
            guard result.status == 0 else { throw TestFailure("migrating the template failed: \(result.stderr)") }
            return name
        }
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// One database on the test server.
struct TestDatabase: Sendable {
    let name: String
    let url: String
    /// The one session this copy's SQL goes through, inside `pinned` or `rolledBack`.
    private var session: TestSQL.Pinned?
    /// Inside `rolledBack`: each call in a savepoint of the test's transaction, and nothing that
    /// would leave it (another session, a process) allowed.
    private var inTransaction = false

    init(named name: String) throws {
        let server = try TestServer.serverURL()
        guard let range = server.range(of: "/nudge?") else { throw TestFailure("unexpected test server URL \(server)") }
        self.name = name
        self.url = server.replacingCharacters(in: range, with: "/\(name)?")
    }

    /// A new database with the schema in place (one made ahead, `TestServer.warm`), or empty,
    /// for migration tests; dropped when the test ends (`DropsItsDatabases`).
    static func fresh(migrated: Bool = true) async throws -> TestDatabase {
        if migrated {
            let name = try await TestServer.warm.take()
            MadeDatabases.note(name)
            return try TestDatabase(named: name)
        }
        let name = "nudge_t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16).lowercased()
        try await TestDatabase(named: "postgres").psql("create database \(name)")
        MadeDatabases.note(name)
        return try TestDatabase(named: name)
    }

    /// A copy of this database as it stands (no session may be connected to it meanwhile), made
    /// a few at a time.
    func clone() async throws -> TestDatabase {
        try outsideTheTransaction("clone")
        let name = "nudge_t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16).lowercased()
        let slot = await ProcessSlots.shared.acquire("create database \(name) template \(self.name)")
        defer { Task { await ProcessSlots.shared.release(slot) } }
        await TestSQL.closeIdle(url)
        try await TestDatabase(named: "postgres").psql("create database \(name) template \(self.name)")
        MadeDatabases.note(name)
        return try TestDatabase(named: name)
    }

    /// This database's URL as `role` (one of deploy/sql/roles.sql's, or one a test made) in
    /// place of the owner of Nudge's tables.
    func url(as role: String) -> String {
        url.replacingOccurrences(of: "postgres://nudge@", with: "postgres://\(role)@")
    }

    /// deploy/sql/roles.sql run on this database as `role` (the owner of Nudge's tables unless
    /// a test says otherwise): psql's status and output.
    func applyRoles(as role: String = "nudge") async throws -> ProcessResult {
        try await runScript("deploy/sql/roles.sql", as: role)
    }

    /// A psql script of the repository (`path` from its root; one with psql's own commands and
    /// `variables`, as the operators and benchmarks run it) on this database as `role`, through
    /// psql off Swift's cooperative threads: its status and output. The tests' own SQL goes
    /// through `psql(_:)` instead: this is the one place a test starts psql.
    func runScript(_ path: String, variables: [String: String] = [:], as role: String = "nudge") async throws -> ProcessResult {
        try outsideTheTransaction("runScript")
        let settings = variables.sorted { $0.key < $1.key }.flatMap { ["-v", "\($0.key)=\($0.value)"] }
        return try await runProcessOffThePool(
            "/usr/bin/psql",
            ["-X", "-q", "-v", "ON_ERROR_STOP=1"] + settings
                + [url(as: role), "-f", packageRoot.appendingPathComponent(path).path])
    }

    /// Runs SQL (one statement or a script of several, in one transaction) and returns its rows
    /// as `psql -At` prints them (`|` between columns), through TestSQL: in this process, holding
    /// no thread while it waits.
    @discardableResult
    func psql(_ sql: String) async throws -> String {
        guard let session else { return try await TestSQL.run(sql, url: url).trimmingCharacters(in: .newlines) }
        guard inTransaction else { return try await session.run(sql).trimmingCharacters(in: .newlines) }
        // A call is as a session of its own would be: what it did stays for the test, but a
        // refused statement leaves the transaction usable for the next call.
        _ = try await session.run("savepoint call")
        do {
            let rows = try await session.run(sql)
            _ = try await session.run("release savepoint call")
            return rows.trimmingCharacters(in: .newlines)
        } catch {
            _ = try? await session.run("rollback to savepoint call; release savepoint call")
            throw error
        }
    }

    /// Refuses what would leave a rolled-back test's transaction (another session, a process):
    /// on the shared database it would commit, and every later test would see it.
    private func outsideTheTransaction(_ what: String) throws {
        if inTransaction { throw TestFailure("\(what) is not for a rolled-back test (TestDatabase.rolledBack): it would commit on the shared database") }
    }

    /// `body` with the one migrated database the whole test run shares, its SQL (`psql`, `value`,
    /// `count`) inside a transaction of its own that is rolled back after it: the tier for a test
    /// of the schema or of a query's shape, which needs no database of its own (none is copied,
    /// none dropped). What `body` writes no other test sees, and is gone after it; it must not
    /// run `nudge` or a job on it (they would not see its transaction).
    /// A few at a time, each on a session of its own, bounded like any of TestSQL's scripts. Never
    /// one inside another (four waiting for a fifth would wait for ever), and a script that ends
    /// the transaction itself (`commit`) is not for it.
    static func rolledBack<T: Sendable>(_ body: (TestDatabase) async throws -> T) async throws -> T {
        var copy = try await TestServer.shared.database()
        let slot = await TestServer.rolledBackSlots.acquire("a rolled-back test on \(copy.name)")
        defer { Task { await TestServer.rolledBackSlots.release(slot) } }
        let session = try await TestSQL.Pinned(url: copy.url, mode: .held)
        copy.session = session
        copy.inTransaction = true
        do {
            _ = try await session.run("begin; set local statement_timeout = '\(TestSQL.statementBound)'; set local lock_timeout = '\(TestSQL.statementBound)'")
            let value = try await body(copy)
            _ = try? await session.run("rollback")
            await session.end()
            return value
        } catch {
            _ = try? await session.run("rollback")
            await session.end()
            throw error
        }
    }

    /// `body` with a copy of this database whose SQL (`psql`, `value`, `count`) goes through one
    /// session, ended after it: for a scenario's loop of thousands of calls, which would otherwise
    /// each start and end a session of the server's. Everything else (the jobs it runs, `nudge`)
    /// is as before.
    func pinned<T: Sendable>(_ body: (TestDatabase) async throws -> T) async throws -> T {
        var copy = self
        let session = try await TestSQL.Pinned(url: url, mode: .pinned)
        copy.session = session
        do {
            let value = try await body(copy)
            await session.end()
            return value
        } catch {
            await session.end()
            throw error
        }
    }

    func value(_ sql: String) async throws -> String { try await psql(sql) }

    /// `sql` run as `role` (the owner of Nudge's tables unless told), for a test that expects it
    /// may be refused: status 0 and the rows, or 1 and the server's error as psql prints it.
    func attempt(_ sql: String, as role: String = "nudge") async -> ProcessResult {
        if inTransaction {
            Issue.record("attempt(_:as:) is not for a rolled-back test (TestDatabase.rolledBack): it runs on a session of its own")
            return ProcessResult(status: 2, stdout: "", stderr: "attempt(_:as:) is not for a rolled-back test")
        }
        do {
            return ProcessResult(status: 0, stdout: try await TestSQL.run(sql, url: url(as: role)), stderr: "")
        } catch let refused as TestSQL.Refused {
            return ProcessResult(status: 1, stdout: "", stderr: refused.message)   // the server's words alone, not the SQL
        } catch {
            return ProcessResult(status: 1, stdout: "", stderr: "\(error)")
        }
    }

    /// `psql` from a stand-in's script, which answers synchronously on its stand-in's own queue
    /// (`StandInLoops`): that thread waits while the SQL runs in a task of its own, and only that
    /// stand-in's answers wait with it. Never from anywhere else: a test's own thread is one of
    /// Swift's few cooperative ones.
    @discardableResult
    func psqlFromAStandIn(_ sql: String) throws -> String {
        precondition(StandInLoops.isScript, "psqlFromAStandIn outside a stand-in's script")
        let outcome = Mutex<Result<String, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)   // blocks: a stand-in's thread, never the pool's
        Task.detached {
            do {
                let rows = try await psql(sql)
                outcome.withLock { $0 = .success(rows) }
            } catch {
                outcome.withLock { $0 = .failure(error) }
            }
            done.signal()
        }
        let wait = Waits.begin("a stand-in's script waiting for its SQL on \(name): \(sql.prefix(120))")
        done.wait()   // blocks: a stand-in's thread, checked above
        Waits.end(wait)
        return try outcome.withLock { $0! }.get()
    }

    func count(_ sql: String) async throws -> Int {
        guard let count = Int(try await psql(sql)) else { throw TestFailure("not a count: \(sql)") }
        return count
    }

    /// Whether any user is due for `job` at `instant` (`job_due`): a scenario skips the runs that
    /// would read nobody, as cron's would (a run reads only those due), so that its thousands of
    /// ticks cost only the ones with work.
    func anyoneDue(for job: String, at instant: Date) async throws -> Bool {
        try await count(
            """
            select count(*) from (select 1 from job_due where job = '\(job)' and due_at <= '\(ISO8601DateFormatter().string(from: instant))' limit 1) due
            """) > 0
    }

    /// Rows of `tables` read so far by PostgreSQL's own counters, once every other session on this
    /// database has ended (`othersEnded`): a session reports its reads as it ends.
    func rowsRead(_ tables: [String]) async throws -> Int {
        try await othersEnded()
        return try await count(
            """
            select coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0) from pg_stat_user_tables
             where relname in (\(tables.map { "'\($0)'" }.joined(separator: ", ")))
            """)
    }

    /// Returns once no other client session is connected to this database. A program that ended
    /// (a `nudge` run, a pool closed) has its sessions end a moment later, on a loaded machine a
    /// while later; each reports its reads and writes to PostgreSQL's counters as it ends. The
    /// test's own idle sessions (TestSQL's) are ended first, for their counters.
    func othersEnded() async throws {
        await TestSQL.closeIdle(url)
        let others = try await psql(
            """
            select pid from pg_stat_activity
             where datname = current_database() and pid <> pg_backend_pid() and backend_type = 'client backend'
               and application_name <> 'test-sql'
            """
        ).split(whereSeparator: \.isWhitespace).compactMap { Int32($0) }
        try await processesEnded(others, "the sessions \(others) on \(name) to end")
    }

    /// Every row of every table but the ones named, as text, in a stable order: for "nothing changed".
    func dump(excluding excluded: Set<String> = []) async throws -> String {
        let tables = try await psql(
            """
            select tablename from pg_tables where schemaname = 'public' order by tablename
            """
        ).split(separator: "\n").map(String.init).filter { !excluded.contains($0) }
        var dumped: [String] = []
        for table in tables { dumped.append("\(table):\n" + (try await psql("select t::text from \(table) t order by 1"))) }
        return dumped.joined(separator: "\n")
    }

    /// What validate-streaks decides, without the wall-clock columns (updated_at, run ids) that
    /// legitimately differ between two schedules that end in the same state.
    func streakState() async throws -> String {
        var parts: [String] = []
        for query in [
            "select user_id, current_streak, longest_streak, last_checkin_date, freeze_used_this_week, week_start_date, settled_through, missed_days from user_streaks order by user_id",
            "select user_id, date, streak_day from daily_tracking where streak_day is not null order by 1, 2",
            "select user_id, badge, earned_at from user_badges order by 1, 2",
            "select job, user_id, local_day, outcome from job_work order by 1, 2, 3",
            "select dedupe_key, user_id, local_day, notification_type, deliver_after, title, body, payload from notification_outbox order by dedupe_key",
        ] { parts.append(try await psql(query)) }
        return parts.joined(separator: "\n--\n")
    }

    /// Runs the built `nudge` binary against this database, as cron would (no terminal, JSON logs).
    /// The wait happens off Swift's cooperative threads: a test in this process may be serving the
    /// binary's requests (the LLM stand-in), and a blocked pool would leave them unanswered.
    func nudge(_ arguments: [String], environment: [String: String] = [:]) async throws -> ProcessResult {
        try outsideTheTransaction("nudge")
        let environment = nudgeEnvironment(environment)
        let slot = await ProcessSlots.shared.acquire("nudge " + arguments.joined(separator: " "))
        defer { Task { await ProcessSlots.shared.release(slot) } }
        return try await runProcessOffThePool(NudgeBinary.path, arguments, environment: environment)
    }

    /// Starts `nudge` and returns at once, for the tests that stop it on purpose.
    func startNudge(_ arguments: [String], environment: [String: String] = [:]) throws -> RunningProcess {
        try outsideTheTransaction("startNudge")
        return try RunningProcess(NudgeBinary.path, arguments, environment: nudgeEnvironment(environment))
    }

    func nudgeEnvironment(_ extra: [String: String]) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["DATABASE_URL"] = url
        environment["NUDGE_HOME"] = packageRoot.path
        environment["NUDGE_LOG_FORMAT"] = "json"
        for key in environment.keys where key.hasSuffix("_ENABLED") { environment[key] = nil }
        environment.merge(extra) { _, new in new }
        return environment
    }

    /// Runs a job in this process, for tests that drive the runner many times (schedules), or
    /// looks at the pool itself (with `limits` and `connections` of its own).
    func withDatabase<T: Sendable>(
        limits: DatabaseLimits = .forOperators, connections: Int = 4,
        _ body: @escaping @Sendable (Database) async throws -> T
    ) async throws -> T {
        try outsideTheTransaction("withDatabase")
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let wait = Waits.begin("a job's database pool in this process, on \(name)")
        defer { Waits.end(wait) }
        return try await Database.with(try DatabaseURL(url), logger: logger, limits: limits, connections: connections, body)
    }
}

/// At most one `nudge` per core at a time: the tests run in parallel, and a machine drowned in
/// processes is slow to answer even its own database.
///
/// Each slot is held by what it names until released. A wait of minutes for one is a slot never
/// given back or a test holding one while it waits for another: the waiter then prints what holds
/// them, so that a run ended for taking too long (`scripts/test` bounds it) says why.
actor ProcessSlots {
    static let shared = ProcessSlots(count: max(2, ProcessInfo.processInfo.activeProcessorCount))

    struct Slot: Sendable, Hashable {
        fileprivate let id = UUID()
    }

    private var free: Int
    private var waiting: [(slot: Slot, what: String, continuation: CheckedContinuation<Void, Never>)] = []
    private var holders: [Slot: (what: String, since: Date)] = [:]
    private let reportAfter: Duration
    private let report: @Sendable (String) -> Void

    init(
        count: Int, reportAfter: Duration = .seconds(300),
        report: @escaping @Sendable (String) -> Void = { FileHandle.standardError.write(Data($0.utf8)) }
    ) {
        free = count
        self.reportAfter = reportAfter
        self.report = report
    }

    /// How many wait for a slot.
    var waiters: Int { waiting.count }

    /// One more each time a waiter joins the queue.
    nonisolated let changes = Changes()

    /// A slot for `what` (a command line, say), once one is free.
    func acquire(_ what: String) async -> Slot {
        let slot = Slot()
        if free > 0 {
            free -= 1
            holders[slot] = (what, Date())
            return slot
        }
        Task { [reportAfter] in
            try? await Task.sleep(for: reportAfter)   // sleeps: the report's own timer, no test's verdict
            self.reportIfWaiting(slot)
        }
        let wait = Waits.begin("a process slot for \(what)")
        await withCheckedContinuation {
            waiting.append((slot, what, $0))
            changes.changed()
        }
        Waits.end(wait)
        return slot
    }

    func release(_ slot: Slot) {
        guard holders.removeValue(forKey: slot) != nil else {
            report("ProcessSlots: a slot released twice, or never acquired\n")
            return
        }
        if waiting.isEmpty {
            free += 1
        } else {
            let next = waiting.removeFirst()
            holders[next.slot] = (next.what, Date())
            next.continuation.resume()
        }
    }

    /// What holds the slots, printed when `slot` is still waiting for one.
    private func reportIfWaiting(_ slot: Slot) {
        guard let waiter = waiting.first(where: { $0.slot == slot }) else { return }
        let held = holders.values.sorted { $0.since < $1.since }
            .map { "  \($0.what) (for \(Int(-$0.since.timeIntervalSinceNow)) s)" }.joined(separator: "\n")
        report(
            """
            ProcessSlots: '\(waiter.what)' has waited \(reportAfter) for a process slot; \(waiting.count) waiting, held by:
            \(held)

            """)
    }
}

enum NudgeBinary {
    static var path: String {
        let debug = packageRoot.appendingPathComponent(".build/debug/nudge").path
        return ProcessInfo.processInfo.environment["NUDGE_BINARY"] ?? debug
    }
}

struct ProcessResult: Sendable {
    let status: Int32
    let stdout: String
    let stderr: String
    /// How long the process ran (not counting any wait for a slot to start it).
    var seconds: Double = 0
}

/// Blocks the calling thread until `executable` ends and has closed its output: only ever on a
/// thread of its own (`runProcessOffThePool`), never one of Swift's cooperative threads, which
/// the tests, the stand-ins' callers and the in-process jobs all need.
private func blockingRun(_ executable: String, _ arguments: [String], environment: [String: String]?, test: String?) throws -> ProcessResult {
    let started = Date()
    let child = try Child.start(executable, arguments, environment: environment ?? ProcessInfo.processInfo.environment, output: .pipes)
    let wait = Waits.begin("process \(child.pid) (\(executable) \(arguments.joined(separator: " ").prefix(120))): its end and its output's", test: test)
    defer { Waits.end(wait) }
    let (stdout, stderr) = child.output()   // blocks: a thread of its own
    let status = child.waitForEnd()   // blocks: a thread of its own
    return ProcessResult(
        status: status, stdout: String(decoding: stdout, as: UTF8.self),
        stderr: String(decoding: stderr, as: UTF8.self), seconds: Date().timeIntervalSince(started))
}

/// Runs `executable` to its end, waited for off Swift's cooperative threads: the only way the
/// tests start a process and wait for it. With the pool's two threads blocked in two waits,
/// nothing would be left to answer a process that talks to `nudge serve` or a job in this process.
func runProcessOffThePool(_ executable: String, _ arguments: [String], environment: [String: String]? = nil) async throws -> ProcessResult {
    let test = Test.current?.name
    return try await withCheckedThrowingContinuation { continuation in
        onThreadOfItsOwn {
            continuation.resume(with: Result { try blockingRun(executable, arguments, environment: environment, test: test) })
        }
    }
}

/// Runs `body`, which blocks, on a thread started for it. Not on Dispatch's global queue: on this
/// machine it starts with three threads and, while they are blocked, adds about one a second
/// (64 blocked blocks: 4 running after 2 s, 18 after 16 s), so a burst of process waits there
/// (forty suites starting) queued the rest, and each wait's pipe readers, behind them.
func onThreadOfItsOwn(_ body: @escaping @Sendable () -> Void) {
    let thread = Thread(block: body)
    thread.stackSize = 1 << 20
    thread.start()
}

/// A `nudge` started in the background; its output goes to files, read when it ends.
final class RunningProcess: Sendable {
    private let child: Child
    private let outURL: URL
    private let errURL: URL

    init(_ executable: String, _ arguments: [String], environment: [String: String]) throws {
        let folder = FileManager.default.temporaryDirectory
        outURL = folder.appendingPathComponent("nudge-\(UUID()).out")
        errURL = folder.appendingPathComponent("nudge-\(UUID()).err")
        child = try Child.start(executable, arguments, environment: environment, output: .files(out: outURL, err: errURL))
    }

    func signal(_ signal: Int32) { child.signal(signal) }

    /// Whether the process has ended (without waiting for it).
    var hasExited: Bool { child.hasEnded }

    /// One change when it ends: for a wait on something it should do first, which its end
    /// settles (`until(…, on: …, process.end)`, with `process.hasExited` in the condition).
    var end: Changes { child.ends }

    /// Whether it ends within `seconds`, told by its end.
    func ends(within seconds: Double) async -> Bool {
        await happens(before: .now + .seconds(seconds), on: [child.ends]) { child.hasEnded }
    }

    /// Whether it ends within the tests' budget; killed when it does not, so that no test awaits
    /// a run that would outlast the whole test run (an hour's drain, calls that hang).
    func endsWithinTheBudget() async -> Bool {
        let ended = await ends(within: TestBudget.seconds)
        if !ended { signal(SIGKILL) }
        return ended
    }

    /// Returns once `goal` holds, looked at again each time one of `changes` changes, while the
    /// process runs; fails, with what it said, when it ends first, or when the budget does.
    func reaches(_ what: @autoclosure () -> String, on changes: Changes..., goal: () -> Bool) async throws {
        try await until(what(), on: changes + [child.ends]) {
            if goal() { return true }
            if hasExited { throw TestFailure("process \(pid) ended first: \(await finished().stderr)") }
            return false
        }
    }

    var pid: Int32 { child.pid }

    /// Its status and output once it has ended, awaited off Swift's cooperative threads: a
    /// stand-in in this process may be answering the process meanwhile.
    func finished() async -> ProcessResult {
        let wait = Waits.begin("process \(child.pid), started in the background: its end")
        defer { Waits.end(wait) }
        return await withCheckedContinuation { continuation in
            onThreadOfItsOwn { continuation.resume(returning: self.wait()) }   // blocks: a thread of its own
        }
    }

    private func wait() -> ProcessResult {
        let status = child.waitForEnd()   // blocks: only from finished(), on a thread of its own
        defer {
            try? FileManager.default.removeItem(at: outURL)
            try? FileManager.default.removeItem(at: errURL)
        }
        return ProcessResult(
            status: status,
            stdout: (try? String(contentsOf: outURL, encoding: .utf8)) ?? "",
            stderr: (try? String(contentsOf: errURL, encoding: .utf8)) ?? "")
    }
}

/// An IPv4 address of this machine's that is not loopback: where a test listens or connects as
/// another machine would.
func outsideAddress() async throws -> String {
    let addresses = try await runProcessOffThePool("/bin/sh", ["-c", "hostname -I"]).stdout.split(separator: " ").map(String.init)
    guard let address = addresses.first(where: { $0.contains(".") && !$0.hasPrefix("127.") }) else {
        throw TestFailure("this machine needs an IPv4 address other than loopback (hostname -I)")
    }
    return address
}
