import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PostgresNIO
import ServiceLifecycle
import Synchronization
import UnixSignals

/// How long Nudge lets the database take.
public struct DatabaseLimits: Sendable, Equatable {
    /// The server's `statement_timeout` for every session: no statement runs longer. Nil for the
    /// commands an operator runs by hand and watches (`migrate`, `seed`), whose statements may
    /// rightly take minutes on a large database.
    public var statementTimeout: Duration?

    public init(statementTimeout: Duration?) {
        self.statementTimeout = statementTimeout
    }

    /// How long Nudge waits for any answer before it gives up on the connection: the statement
    /// timeout and a margin for the server's own error to arrive. A server cut off by the network
    /// never sends that error; this bound ends the wait anyway.
    public var answerTimeout: Duration { answerTimeout(statements: 1) }

    /// The wait for `statements` statements sent one after the other.
    public func answerTimeout(statements: Int) -> Duration {
        (statementTimeout ?? .seconds(3600)) * max(1, statements) + .seconds(10)
    }

    /// For a job run: `NUDGE_DB_STATEMENT_TIMEOUT_SECONDS`, 60 by default.
    public static func forJobs(_ environment: Environment) throws(NudgeError) -> DatabaseLimits {
        DatabaseLimits(statementTimeout: .seconds(try environment.integer("NUDGE_DB_STATEMENT_TIMEOUT_SECONDS", default: 60, in: 1...3_600)))
    }

    public static let forOperators = DatabaseLimits(statementTimeout: nil)
}

/// A started connection pool for the length of one command.
public struct Database: Sendable {
    public let client: PostgresClient
    public let url: DatabaseURL
    public let limits: DatabaseLimits
    public let logger: Logger
    /// The most connections the pool opens, and how many `withConnection` holds now: a wait for
    /// a connection that ends with all of them held is this process's own doing, not the server's.
    public let connections: Int
    /// The name the server shows for this process's sessions (`application_name`).
    public let applicationName: String
    let held = HeldConnections()

    /// How long a command waits for the server before it gives up with exit 1. A pool left to
    /// itself retries for about a minute, which cron and an operator at a terminal would read as
    /// a hang.
    public static let reachTimeout: Duration = .seconds(8)

    /// Starts a pool, checks that the server answers, runs `body`, and shuts the pool down on
    /// every path. With `stopOnSignals`, the first SIGTERM or SIGINT asks `body` to stop gracefully
    /// (`Task.isShuttingDownGracefully`) instead of killing the process; a second one ends the
    /// process at once.
    public static func with<Result: Sendable>(
        _ url: DatabaseURL,
        logger: Logger,
        applicationName: String = "nudge",
        limits: DatabaseLimits = .forOperators,
        stopOnSignals: Bool = false,
        connections: Int = 4,
        _ body: @escaping @Sendable (Database) async throws -> Result
    ) async throws -> Result {
        // The pool narrates connection churn at info; only its warnings matter to an operator.
        var poolLogger = logger
        poolLogger.logLevel = max(logger.logLevel, .warning)
        let client = PostgresClient(
            configuration: url.clientConfiguration(
                applicationName: applicationName, statementTimeout: limits.statementTimeout,
                connections: connections),
            backgroundLogger: poolLogger)
        let database = Database(
            client: client, url: url, limits: limits, logger: logger, connections: max(1, connections),
            applicationName: applicationName)
        let outcome = Mutex<Swift.Result<Result, any Error>?>(nil)
        let work = ClosureService {
            let result: Swift.Result<Result, any Error>
            do {
                try await database.checkReachable()
                result = .success(try await body(database))
            } catch {
                result = .failure(error)
            }
            outcome.withLock { $0 = result }
        }
        let group = ServiceGroup(
            configuration: .init(
                services: [
                    .init(service: client),
                    .init(
                        service: work, successTerminationBehavior: .gracefullyShutdownGroup,
                        failureTerminationBehavior: .gracefullyShutdownGroup),
                ],
                logger: poolLogger))
        let signals = stopOnSignals ? await UnixSignalsSequence(trapping: .sigterm, .sigint) : nil
        let watcher = signals.map { signals in
            Task {
                var received = 0
                for await signal in signals {
                    received += 1
                    guard received == 1 else {
                        StandardError.write("nudge: a second \(signal): ending now; the next run closes the books on this one\n")
                        exit(1)
                    }
                    logger.notice(
                        "stopping after the batch in flight; a second signal ends the process at once",
                        metadata: ["nudge.signal": "\(signal)"])
                    await group.triggerGracefulShutdown()
                }
            }
        }
        defer { watcher?.cancel() }
        try await group.run()
        guard let result = outcome.withLock({ $0 }) else {
            throw NudgeError(.database, "the command stopped before it finished")
        }
        return try result.get()
    }

