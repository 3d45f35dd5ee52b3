import Foundation
import Logging
import PostgresNIO

/// Twilio's status callbacks (`POST /webhooks/twilio`): what became of an SMS after Twilio took
/// it, recorded on its `notification_logs` row (docs/serve.md).
/// `delivered` sets `status`, `delivered` and `delivered_at`; `undelivered` and `failed` set
/// `status = 'failed'` with Twilio's error code; the statuses on the way (`queued`, `sent`…)
/// change nothing. A delivered SMS is never set back to another status by a callback that
/// arrives late. The row is found by the message's SID, or, for an SMS whose answer Nudge never
/// got (its outcome recorded as unknown), by the outbox row the callback's URL names. A callback
/// that comes before its SMS's log is written (its dispatcher still writing the batch) is kept
/// (`sms_status_early`) and applied when the log is.
///
/// The same address takes the replies Twilio relays (the number's "A message comes in"
/// webhook): a STOP (Twilio's `OptOutType`, or the reply's text when Advanced Opt-Out is off)
/// records the number's opt-out (`sms_opt_outs`), a START lifts it. Each reply is applied once,
/// by its `MessageSid` (`sms_replies`): a captured START replayed later changes nothing.
public enum SMSStatus {
    public enum Outcome: Sendable, Equatable {
        case recorded(String)
        /// A status on the way: nothing to record.
        case ignored
        /// Its SMS's log is not written yet: kept, and applied when it is.
        case kept(String)
        /// No log row is this message's.
        case unknownMessage
        /// A reply that stops (true) or restarts (false) SMS to its number.
        case optOut(Bool)
    }

    /// Twilio's default opt-out and opt-in keywords (its "Advanced Opt-Out" defaults).
    static let stopWords: Set<String> = ["STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT", "REVOKE", "OPTOUT"]
    static let startWords: Set<String> = ["START", "YES", "UNSTOP"]

    /// How long a kept status waits for its log.
    static let keptFor: TimeInterval = 7 * 24 * 3600

    public static func record(
        fields: [(String, String)], outboxID: Int64?, on connection: PostgresConnection,
        logger: Logger
    ) async throws -> Outcome {
        let form = Dictionary(fields, uniquingKeysWith: { first, _ in first })
        if let stops = optOut(form), let from = form["From"].flatMap(PhoneNumber.init) {
            // Once per reply: a request replayed (Twilio's signature holds no time) changes nothing.
            // A STOP without its SID (Twilio always sends one) is applied all the same: an opt-out
            // is never lost; a START without one lifts nothing.
            let sid = ["MessageSid", "SmsMessageSid", "SmsSid"].lazy.compactMap { form[$0].flatMap { $0.isEmpty ? nil : $0 } }.first
            if sid == nil {
                guard stops else { return .unknownMessage }
                logger.warning("an SMS reply of STOP came without its MessageSid: applied, without replay protection")
            }
            // nudge_sms_reply (migration 0028): the server's role cannot touch the opt-outs itself.
            let change: SQLFragment = "select nudge_sms_reply(\(sid), \(from.e164), \(stops))"
            var applied = false
            for try await fresh in try await connection.query(try change.query(), logger: logger).decode(Bool.self) { applied = fresh }
            return applied ? .optOut(stops) : .ignored
        }
        guard let sid = form["MessageSid"] ?? form["SmsSid"], !sid.isEmpty, let reported = form["MessageStatus"] ?? form["SmsStatus"] else {
            return .unknownMessage
        }
        guard let status = TwilioWebhook.logStatus(reported) else { return .ignored }
        let error = status == "failed" ? "Twilio: \(reported)" + (form["ErrorCode"].map { " (\($0))" } ?? "") : ""
        // nudge_sms_status (migration 0028): the server's role reads and writes no log itself.
        let query: SQLFragment = "select nudge_sms_status(\(sid), \(status), \(error), \(outboxID))"
        var outcome = ""
        for try await answer in try await connection.query(try query.query(), logger: logger).decode(String.self) { outcome = answer }
        switch outcome {
        case "recorded": return .recorded(status)
        case "ignored": return .ignored
        case "kept": return .kept(status)
        case "unknown": return .unknownMessage
        default: throw NudgeError(.database, "nudge_sms_status answered '\(outcome)'")
        }
    }

    /// Whether a relayed reply stops (true) or restarts (false) SMS to its number; nil for
    /// anything else (a status callback, another reply).
    static func optOut(_ form: [String: String]) -> Bool? {
        switch form["OptOutType"]?.uppercased() {
        case "STOP"?: return true
        case "START"?: return false
        case _?: return nil
        case nil: break
        }
        guard (form["SmsStatus"] ?? form["MessageStatus"]) == "received", let body = form["Body"] else { return nil }
        let word = body.trimmingCharacters(in: .whitespacesAndNewlines.union(.punctuationCharacters)).uppercased()
        if stopWords.contains(word) { return true }
        if startWords.contains(word) { return false }
        return nil
    }

    /// Applies the kept statuses whose logs are written now, and forgets those a week old; how
    /// many were applied.
    public static func applyKept(on connection: PostgresConnection, logger: Logger) async throws -> Int {
        let query: SQLFragment = "select nudge_apply_kept_sms_statuses(\(keptFor))"
        var applied = 0
        for try await count in try await connection.query(try query.query(), logger: logger).decode(Int.self) { applied = count }
        return applied
    }
}
