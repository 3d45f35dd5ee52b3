import Foundation
import NudgeStandIns
import Synchronization
import Testing

/// Lines written from several tasks, read by the test.
private final class Lines: Sendable {
    private let lines = Mutex<[String]>([])
    /// One more for each line.
    let changes = Changes()

    func append(_ line: String) {
        lines.withLock { $0.append(line) }
        changes.changed()
    }

    var all: [String] { lines.withLock { $0 } }
}

/// The harness's own promises: a run that stalls on its process slots says what holds them.
@Suite(.dropsItsDatabases) struct ProcessSlotsTests {
    /// Slots go to waiters in turn; a waiter kept waiting past the report time names what holds
    /// the slots; a slot given back twice is reported, not counted twice.
    @Test func aLongWaitNamesTheHoldersAndADoubleReleaseIsCaught() async throws {
        let reports = Lines()
        let slots = ProcessSlots(count: 1, reportAfter: .milliseconds(200)) { reports.append($0) }
        let serve = await slots.acquire("nudge serve")
        let order = Lines()
        let first = Task {
            let slot = await slots.acquire("nudge run dispatch")
            order.append("dispatch")
            await slots.release(slot)
        }
        try await until("a waiter for the slot", on: slots.changes) { await slots.waiters == 1 }
        let second = Task {
            let slot = await slots.acquire("nudge run reminders")
            order.append("reminders")
            await slots.release(slot)
        }
        try await until("two reports", on: reports.changes) { reports.all.count == 2 }
        let waited = reports.all.joined()
        #expect(waited.contains("'nudge run dispatch' has waited"), "\(waited)")
        // The second waiter's report comes while the first still waits.
        #expect(
            waited.contains("'nudge run reminders' has waited 0.2 seconds for a process slot; 2 waiting, held by:\n  nudge serve (for "),
            "\(waited)")
        #expect(order.all.isEmpty)

        await slots.release(serve)
        _ = await (first.value, second.value)
        #expect(order.all == ["dispatch", "reminders"])
        await slots.release(serve)
        #expect(reports.all.last == "ProcessSlots: a slot released twice, or never acquired\n")
        // The slot is free once, not twice: a holder keeps the next one waiting.
        let held = await slots.acquire("one")
        let third = Task { _ = await slots.acquire("two") }
        try await until("the report of 'two'", on: reports.changes) { reports.all.last?.contains("'two' has waited") == true }
        await slots.release(held)
        await third.value
    }
}

/// The tests' SQL (TestSQL) reads as psql did: the checks of every suite compare its text.
@Suite(.dropsItsDatabases) struct TestSQLTests {
    /// Values as the server's text (NULL as nothing, booleans `t`/`f`), columns joined by `|` and
    /// rows by new lines, every statement's rows of a script in order.
    @Test func rowsReadAsPsqlPrintsThem() async throws {
        let database = try await TestDatabase.fresh(migrated: false)
        #expect(
            try await database.psql("select 1, null::text, true, 'a|b', '2026-10-25 01:30:00+00'::timestamptz at time zone 'UTC'")
                == "1||t|a|b|2026-10-25 01:30:00")
        #expect(try await database.psql("select n, n * 2 from generate_series(1, 3) n") == "1|2\n2|4\n3|6")
        #expect(
            try await database.psql("create table t (x int); insert into t values (1), (2); select count(*) from t; select 'é✓'")
                == "2\né✓")
        #expect(try await database.psql("select 1 where false") == "")
    }

    /// A script is one transaction: a failing statement undoes the ones before it, and the error
    /// says what the server said, with the SQL.
    @Test func aFailingStatementUndoesItsScriptAndSaysWhy() async throws {
        let database = try await TestDatabase.fresh(migrated: false)
        try await database.psql("create table t (x int primary key)")
        await #expect {
            try await database.psql("insert into t values (1); insert into t values (1)")
        } throws: { error in
            let text = "\(error)"
            return text.contains("ERROR:  duplicate key value violates unique constraint \"t_pkey\"")
                && text.contains("DETAIL:  Key (x)=(1) already exists.") && text.contains("insert into t values (1); insert")
        }
        #expect(try await database.count("select count(*) from t") == 0)
        let refused = await database.attempt("select nope")
        #expect(refused.status == 1 && refused.stderr == "ERROR:  column \"nope\" does not exist", "\(refused.stderr)")
    }

    /// A held session keeps what it took until it ends; each other call runs as a session of its
    /// own would, so nothing one sets or leaves open outlives it, though the sessions are kept.
    @Test func aHeldSessionKeepsItsLockUntilItEnds() async throws {
        let database = try await TestDatabase.fresh(migrated: false)
        let holder = try await TestSQL.hold("select pg_advisory_lock(4242)", url: database.url)
        #expect(try await database.value("select pg_try_advisory_lock(4242)") == "f")
        await holder.end()
        #expect(try await database.value("select pg_try_advisory_lock(4242)") == "t")
        // The lock the last script took went with it, though its session was kept.
        let kept = try await database.value("select pg_backend_pid()")
        #expect(try await database.value("select pg_backend_pid()") == kept, "the session is kept for the next call")
        let other = try await TestSQL.hold("select pg_try_advisory_lock(4242)", url: database.url)
        #expect(try await other.run("select pg_try_advisory_lock(4242)") == "t")
        await other.end()
        try await database.psql("set application_name = 'set by an earlier script'")
        #expect(try await database.value("show application_name") == "test-sql")
        // The server bounds each statement of the tests' SQL, so that none runs on after its test gave up.
        #expect(try await database.value("show statement_timeout") == "170s")
        // A transaction a script leaves open is rolled back with its session.
        try await database.psql("create table t (x int)")
        try await database.psql("begin; insert into t values (1)")
        #expect(try await database.count("select count(*) from t") == 0)
        // A kept session the server ended is replaced, and the script runs once.
        let ending = try await database.value("select pg_backend_pid()")
        let terminator = try await TestSQL.hold("select pg_terminate_backend(\(ending))", url: database.url)
        await terminator.end()
        #expect(try await database.psql("insert into t values (2) returning x") == "2")
        #expect(try await database.count("select count(*) from t") == 1)
        #expect(try await database.value("select pg_backend_pid()") != ending)
    }
}