    /// Asks the server a first question on a connection of its own: the pool retries a refused
    /// connection quietly, while this one says why it failed (TLS, authentication, an unknown
    /// database, no server there).
    func checkReachable() async throws {
        let logger = self.logger
        let url = self.url
        try await withNewConnection { connection in
            do {
                try await Self.answer(within: Self.reachTimeout, on: connection) {
                    try await connection.query("select 1", logger: logger)
                }
            } catch {
                throw Self.unreachable(url, error)
            }
        }
    }

    /// Runs `body` on a connection opened for it outside the pool (within `reachTimeout`) and
    /// closed after it: for what must reach the server while the pool's connections may wait on
    /// one that stopped answering (a run's end, after its own connection was lost). `body`'s
    /// statements are bounded by `bounded`, as on any connection.
    public func withNewConnection<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        let logger = self.logger
        let configuration = try url.connectionConfiguration(
            applicationName: applicationName,
            statementTimeout: limits.statementTimeout)
        let connection: PostgresConnection
        do {
            connection = try await withTimeout(Self.reachTimeout, discardingLate: { try? await $0.close() }) {
                try await PostgresConnection.connect(configuration: configuration, id: 0, logger: logger)
            }
        } catch {
            throw Self.unreachable(url, error)
        }
        do {
            let result = try await body(connection)
            try? await connection.close()
            return result
        } catch {
            try? await connection.close()
            throw error
        }
    }

    /// The error of a server that could not be reached, saying why.
    static func unreachable(_ url: DatabaseURL, _ error: any Error) -> NudgeError {
        NudgeError(.database, "cannot reach the database at \(url): \(connectionFailure(error, url: url))")
    }

    /// Why a connection failed, in an operator's words, never with the password.
    static func connectionFailure(_ error: any Error, url: DatabaseURL) -> String {
        if error is TimedOut {
            return "no answer within \(reachTimeout); is the server running there, and is DATABASE_URL right?"
        }
        guard let error = error as? PSQLError else { return describe(error) }
        if let message = error.serverInfo?[.message] {
            let state = error.serverInfo?[.sqlState]
            let hint =
                switch state {
                case "28P01", "28000": " (check the user and password in DATABASE_URL)"
                case "3D000": " (check the database name in DATABASE_URL, or create it)"
                default: ""
                }
            return "the server refused the connection: \(message)\(hint)"
        }
        if error.code == .sslUnsupported {
            return "the server does not offer TLS, and sslmode=\(url.tlsMode.rawValue) requires it"
        }
        if let underlying = error.underlying {
            let text = "\(underlying)"
            if underlying is NIOSSLError {
                let verification = url.tlsMode == .verifyCA || url.tlsMode == .verifyFull || url.rootCertificate != nil
                if text.contains("CERTIFICATE_VERIFY_FAILED") {
                    return "the TLS handshake failed (sslmode=\(url.tlsMode.rawValue)): the server's certificate could not be verified"
                        + (verification
                            ? "; is it signed by a root in sslrootcert or NUDGE_DB_CA_FILE (NUDGE_CA_FILE is the providers' alone), and issued for this host?"
                            : "")
                }
                return "the TLS handshake failed (sslmode=\(url.tlsMode.rawValue)): \(text)"
            }
            let unreachable = "; is the server running there, and is DATABASE_URL right?"
            if text.contains("Connection refused") { return "connection refused" + unreachable }
            if text.contains("UnknownHost") { return "the host name does not resolve" + unreachable }
            if text.contains("No such file or directory") { return "no server socket there" + unreachable }
            if underlying is IOError || underlying is ChannelError { return text + unreachable }
            return text
        }
        return "\(error.code)"
    }

    /// Leases a connection from the pool for `body`, waiting at most `answerTimeout` for it: a
    /// pool whose server has gone keeps retrying to connect, and the command would wait for ever.
    /// `body` itself is not bounded here; its waits are (`bounded`).
    public func withConnection<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        let leased = Flag()
        let limit = limits.answerTimeout
        let held = self.held
        let connections = self.connections
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                try await client.withConnection { connection in
                    leased.set()
                    held.count.withLock { $0 += 1 }
                    defer { held.count.withLock { $0 -= 1 } }
                    return try await body(connection)
                }
            }
            group.addTask {
                try await sleepOnEventLoop(limit)
                guard leased.isSet else {
                    if held.count.withLock({ $0 }) >= connections {
                        throw NudgeError(
                            .database,
                            """
                            no free database connection within \(limit): all \(connections) of this process's connections \
                            stayed in use by its own work (the database answered; what held them had not finished)
                            """)
                    }
                    throw NudgeError(.database, "no connection to the database within \(limit) (lost connection or network)")
                }
                return nil
            }
            defer { group.cancelAll() }
            while let next = try await group.next() {
                if let value = next { return value }
            }
            throw NudgeError(.database, "the command stopped before it finished")
        }
    }

    /// Runs `operation` on `connection`; when the server has not answered within `answerTimeout`,
    /// closes the connection and throws. `statement_timeout` bounds a server that is slow; this
    /// bounds one that is gone.
    /// `statements` is how many statements `operation` may send one after the other: each may
    /// take up to `statement_timeout`.
    @discardableResult
    public func bounded<T: Sendable>(
        _ connection: PostgresConnection, statements: Int = 1,
        _ operation: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let limit = limits.answerTimeout(statements: statements)
        do {
            return try await Self.answer(within: limit, on: connection, operation)
        } catch is TimedOut {
            throw NudgeError(.database, "the database did not answer within \(limit) (lost connection or network)")
        } catch is ConnectionClosed {
            throw NudgeError(.database, "the connection to the database was closed before the statement was sent (lost connection or network)")
        }
    }

    /// Runs `operation` on `connection`, or closes the connection after `limit` and throws
    /// `TimedOut`; on a connection closed already, throws `ConnectionClosed` at once.
    ///
    /// The wait ends at the limit whether or not `operation` does. PostgresNIO ends a query
    /// waiting on a connection when the connection closes, but a query sent on a connection
    /// whose socket has just closed is dropped unanswered and waits for ever: awaited to its end,
    /// it held a run whose database stopped answering, after the run had said so, until it was
    /// killed. `operation` runs in a task of its own, cancelled and left to end (or not) when the
    /// limit passes: a result it brings after the limit is dropped (a write may have committed
    /// and still be reported as timed out, as when the answer is lost on the network).
    ///
    /// The bound is a timer on the connection's event loop, started with the operation and
    /// cancelled (and freed) when it ends; a process too busy to hear an answer in time gets a
    /// grace of at most the limit again (`graceAfterLimit`). Not a `Task.sleep` raced against the
    /// operation: a cancelled sleep keeps its timer until its deadline, so a run making a
    /// thousand bounded calls a second held a few minutes' worth of them, tens of megabytes at a
    /// million users.
    @discardableResult
    static func answer<T: Sendable>(
        within limit: Duration, on connection: PostgresConnection,
        _ operation: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        guard !connection.isClosed else { throw ConnectionClosed() }
        let answer = BoundedAnswer<T>()
        let eventLoop = connection.eventLoop
        let amount = TimeAmount(limit)
        let work = Task {
            // The limit counts from the statement's start.
            let timer = eventLoop.scheduleTask(in: amount) {
                expire(answer, on: connection, limit: amount, firedAt: .now(), graceGiven: false)
            }
            defer { timer.cancel() }
            do {
                answer.give(.success(try await operation()))
            } catch {
                answer.give(.failure(error))
            }
        }
        // Once answered, an operation still running is abandoned.
        defer { work.cancel() }
        return try await withTaskCancellationHandler {
            try await answer.value
        } onCancel: {
            work.cancel()
        }
    }
}

