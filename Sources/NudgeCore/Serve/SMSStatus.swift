import Foundation
import Logging
import PostgresNIO

/// Twilio's status callbacks (`POST /webhooks/twilio`): what became of an SMS after Twilio took
/// it, recorded on its `notification_logs` row (seed 000 §04 step 5: "Store delivery receipt").
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

    public static func record(fields: [(String, String)], outboxID: Int64?, on connection: PostgresConnection,
                              logger: Logger) async throws -> Outcome {
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
        guard let sid = form["MessageSid"] ?? form["SmsSid"], let reported = form["MessageStatus"] ?? form["SmsStatus"] else {
            return .unknownMessage
        }
        guard let status = TwilioWebhook.logStatus(reported) else { return .ignored }
        let error = status == "failed" ? "Twilio: \(reported)" + (form["ErrorCode"].map { " (\($0))" } ?? "") : ""
        let query: SQLFragment = """
            update notification_logs l
               set status = \(status), delivered = l.delivered or \(status) = 'delivered',
                   delivered_at = case when \(status) = 'delivered' then coalesce(l.delivered_at, now()) else l.delivered_at end,
                   error_msg = coalesce(nullif(\(error), ''), case when \(status) = 'delivered' then null else l.error_msg end),
                   provider_id = coalesce(l.provider_id, \(sid))
             where l.channel = 'sms' and l.status not in ('delivered', 'opened')
               and (l.provider_id = \(sid)
                    -- the log of an SMS whose answer never came: only when no log has the SID
                    or (l.provider_id is null and l.outbox_id = \(outboxID ?? -1) and l.error_msg like 'outcome unknown%'
                        and not exists (select 1 from notification_logs k where k.channel = 'sms' and k.provider_id = \(sid))))
            returning l.id
            """
        var updated = 0
        for try await _ in try await connection.query(try query.query(), logger: logger).decode(UUID.self) { updated += 1 }
        if updated > 0 { return .recorded(status) }
        // Already delivered (a late callback): its log has the SID.
        let known: SQLFragment = "select count(*) from notification_logs l where l.channel = 'sms' and l.provider_id = \(sid)"
        for try await count in try await connection.query(try known.query(), logger: logger).decode(Int.self) where count > 0 {
            return .ignored
        }
        // An SMS of Nudge's whose log is not written yet: kept for it (a delivery outranks a failure).
        // The outbox id is Nudge's own: it is in the callback URL dispatch gave Twilio, which
        // Twilio's signature covers (and `nudge serve` may not read the outbox); one that never
        // gets a log is forgotten after `keptFor`.
        guard let outboxID else { return .unknownMessage }
        let keep: SQLFragment = """
            insert into sms_status_early (message_sid, outbox_id, status, error_msg, received_at)
            values (\(sid), \(outboxID), \(status), nullif(\(error), ''), now())
            on conflict (message_sid) do update
               set status = case when sms_status_early.status = 'delivered' then 'delivered' else excluded.status end,
                   error_msg = case when sms_status_early.status = 'delivered' then null else excluded.error_msg end
            returning message_sid
            """
        var kept = false
        for try await _ in try await connection.query(try keep.query(), logger: logger).decode(String.self) { kept = true }
        guard kept else { return .unknownMessage }
        // The log may have been written meanwhile, after its write read the kept statuses.
        _ = try await applyKept(on: connection, logger: logger)
        return .kept(status)
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
        let query: SQLFragment = """
            with stale as (
                delete from sms_status_early where received_at < now() - make_interval(secs => \(keptFor))
            ), found as (
                select e.message_sid, e.status, e.error_msg, e.received_at, l.id as log_id
                  from sms_status_early e
                  join notification_logs l
                    on l.channel = 'sms'
                   and (l.provider_id = e.message_sid
                        or (l.provider_id is null and l.outbox_id = e.outbox_id and l.error_msg like 'outcome unknown%'))
            ), applied as (
                delete from sms_status_early e using found f where e.message_sid = f.message_sid
            )
            update notification_logs l
               set status = f.status, delivered = l.delivered or f.status = 'delivered',
                   delivered_at = case when f.status = 'delivered' then coalesce(l.delivered_at, f.received_at) else l.delivered_at end,
                   error_msg = coalesce(f.error_msg, case when f.status = 'delivered' then null else l.error_msg end),
                   provider_id = coalesce(l.provider_id, f.message_sid)
              from found f
             where l.id = f.log_id and l.status not in ('delivered', 'opened')
            returning l.id
            """
        var applied = 0
        for try await _ in try await connection.query(try query.query(), logger: logger).decode(UUID.self) { applied += 1 }
        return applied
    }
}
