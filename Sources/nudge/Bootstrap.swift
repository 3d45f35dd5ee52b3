import ArgumentParser
import Foundation
import Logging
import NudgeCore

/// What every command needs: the environment, Nudge's files, the job definitions, a logger.
struct Bootstrap {
    let environment: Environment
    let home: NudgeHome
    let catalog: JobCatalog
    let logger: Logger

    static func make() throws(NudgeError) -> Bootstrap {
        let (environment, _) = try Environment.loading()
        let logger = try configureLogging(environment)
        let home = try NudgeHome.locate(environment)
        let catalog = try JobCatalog(directory: home.jobsDirectory)
        return Bootstrap(environment: environment, home: home, catalog: catalog, logger: logger)
    }

    func databaseURL() throws(NudgeError) -> DatabaseURL {
        try DatabaseURL(
            environment.require(
                "DATABASE_URL", hint: "set it to the postgres:// URL of Nudge's database (scripts/demo prints one)"),
            // The database's own roots: never those the providers' clients trust (NUDGE_CA_FILE).
            extraTrustedRoots: environment["NUDGE_DB_CA_FILE"],
            allowInsecurePassword: environment.flag("NUDGE_DB_ALLOW_INSECURE_PASSWORD", default: false))
    }

    /// Runs `body` against the database of `DATABASE_URL`, in sessions the server knows as
    /// `nudge <command>` (`application_name`).
    /// `connections`: the most the command holds at once (a dispatch run: one per lane, one for
    /// provider tokens, one to spare).
    func withDatabase<Result: Sendable>(
        _ command: String, limits: DatabaseLimits = .forOperators, stopOnSignals: Bool = false,
        connections: Int = 4,
        _ body: @escaping @Sendable (Database) async throws -> Result
    ) async throws -> Result {
        try await Database.with(
            try databaseURL(), logger: logger, applicationName: "nudge \(command)", limits: limits,
            stopOnSignals: stopOnSignals, connections: connections, body)
    }

    func definition(_ name: String) throws -> JobDefinition {
        guard let definition = catalog.definition(named: name) else {
            throw ValidationError("unknown job '\(name)'; `nudge list` shows the jobs: \(catalog.definitions.map(\.name).joined(separator: ", "))")
        }
        return definition
    }

    private static func configureLogging(_ environment: Environment) throws(NudgeError) -> Logger {
        let json: Bool
        switch environment["NUDGE_LOG_FORMAT"]?.lowercased() {
        case nil: json = !StandardError.isTerminal
        case "json": json = true
        case "text": json = false
        case let other?: throw NudgeError(.configuration, "NUDGE_LOG_FORMAT must be json or text, not '\(other)'")
        }
        var level: Logger.Level = json ? .info : .error
        if let raw = environment["NUDGE_LOG_LEVEL"] {
            guard let parsed = Logger.Level(rawValue: raw.lowercased()) else {
                throw NudgeError(.configuration, "NUDGE_LOG_LEVEL must be one of trace, debug, info, notice, warning, error, critical")
            }
            level = parsed
        }
        let chosenLevel = level
        LoggingSystem.bootstrap { label in
            json ? JSONLogHandler(label: label, level: chosenLevel) as any LogHandler : TerminalLogHandler(level: chosenLevel)
        }
        var logger = Logger(label: "nudge")
        logger.logLevel = level
        return logger
    }
}

/// Runs a command's work, turning any error but a usage error or an exit status into a clear
/// message and the exit status it calls for.
func reportingFailures<Result>(_ work: () async throws -> Result) async throws -> Result {
    do {
        return try await work()
    } catch let error as ValidationError {
        throw error
    } catch let error as ExitCode {
        throw error
    } catch {
        throw fail(error)
    }
}

/// Prints a clear message and returns the exit status the error calls for.
func fail(_ error: any Error) -> ExitCode {
    StandardError.write("nudge: error: \(describe(error))\n")
    return ExitCode(exitStatus(for: error))
}

func exitStatus(for error: any Error) -> Int32 {
    (error as? NudgeError)?.exitCode ?? 1
}

/// Parses `--now`: ISO 8601 with a zone (`2026-03-14T09:00:00Z`, `…+01:00`, fractional seconds allowed).
func parseInstant(_ text: String, option: String) throws -> Date {
    let formatter = ISO8601DateFormatter()
    if let date = formatter.date(from: text) { return date }
    formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    if let date = formatter.date(from: text) { return date }
    throw ValidationError("\(option) must be an ISO 8601 instant with a time zone, such as 2026-03-14T09:00:00Z, not '\(text)'")
}

func parseDay(_ text: String, option: String) throws -> LocalDate {
    guard let day = LocalDate(iso8601: text) else {
        throw ValidationError("\(option) must be a real day written YYYY-MM-DD, not '\(text)'")
    }
    return day
}
