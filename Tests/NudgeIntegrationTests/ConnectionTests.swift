import Foundation
import Logging
import PostgresNIO
import Testing

@testable import NudgeCore

/// The test server also listens on 127.0.0.1 with TLS and a self-signed certificate, as a stock
/// Debian server does (`scripts/pg start … --tls`): sslmode means what it means to libpq.
struct TLSServer {
    let port: Int
    /// The server's self-signed certificate, its own root.
    let certificate: String

    init() throws {
        let url = try TestServer.serverURL()
        guard let components = URLComponents(string: url),
            let socket = components.queryItems?.first(where: { $0.name == "host" })?.value,
            let port = components.queryItems?.first(where: { $0.name == "port" })?.value.flatMap(Int.init)
        else { throw TestFailure("unexpected test server URL \(url)") }
        self.port = port
        certificate = URL(fileURLWithPath: socket).deletingLastPathComponent().appendingPathComponent("tls/server.crt").path
        guard FileManager.default.fileExists(atPath: certificate) else {
            throw TestFailure("the test server has no TLS (start it with scripts/pg start NAME --tls, as scripts/test does)")
        }
    }

    func url(_ database: TestDatabase, user: String = "nudge", password: String? = nil, _ query: String) -> String {
        "postgres://\(user)\(password.map { ":\($0)" } ?? "")@localhost:\(port)/\(database.name)?\(query)"
    }
}

@Suite(.dropsItsDatabases) struct ConnectionTests {
    @Test(arguments: ["sslmode=require", "sslmode=prefer", "sslmode=allow", "sslmode=disable"])
    func aSelfSignedServerIsReachedWithoutVerificationAsLibpqDoes(_ query: String) async throws {
        let tls = try TLSServer()
        let database = try await TestDatabase.fresh()
        let result = try await database.nudge(["runs"], environment: ["DATABASE_URL": tls.url(database, query)])
        #expect(result.status == 0, "\(query): \(result.stderr)")
        #expect(result.stdout.contains("no runs yet"))
    }

    @Test func verifyingModesCheckTheCertificateAgainstTheRootsTheyAreGiven() async throws {
        let tls = try TLSServer()
        let database = try await TestDatabase.fresh()
        for query in [
            "sslmode=verify-ca&sslrootcert=\(tls.certificate)", "sslmode=verify-full&sslrootcert=\(tls.certificate)",
            "sslmode=require&sslrootcert=\(tls.certificate)",
        ] {
            let result = try await database.nudge(["runs"], environment: ["DATABASE_URL": tls.url(database, query)])
            #expect(result.status == 0, "\(query): \(result.stderr)")
        }
        // NUDGE_DB_CA_FILE is the root trusted when sslrootcert is not given; NUDGE_CA_FILE, the
        // providers' roots, never vouches for the database.
        let extra = try await database.nudge(
            ["runs"],
            environment: [
                "DATABASE_URL": tls.url(database, "sslmode=verify-full"),
                "NUDGE_DB_CA_FILE": tls.certificate,
            ])
        #expect(extra.status == 0, "\(extra.stderr)")
        let providers = try await database.nudge(
            ["runs"],
            environment: [
                "DATABASE_URL": tls.url(database, "sslmode=verify-full"),
                "NUDGE_CA_FILE": tls.certificate,
            ])
        #expect(providers.status == 1)
        #expect(providers.stderr.contains("NUDGE_DB_CA_FILE"), "\(providers.stderr)")
        // Without its root, a self-signed certificate is refused, and the error says it was TLS.
        let refused = try await database.nudge(["runs"], environment: ["DATABASE_URL": tls.url(database, "sslmode=verify-full")])
        #expect(refused.status == 1)
        #expect(
            refused.stderr.contains("the TLS handshake failed (sslmode=verify-full): the server's certificate could not be verified"),
            "\(refused.stderr)")
    }

    @Test func theErrorSaysWhyTheServerRefused() async throws {
        let tls = try TLSServer()
        let database = try await TestDatabase.fresh()
        let password = UUID().uuidString
        try await database.psql(
            """
            do $$ begin
              if not exists (select 1 from pg_roles where rolname = 'nudge_password') then create role nudge_password login; end if;
            end $$;
            alter role nudge_password password '\(password)'
            """)
        let right = try await database.nudge(
            ["runs"],
            environment: [
                "DATABASE_URL": tls.url(database, user: "nudge_password", password: password, "sslmode=require")
            ])
        // Reached and authenticated: the role may only not read the ledger.
        #expect(right.status == 1)
        #expect(right.stderr.contains("permission denied for table job_runs"), "\(right.stderr)")

        let wrong = try await database.nudge(
            ["runs"],
            environment: [
                "DATABASE_URL": tls.url(database, user: "nudge_password", password: "hunter2", "sslmode=require")
            ])
        #expect(wrong.status == 1)
        #expect(wrong.stderr.contains(#"password authentication failed for user "nudge_password""#), "\(wrong.stderr)")
        #expect(!wrong.stderr.contains("hunter2"))

        let noDatabase = try await database.nudge(
            ["runs"],
            environment: [
                "DATABASE_URL": "postgres://nudge@localhost:\(tls.port)/no_such_database?sslmode=require"
            ])
        #expect(noDatabase.status == 1)
        #expect(noDatabase.stderr.contains(#"database "no_such_database" does not exist"#), "\(noDatabase.stderr)")

        let badMode = try await database.nudge(["runs"], environment: ["DATABASE_URL": tls.url(database, "sslmode=sometimes")])
        #expect(badMode.status == 1)
        #expect(badMode.stderr.contains("sslmode must be one of disable, allow, prefer, require, verify-ca, verify-full"))
    }
}

