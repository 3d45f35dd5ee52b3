import Foundation
import Logging
import PostgresNIO

/// One-click unsubscribe (RFC 8058, seed 003 Feature 7): a genuine token turns the email type it
/// names off for its user, in both tables that switch it (`email_preferences` and
/// `notification_preferences`), creating the rows with the seed's defaults where there are none.
/// Doing it twice changes nothing the second time. Other emails and every push stay as they are.
public enum Unsubscribe {
    public enum Outcome: Sendable, Equatable {
        /// Turned off now, or already off: the user's locale, and whether this request changed anything.
        case done(locale: String, changed: Bool)
        /// The token is genuine but its user no longer exists.
        case unknownUser
    }

    /// Whether the email the token names is on for its user, and their locale; nil when the user is gone.
    public static func state(user: UUID, type: EmailType, on connection: PostgresConnection,
                             logger: Logger) async throws -> (locale: String, subscribed: Bool)? {
        let query: SQLFragment = """
            select u.locale, coalesce(ep.\(unescaped: type.emailPreference), true)
                             and coalesce(np.\(unescaped: type.notificationPreference), true)
              from users u
              left join email_preferences ep on ep.user_id = u.id
              left join notification_preferences np on np.user_id = u.id
             where u.id = \(user)
            """
        for try await (locale, subscribed) in try await connection.query(try query.query(), logger: logger).decode((String, Bool).self) {
            return (locale, subscribed)
        }
        return nil
    }

    /// Turns the email off, in one statement.
    public static func apply(user: UUID, type: EmailType, on connection: PostgresConnection, logger: Logger) async throws -> Outcome {
        let ep = type.emailPreference, np = type.notificationPreference
        let query: SQLFragment = """
            with target as (select id, locale from users where id = \(user)),
            emails as (
                insert into email_preferences (user_id, \(unescaped: ep), updated_at)
                select id, false, now() from target
                on conflict (user_id) do update set \(unescaped: ep) = false, updated_at = now()
                 where email_preferences.\(unescaped: ep)
                returning 1),
            notifications as (
                insert into notification_preferences (user_id, \(unescaped: np), updated_at)
                select id, false, now() from target
                on conflict (user_id) do update set \(unescaped: np) = false, updated_at = now()
                 where notification_preferences.\(unescaped: np)
                returning 1)
            select locale, (select count(*) from emails) + (select count(*) from notifications) > 0 from target
            """
        for try await (locale, changed) in try await connection.query(try query.query(), logger: logger).decode((String, Bool).self) {
            return .done(locale: locale, changed: changed)
        }
        return .unknownUser
    }
}