/// The databases a test makes are dropped when it ends, passed or failed, and only those.
@Suite(.dropsItsDatabases) struct TestDatabasesTests {
    private func exists(_ name: String) async throws -> Bool {
        try await TestDatabase(named: "postgres").count("select count(*) from pg_database where datname = '\(name)'") == 1
    }

    @Test func aTestsDatabasesAreDroppedWhenItEndsAndTheOthersStay() async throws {
        let own = try await TestDatabase.fresh()
        let made = Mutex<[String]>([])
        let scope = DropsItsDatabases()
        let test = try #require(Test.current)
        try await scope.provideScope(for: test, testCase: nil) {
            let copy = try await TestDatabase.fresh()
            let empty = try await TestDatabase.fresh(migrated: false)
            let clone = try await copy.clone()
            made.withLock { $0 = [copy.name, empty.name, clone.name] }
            for name in made.withLock({ $0 }) { #expect(try await exists(name)) }
        }
        for name in made.withLock({ $0 }) { #expect(try await !exists(name), "\(name) is still there") }
        // A test that fails (throws) has its databases dropped too.
        let failed = Mutex<String?>(nil)
        await #expect(throws: TestFailure.self) {
            try await scope.provideScope(for: test, testCase: nil) {
                let name = try await TestDatabase.fresh().name
                failed.withLock { $0 = name }
                throw TestFailure("a failing test")
            }
        }
        #expect(try await !exists(try #require(failed.withLock { $0 })))
        // The enclosing test's own is its until it ends.
        #expect(try await exists(own.name))
    }

    /// The rolled-back tier: what a test writes there, it reads; no one else does, and after it
    /// nothing of it is left, whether it passed or threw; two such tests at once share the one
    /// database without seeing each other.
    @Test func whatARolledBackTestWritesIsGoneAfterIt() async throws {
        let id = UUID().uuidString.lowercased()
        let seen = try await TestDatabase.rolledBack { database in
            try await database.psql("insert into users (id, timezone) values ('\(id)', 'UTC')")
            let shared = try await TestServer.shared.database()
            let other = try await TestSQL.run("select count(*) from users where id = '\(id)'", url: shared.url).trimmingCharacters(in: .newlines)
            #expect(other == "0", "another session saw the row")
            return try await database.count("select count(*) from users where id = '\(id)'")
        }
        #expect(seen == 1)
        await #expect(throws: TestFailure.self) {
            try await TestDatabase.rolledBack { database in
                try await database.psql("insert into users (id, timezone) values ('\(id)', 'UTC')")
                throw TestFailure("a failing test")
            }
        }
        let after = try await TestDatabase.rolledBack { database in try await database.count("select count(*) from users where id = '\(id)'") }
        #expect(after == 0)
        // A refused statement leaves the test's transaction usable, and what came before it;
        // what would leave the transaction is refused.
        try await TestDatabase.rolledBack { database in
            try await database.psql("insert into users (id, timezone) values ('\(id)', 'UTC')")
            await #expect(throws: TestSQL.Refused.self) { try await database.psql("insert into users (id, timezone) values ('\(id)', 'UTC')") }
            #expect(try await database.count("select count(*) from users where id = '\(id)'") == 1)
            await #expect(throws: TestFailure.self) { try await database.nudge(["migrate"]) }
        }
    }
}
