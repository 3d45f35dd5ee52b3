import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle
import UnixSignals
import Synchronization

/// A started connection pool for the length of one command.
public struct Database: Sendable {
    public let client: PostgresClient
    public let url: DatabaseURL
    public let logger: Logger

    /// How long a command waits for the server before it gives up with exit 1. A pool left to
    /// itself retries for about a minute, which cron and an operator at a terminal would read as
    /// a hang.
    public static let reachTimeout: Duration = .seconds(8)

    /// Starts a pool, checks that the server answers, runs `body`, and shuts the pool down on
    /// every path. With `stopOnSignals`, SIGTERM and SIGINT ask `body` to stop gracefully
    /// (`Task.isShuttingDownGracefully`) instead of killing the process.
    public static func with<Result: Sendable>(
        _ url: DatabaseURL,
        logger: Logger,
        stopOnSignals: Bool = false,
        _ body: @escaping @Sendable (Database) async throws -> Result
    ) async throws -> Result {
        // The pool narrates connection churn at info; only its warnings matter to an operator.
        var poolLogger = logger
        poolLogger.logLevel = max(logger.logLevel, .warning)
        let client = PostgresClient(configuration: url.clientConfiguration, backgroundLogger: poolLogger)
        let database = Database(client: client, url: url, logger: logger)
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
        let group = ServiceGroup(configuration: .init(
            services: [
                .init(service: client),
                .init(service: work, successTerminationBehavior: .gracefullyShutdownGroup,
                      failureTerminationBehavior: .gracefullyShutdownGroup),
            ],
            gracefulShutdownSignals: stopOnSignals ? [.sigterm, .sigint] : [],
            logger: poolLogger))
        try await group.run()
        guard let result = outcome.withLock({ $0 }) else {
            throw NudgeError(.database, "the command stopped before it finished")
        }
        return try result.get()
    }

    func checkReachable() async throws {
        do {
            _ = try await withTimeout(Self.reachTimeout) {
                try await client.query("select 1", logger: logger)
            }
        } catch {
            throw NudgeError(.database, """
                cannot reach the database at \(url) within \(Self.reachTimeout): is the server \
                running, and is DATABASE_URL right?
                """)
        }
    }
}

struct TimedOut: Error {}

/// Runs `operation`, cancelling it and throwing `TimedOut` when it takes longer than `limit`.
func withTimeout<T: Sendable>(_ limit: Duration, _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            try await Task.sleep(for: limit)
            throw TimedOut()
        }
        defer { group.cancelAll() }
        return try await group.next()!
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
