import Foundation
import Logging
import PostgresNIO

/// Twilio's status callbacks (`POST /webhooks/twilio`): what became of an SMS after Twilio took
/// it, recorded on its `notification_logs` row (seed 000 §04 step 5: "Store delivery receipt").
/// `delivered` sets `status`, `delivered` and `delivered_at`; `undelivered` and `failed` set
/// `status = 'failed'` with Twilio's error code; the statuses on the way (`queued`, `sent`…)
/// change nothing. A delivered SMS is never set back to another status by a callback that
/// arrives late. The row is found by the message's SID, or, for an SMS whose answer Nudge never
/// got (its outcome recorded as unknown), by the outbox row the callback's URL names.
public enum SMSStatus {
    public enum Outcome: Sendable, Equatable {
        case recorded(String)
        /// A status on the way: nothing to record.
        case ignored
        /// No log row is this message's.
        case unknownMessage
    }

    public static func record(fields: [(String, String)], outboxID: Int64?, on connection: PostgresConnection,
                              logger: Logger) async throws -> Outcome {
        let form = Dictionary(fields, uniquingKeysWith: { first, _ in first })
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
        // Already delivered (a late callback), or not Nudge's message.
        let known: SQLFragment = """
            select count(*) from notification_logs l
             where l.channel = 'sms' and (l.provider_id = \(sid) or l.outbox_id = \(outboxID ?? -1))
            """
        for try await count in try await connection.query(try known.query(), logger: logger).decode(Int.self) {
            return count > 0 ? .ignored : .unknownMessage
        }
        return .unknownMessage
    }
}
