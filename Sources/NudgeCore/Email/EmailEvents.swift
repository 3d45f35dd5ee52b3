import Foundation
import Logging
import PostgresNIO

/// What became of an email after Resend took it (docs/report.md, "Receipts"), from Resend's
/// webhooks (`POST /webhooks/resend`, `ResendWebhook`): each event is kept (`email_events`, once
/// per `svix-id`: a retry or a replay changes nothing) and its email's log row is set from all the
/// events of that email, in whatever order they came:
/// - `email.delivered`: `delivered`, `delivered_at`, status `delivered`;
/// - `email.opened`, `email.clicked`: `opened`, `opened_at` (a click is an open, where the open
///   pixel was blocked), `clicked_at`, status `opened`;
/// - `email.bounced`: `bounced_at`, `bounce_type` (`Permanent/General`…), status `failed` with
///   the bounce's message; a `Permanent` bounce suppresses the address (`email_suppressions`):
///   dispatch sends it nothing more. A `Transient` or `Undetermined` one does not;
/// - `email.complained` (the recipient marked it as spam): `complained_at`; the address is
///   suppressed and its user's optional emails (`EmailType`) are turned off, so that a new
///   address gets only the emails a user cannot stop;
/// - `email.delivery_delayed`: kept; the log says so while nothing else is known.
/// An event whose email has no log yet (its dispatcher still writing the batch) is applied as
/// that log is written (a trigger), or, when it came while the log was being written (neither saw
/// the other), by the dispatcher right after its batch (`applyWhileWritten`); one for an email
/// Nudge never sent is kept, answered and logged once, and changes nothing but the suppression
/// of a hard-bounced address. Only an email's first open and first click are kept (later ones
/// change nothing its log says), and an event that comes while another of the same email is being
/// recorded is answered 503 at once, for Resend to send again (docs/serve.md): a burst of one
/// email's events never holds the server's connections.
public enum EmailEvents {
    public enum Outcome: Sendable, Equatable {
        /// Kept and applied; whether a log row is this email's.
        case recorded(type: String, logged: Bool)
        /// A retry of an event recorded before (the same `svix-id`, a newer `svix-timestamp`):
        /// answered, nothing applied twice.
        case retried
        /// A delivery already seen (the same `svix-id`, a `svix-timestamp` not newer): someone
        /// sent a captured request again. Refused, nothing written.
        case replayed
        /// Not an email event (`contact.*`, `domain.*`): nothing to record.
        case ignored(type: String)
        /// An open or a click of an email already opened or clicked: nothing kept.
        case repeated(type: String)
        /// Another event of the same email is being recorded: answered 503, for Resend (Svix) to
        /// send it again after a while.
        case busy
    }

    /// Records one verified event, in one statement (`nudge_email_event`, migration 0028, which runs
    /// with its owner's rights: the server's role writes no table of events, suppressions or
    /// preferences itself). `deliveredAt` is its `svix-timestamp`. The events of one email are
    /// recorded one at a time (a transaction-scoped advisory lock on the email's id, tried:
    /// `.busy` when another holds it), so that two of them never apply over each other and none
    /// waits for another.
    public static func record(
        _ event: ResendWebhook.Event, svixID: String, deliveredAt: Int64, receivedAt: Date,
        on connection: PostgresConnection, logger: Logger
    ) async throws -> Outcome {
        guard let emailID = event.emailID else { return .ignored(type: event.type) }
        let query: SQLFragment = """
            select nudge_email_event(\(svixID), \(deliveredAt), \(emailID), \(event.type), \(event.occurredAt), \(event.to),
                                     \(event.bounceType), \(event.bounceSubType), \(event.bounceMessage.map { String($0.prefix(1_000)) }),
                                     \(receivedAt))
            """
        var outcome = ""
        for try await answer in try await connection.query(try query.query(), logger: logger).decode(String.self) { outcome = answer }
        switch outcome {
        case "busy": return .busy
        case "repeated": return .repeated(type: event.type)
        case "replayed": return .replayed
        case "retried": return .retried
        case "logged", "unlogged": return .recorded(type: event.type, logged: outcome == "logged")
        default: throw NudgeError(.database, "nudge_email_event answered '\(outcome)'")
        }
    }

    /// The emails' logs a dispatch run wrote in the last seconds whose events came while they
    /// were being written: the webhook could not see those logs yet, nor their trigger the events.
    /// Dispatch runs it after each batch; the same events give the same rows, so a log set already
    /// is set again to what it is. How many emails' logs it set.
    public static func applyWhileWritten(run: Int64, on connection: PostgresConnection, logger: Logger) async throws -> Int {
        let query: SQLFragment = """
            select nudge_apply_email_receipts(array(
                select l.provider_id from notification_logs l
                 where l.channel = 'email' and l.run_id = \(run) and l.created_at > now() - interval '10 seconds'
                   and exists (select 1 from email_events e where e.email_id = l.provider_id)))
            """
        var applied = 0
        for try await _ in try await connection.query(try query.query(), logger: logger).decode(String.self) { applied += 1 }
        return applied
    }
}
