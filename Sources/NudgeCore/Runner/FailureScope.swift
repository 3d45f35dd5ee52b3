import Foundation
import PostgresNIO

/// Whom an error is about: the users whose rows a statement touched, or the whole run.
///
/// A value the server or the decoder cannot take (an `'infinity'` date, a NULL where a value must
/// be, a number out of range, a broken constraint) belongs to the rows that hold it: the runner
/// retries the batch user by user, and only their owner fails. A database that is gone, read-only,
/// out of disk or timed out belongs to the run: it ends with its checkpoint, since every other
/// user would fail the same way.
enum FailureScope: Equatable {
    case users
    case run

    static func of(_ error: any Error) -> FailureScope {
        switch error {
        case let error as PSQLError:
            guard error.code == .server, let state = error.serverInfo?[.sqlState] else { return .run }
            return rowStateClasses.contains(String(state.prefix(2))) ? .users : .run
        case let error as PostgresDecodingError:
            // A column of another type than Nudge reads is the schema, not a row: every user
            // would fail the same way.
            return error.code == .typeMismatch ? .run : .users
        case is DecodingError, is MalformedData:
            return .users
        case let error as NudgeError:
            return error.kind == .database || error.kind == .locked ? .run : .users
        default:
            return .run
        }
    }

    /// SQLSTATE classes that come from the data a statement read or wrote: 22 data exception
    /// (invalid or out-of-range values), 23 integrity constraint violation, 40 transaction
    /// rollback (a deadlock or serialization failure, which a retry user by user resolves), 54
    /// program limit exceeded (an index row too large), P0 raised by PL/pgSQL (`nudge_expect`, a
    /// trigger). Everything else (08 connection, 25 read-only, 53 disk full or out of memory,
    /// 57 canceled or shut down, 58 I/O, XX internal, 42 a statement Nudge got wrong) ends the run.
    private static let rowStateClasses: Set<String> = ["22", "23", "40", "54", "P0"]
}

extension FailureScope {
    /// What makes two users' failures the same failure: the SQLSTATE and message of a database
    /// error (not its detail, which names the row), the column of an unreadable value.
    static func cause(_ error: any Error) -> String {
        switch error {
        case let error as PSQLError:
            return "\(error.serverInfo?[.sqlState] ?? "") \(error.serverInfo?[.message] ?? "\(error.code)")"
        case let error as PostgresDecodingError:
            return "\(error.columnName) \(error.code)"
        default:
            return describe(error)
        }
    }

    /// Whether a batch's user-by-user retry says the trouble is not about rows after all: every
    /// user of a full batch of ten or more failed with one and the same cause, and that cause is
    /// not a value the rows hold (an app's trigger that refuses every write). Bad values, however
    /// many share a batch, stay their users' failures: the run goes on to the next batch.
    static func isSystemic(failed errors: [any Error], of users: Int, fullBatch: Bool) -> Bool {
        guard fullBatch, users >= 10, errors.count == users, errors.allSatisfy({ !isAboutValues($0) }) else { return false }
        return Set(errors.map(cause)).count == 1
    }

    /// An unreadable value, a data exception (22) or a constraint a row breaks (23).
    private static func isAboutValues(_ error: any Error) -> Bool {
        switch error {
        case is PostgresDecodingError, is DecodingError, is MalformedData: return true
        case let error as PSQLError: return ["22", "23"].contains(error.serverInfo?[.sqlState].map { String($0.prefix(2)) } ?? "")
        default: return false
        }
    }
}

/// A `PostgresDecodingError` in an operator's words: which column held what Nudge cannot read,
/// never the value itself.
func describeUnreadable(_ error: PostgresDecodingError) -> String {
    let column = error.columnName == "?column?" ? "column \(error.columnIndex + 1)" : "column \(error.columnName)"
    switch error.code {
    case .missingData:
        return "\(column) is null where a value must be"
    case .typeMismatch:
        return "\(column) is of type \(error.postgresType), which Nudge does not read there (a changed schema?)"
    default:
        return "\(column) holds a \(error.postgresType) value Nudge cannot read ('infinity', NaN or out of range)"
    }
}
