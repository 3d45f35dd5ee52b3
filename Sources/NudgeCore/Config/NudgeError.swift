import PostgresNIO

/// Errors that end a command. Each says what is wrong and what to do, and never carries a secret:
/// the database password, provider keys and tokens are kept out of every description.
public struct NudgeError: Error, CustomStringConvertible, Sendable {
    public enum Kind: Sendable {
        /// Bad configuration or input found at run time: exit 1.
        case configuration
        /// The database cannot be reached or went away: exit 1.
        case database
        /// A usage error the argument parser could not see (an unknown job, a bad date): exit 64.
        case usage
        /// Another run of the same job and shard holds the lock: exit 75.
        case locked
    }

    public let kind: Kind
    public let message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }

    public var exitCode: Int32 {
        switch kind {
        case .configuration, .database: 1
        case .usage: 64
        case .locked: 75
        }
    }
}

/// A readable description of any error, for the ledger, logs and the command line: the server's
/// own message for database errors (PSQLError's description is deliberately generic), free of
/// connection details and secrets.
public func describe(_ error: any Error) -> String {
    if let error = error as? PostgresDecodingError {
        return "unreadable row: " + describeUnreadable(error)
    }
    if let error = error as? PSQLError {
        if let message = error.serverInfo?[.message] {
            let detail = error.serverInfo?[.detail].map { " (\($0))" } ?? ""
            return "database: \(message)\(detail)"
        }
        return "database: \(error.code)"
    }
    return String(describing: error)
}