@Suite(.dropsItsDatabases) struct ConnectionPoolTests {
    /// A wait for a connection that ends while every one of the process's connections is held
    /// by its own work says so, rather than blaming the network.
    @Test func aPoolWaitSaysWhetherTheProcessHeldEveryConnection() async throws {
        let database = try await TestDatabase.fresh()
        let message = try await database.withDatabase(limits: DatabaseLimits(statementTimeout: .seconds(1)), connections: 1) { db in
            try await db.withConnection { _ in
                do {
                    _ = try await db.withConnection { _ in 0 }
                    return "a second connection was leased"
                } catch {
                    return "\(error)"
                }
            }
        }
        #expect(
            message.contains("no free database connection within 11.0 seconds: all 1 of this process's connections stayed in use"),
            "\(message)")
        #expect(!message.contains("network"))
    }

    /// A statement sent on a connection whose socket has just closed is dropped by the driver
    /// without an answer: the bounded wait for it ends at its limit all the same. Awaited to its
    /// end, it held a run whose database had stopped answering until the run was killed.
    @Test func aBoundedWaitEndsAtItsLimitWhenTheDriverNeverAnswers() async throws {
        let message = try await boundedWait { db, connection in
            try await connection.close()
            _ = try await connection.query("select 1", logger: db.logger)
        }
        #expect(message == "the database did not answer within 11.0 seconds (lost connection or network); closed", "\(message)")
    }

    /// An operation that does not answer on an open connection: the time-out comes with the
    /// connection closed, never before (a caller's `isClosed` decides whether it tries another).
    @Test func aTimeOutComesWithItsConnectionClosed() async throws {
        let message = try await boundedWait { _, _ in try await Task.sleep(for: .seconds(120)) }   // sleeps: a call that outlasts its bound
        #expect(message == "the database did not answer within 11.0 seconds (lost connection or network); closed", "\(message)")
    }

    /// An answer that came in time while every one of this process's threads was busy (a long
    /// synchronous call, a burst of work) past the limit is the answer, not a time-out: the
    /// limit is acted on behind what was queued before it.
    @Test func anAnswerThatCameWhileThisProcessWasBusyIsNoTimeOut() async throws {
        let database = try await TestDatabase.fresh()
        let ended = try await ending(within: 60) {
            try await database.withDatabase { db in
                try await db.withConnection { connection in
                    let start = ContinuousClock.now
                    do {
                        let answer = try await Database.answer(within: .milliseconds(500), on: connection) {
                            // Once this statement is sent, Swift's threads are held for a second
                            // (every suite of this process waits with them: kept short).
                            for _ in 0..<ProcessInfo.processInfo.activeProcessorCount {
                                Task { usleep(1_000_000) }   // blocks: on purpose, the busy process this test is about
                            }
                            var answer = ""
                            for try await text in try await connection.query("select 'answered'", logger: db.logger).decode(String.self) {
                                answer = text
                            }
                            return answer
                        }
                        return ("\(answer); \(connection.isClosed ? "closed" : "open")", start.duration(to: .now))
                    } catch {
                        return ("\(error); \(connection.isClosed ? "closed" : "open")", start.duration(to: .now))
                    }
                }
            }
        }
        let (message, waited) = try #require(ended, "the wait had not ended a minute later")
        #expect(message == "answered; open")
        // The threads were held past the limit: the answer waited for them.
        #expect(waited >= .milliseconds(500))
    }

    /// A connection of its own answers while the pool's only connection waits on a session that
    /// stopped answering: what a run records its end on after its own connection was lost.
    @Test func aNewConnectionAnswersWhileThePoolsSessionIsFrozen() async throws {
        let database = try await TestDatabase.fresh()
        let ended = try await ending(within: 60) {
            try await database.withDatabase(limits: DatabaseLimits(statementTimeout: .seconds(1)), connections: 1) { db in
                let backend = try await db.withConnection { connection in
                    var pid: Int32 = 0
                    for try await value in try await connection.query("select pg_backend_pid()", logger: db.logger).decode(Int32.self) {
                        pid = value
                    }
                    return pid
                }
                try #require(backend > 0)
                try #require(kill(backend, SIGSTOP) == 0, "the pool's session could not be frozen")
                defer { kill(backend, SIGCONT) }
                let start = ContinuousClock.now
                let answer = try await db.withNewConnection { connection in
                    try await db.bounded(connection) {
                        var answer = ""
                        for try await text in try await connection.query("select 'answered'", logger: db.logger).decode(String.self) {
                            answer = text
                        }
                        return answer
                    }
                }
                return (answer, start.duration(to: .now))
            }
        }
        let (answer, waited) = try #require(ended, "no answer a minute later")
        #expect(answer == "answered")
        // Under the 11 seconds a statement on the frozen session would wait before its time-out.
        #expect(waited < .seconds(10))
    }

    /// What a bounded `operation` on a pooled connection ended with, and whether the connection
    /// was closed when it did; the statement time-out is a second, so the bound is 11 seconds.
    private func boundedWait(_ operation: @escaping @Sendable (Database, PostgresConnection) async throws -> Void) async throws -> String {
        let database = try await TestDatabase.fresh()
        let ended = try await ending(within: 60) {
            try await database.withDatabase(limits: DatabaseLimits(statementTimeout: .seconds(1))) { db in
                try await db.withConnection { connection in
                    do {
                        try await db.bounded(connection) { try await operation(db, connection) }
                        return "answered"
                    } catch {
                        return "\(error); \(connection.isClosed ? "closed" : "open")"
                    }
                }
            }
        }
        return try #require(ended, "the bounded wait had not ended a minute later")
    }

    /// A statement for a connection closed already is refused at once, not sent to wait for ever.
    @Test func aConnectionClosedAlreadyIsRefusedAtOnce() async throws {
        let database = try await TestDatabase.fresh()
        let ended = try await ending(within: 60) {
            try await database.withDatabase(limits: DatabaseLimits(statementTimeout: .seconds(1))) { db in
                try await db.withConnection { connection in
                    try await connection.close()
                    let start = ContinuousClock.now
                    do {
                        try await db.bounded(connection) { _ = try await connection.query("select 1", logger: db.logger) }
                        return ("the statement was answered", start.duration(to: .now))
                    } catch {
                        return ("\(error)", start.duration(to: .now))
                    }
                }
            }
        }
        let (message, waited) = try #require(ended, "the refusal had not come a minute later")
        #expect(message.contains("the connection to the database was closed before the statement was sent"), "\(message)")
        // Well before the 11 seconds' limit a wait would have taken.
        #expect(waited < .seconds(5))
    }

    /// A statement run as a prepared one is parsed once per connection and answers as an ad hoc
    /// one does, for each set of values, a nil where a value was too; a failing one fails alone.
    @Test func preparedStatementsAnswerAsAdHocOnesAndArePreparedOncePerText() async throws {
        let database = try await TestDatabase.fresh()
        let logger = Logger(label: "test")
        let answers = try await database.withDatabase { db in
            try await db.withConnection { connection in
                var answers: [String] = []
                for (ids, label) in [([1, 2, 3], "a" as String?), ([4], nil), ([5, 6], "b")] {
                    let statement: SQLFragment = "select sum(x)::int8, coalesce(\(label), 'none') from unnest(\(ids)) as t(x)"
                    for try await (sum, text) in try await connection.prepared(statement, logger: logger).decode((Int, String).self) {
                        answers.append("\(sum) \(text)")
                    }
                }
                do {
                    for try await _ in try await connection.prepared("select 1 / \(0)", logger: logger) {}
                    answers.append("no error")
                } catch {
                    answers.append("division failed")
                }
                // A text that failed to prepare (its table not there yet) is not failed again
                // without asking the server: it is sent as an ad hoc statement from then on.
                let table = "later_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
                let later: SQLFragment = "select count(*)::int8 from \(unescaped: table) where \(1) = 1"
                do {
                    for try await _ in try await connection.prepared(later, logger: logger) {}
                    answers.append("no error")
                } catch {
                    answers.append("no table yet")
                }
                try await connection.query(PostgresQuery(unsafeSQL: "create table \(table) (x int)"), logger: logger)
                for try await count in try await connection.prepared(later, logger: logger).decode(Int.self) {
                    answers.append("\(count) rows")
                }
                let prepared = try await connection.query(
                    """
                    select count(*) from pg_prepared_statements where name like 'nudge\\_%'
                    """, logger: logger)
                for try await count in prepared.decode(Int.self) { answers.append("\(count) prepared") }
                return answers
            }
        }
        // Two texts and types for the sums (a nil label is another statement), one for the
        // division; none for the text that failed to prepare.
        #expect(answers == ["6 a", "4 none", "11 b", "division failed", "no table yet", "0 rows", "3 prepared"])
    }
}