/// The limit of a bounded wait has passed on the event loop's clock: acted on from Swift's
/// threads, behind what was queued there before it, and after the grace `graceAfterLimit` gives
/// when those threads were late to it. A server that did not answer is not one this process was
/// too busy to hear.
private func expire<T: Sendable>(
    _ answer: BoundedAnswer<T>, on connection: PostgresConnection, limit: TimeAmount,
    firedAt fired: NIODeadline, graceGiven: Bool
) {
    Task {
        // Answered meanwhile: nothing to time out, and no grace timer to keep.
        guard !answer.isAnswered else { return }
        if !graceGiven, let grace = graceAfterLimit(late: .now() - fired, limit: limit) {
            connection.eventLoop.scheduleTask(in: grace) {
                expire(answer, on: connection, limit: limit, firedAt: .now(), graceGiven: true)
            }
            return
        }
        // An answer that came just before the limit stands, and its connection stays open.
        guard answer.expire() else { return }
        // Callers look at `isClosed` after a time-out: the answer waits for the close (the query
        // it fails may end first), and for three seconds at most should the close not end (a TLS
        // goodbye is given one, `DatabaseURL.tlsConfiguration`).
        connection.close().whenComplete { _ in answer.timeOut() }
        connection.eventLoop.scheduleTask(in: .seconds(3)) { answer.timeOut() }
    }
}

