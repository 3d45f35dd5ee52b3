import Foundation
import Logging
import PostgresNIO

/// One-click unsubscribe (RFC 8058, docs/serve.md): a genuine token turns the email type it names
/// off for its user, in both tables that switch it (`email_preferences` and
/// `notification_preferences`), creating the rows where there are none, with every other switch on.
/// Doing it twice changes nothing the second time. Other emails and every push stay as they are.
public enum Unsubscribe {
    public enum Outcome: Sendable, Equatable {
        /// Turned off now, or already off: the user's locale, and whether this request changed anything.
        case done(locale: String, changed: Bool)
        /// The token is genuine but its user no longer exists.
        case unknownUser
    }

    /// Whether the email the token names is on for its user, and their locale; nil when the user
    /// is gone. (`nudge_unsubscribe_state`: the server's role reads no table of users or preferences.)
    public static func state(
        user: UUID, type: EmailType, on connection: PostgresConnection,
        logger: Logger
    ) async throws -> (locale: String, subscribed: Bool)? {
        let query: SQLFragment = "select locale, subscribed from nudge_unsubscribe_state(\(user), \(type.rawValue))"
        for try await (locale, subscribed) in try await connection.query(try query.query(), logger: logger).decode((String, Bool).self) {
            return (locale, subscribed)
        }
        return nil
    }

    /// Turns the email off, in one statement (`nudge_unsubscribe`, which can set a switch off and
    /// never on, migration 0028).
    public static func apply(user: UUID, type: EmailType, on connection: PostgresConnection, logger: Logger) async throws -> Outcome {
        let query: SQLFragment = "select locale, changed from nudge_unsubscribe(\(user), \(type.rawValue))"
        for try await (locale, changed) in try await connection.query(try query.query(), logger: logger).decode((String, Bool).self) {
            return .done(locale: locale, changed: changed)
        }
        return .unknownUser
    }
}