/// How much longer a wait whose limit has just passed goes on because this process, not the
/// other side, was late: Swift's threads came to the limit `late` after the event loop's timer
/// fired (busy with other work, a long synchronous call), and an answer that arrived in time may
/// be queued behind what held them. Once per wait, and never longer than the limit: a wait ends
/// within its limit, the time this process was too busy to act on it, and the limit again. Nil
/// when the threads were there on time.
func graceAfterLimit(late: TimeAmount, limit: TimeAmount) -> TimeAmount? {
    late >= .milliseconds(100) ? min(late, limit) : nil
}

/// The answer to one bounded wait: the operation's result, or, once the limit has passed, the
/// time-out alone (the operation's late result or error is dropped: the closed connection's
/// error says less, and the caller must not see the answer before the connection is closed).
private final class BoundedAnswer<T: Sendable>: Sendable {
    private struct State {
        var result: Result<T, any Error>?
        var waiter: CheckedContinuation<T, any Error>?
        var expired = false
    }

    private let state = Mutex(State())

    /// The limit passed: from now on only `timeOut` answers. False when the operation had
    /// answered already (nothing to time out).
    func expire() -> Bool {
        state.withLock { state in
            guard state.result == nil else { return false }
            state.expired = true
            return true
        }
    }

    /// Whether the wait has its answer (the operation's result or the time-out).
    var isAnswered: Bool { state.withLock { $0.result != nil } }

    /// The operation's result, unless the limit passed first.
    func give(_ result: Result<T, any Error>) {
        answer(result, late: false)
    }

    /// The time-out, unless the operation answered first.
    func timeOut() {
        answer(.failure(TimedOut()), late: true)
    }

    private func answer(_ result: Result<T, any Error>, late: Bool) {
        let waiter: CheckedContinuation<T, any Error>? = state.withLock { state in
            guard state.result == nil, state.expired == late else { return nil }
            state.result = result
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(with: result)
    }

    var value: T {
        get async throws {
            try await withCheckedThrowingContinuation { continuation in
                let ready: Result<T, any Error>? = state.withLock { state in
                    if let result = state.result { return result }
                    state.waiter = continuation
                    return nil
                }
                if let ready { continuation.resume(with: ready) }
            }
        }
    }
}

/// A connection closed before a statement could be sent on it.
struct ConnectionClosed: Error, CustomStringConvertible {
    var description: String { "the connection is closed" }
}

/// Whether something happened yet (the pool handed over a connection), shared with a task.
private final class Flag: Sendable {
    private let value = Mutex(false)

    var isSet: Bool { value.withLock { $0 } }

    func set() { value.withLock { $0 = true } }
}

struct TimedOut: Error, CustomStringConvertible {
    var description: String { "timed out" }
}

/// Runs `operation`, cancelling it and throwing `TimedOut` when it takes longer than `limit` (and
/// the grace a late process gets, `sleepOnEventLoop`): whichever ends first, the operation or the
/// limit, decides. A value that comes after it is handed to `discardLate` (a connection to
/// close): the caller never sees it.
///
/// The limit is an event-loop timer that cancelling frees (`sleepOnEventLoop`). A `Task.sleep`
/// keeps its timer until its deadline when cancelled: raced against each LLM call, it held the
/// call's whole time-out after every answer, tens of thousands of them in a million users' wave.
func withTimeout<T: Sendable>(
    _ limit: Duration, discardingLate discardLate: @escaping @Sendable (T) async -> Void = { _ in },
    _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    // A caller cancelled already starts nothing (a request must not leave after its batch's limit).
    try Task.checkCancellation()
    return try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            try await sleepOnEventLoop(limit)
            return nil
        }
        defer { group.cancelAll() }
        // After the limit, or the caller's cancellation, the operation may still end with a value.
        func discardTheRest() async {
            group.cancelAll()
            while let late = try? await group.next() {
                if let late { await discardLate(late) }
            }
        }
        let first: T?
        do {
            first = try await group.next()!
        } catch {
            await discardTheRest()
            throw error
        }
        if let first { return first }
        await discardTheRest()
        throw TimedOut()
    }
}

/// Sleeps for `duration` on an event loop's timer, and for the grace `graceAfterLimit` gives when
/// this task came to it late (a time-out raced against an answer queued behind busy threads);
/// cancelled, it throws at once and frees the timer.
func sleepOnEventLoop(_ duration: Duration) async throws {
    let limit = TimeAmount(duration)
    let fired = try await eventLoopTimer(limit)
    if let grace = graceAfterLimit(late: .now() - fired, limit: limit) {
        _ = try await eventLoopTimer(grace)
    }
}

/// When a timer of `amount` fired on an event loop.
private func eventLoopTimer(_ amount: TimeAmount) async throws -> NIODeadline {
    let timer = MultiThreadedEventLoopGroup.singleton.any().scheduleTask(in: amount) { NIODeadline.now() }
    return try await withTaskCancellationHandler {
        do {
            return try await timer.futureResult.get()
        } catch {
            throw CancellationError()
        }
    } onCancel: {
        timer.cancel()
    }
}

extension PostgresConnection {
    /// Runs a text of several SQL statements (a migration, the seed) as one command. The
    /// extended protocol that PostgresNIO speaks takes one statement at a time; PL/pgSQL's
    /// EXECUTE takes many.
    func executeScript(_ sql: String, tag: String, logger: Logger) async throws {
        let quote = "$\(tag)_sql$"
        precondition(!sql.contains(quote), "a script must not contain its own quote \(quote)")
        let wrapped = "do $\(tag)$ begin execute \(quote)\(sql)\(quote); end $\(tag)$"
        try await query(PostgresQuery(unsafeSQL: wrapped), logger: logger)
    }
}

/// How many pool connections `Database.withConnection` holds at the moment.
final class HeldConnections: Sendable {
    let count = Mutex(0)
}
