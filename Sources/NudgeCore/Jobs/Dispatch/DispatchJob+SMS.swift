import Foundation
import Logging
import PostgresNIO

/// dispatch's SMS: one request each, marked as it leaves, and an unclear outcome settled by
/// asking Twilio's message list (docs/jobs/dispatch.md, "SMS (Twilio)").
extension DispatchJob {
    /// What becomes of an SMS's mark (`request_left_at`) beside what its answer says.
    public enum SMSMark: Sendable, Equatable {
        /// It goes with a clear answer, and stays with any other.
        case asAnswered
        /// It goes though the answer is not clear: Twilio's list has no such message, or the
        /// request never reached Twilio (it goes again as new).
        case goes
        /// It stays, and Twilio's list is believed from this long after the write (Twilio
        /// answered, unclearly).
        case shownAfter(TimeInterval)
    }

    /// One SMS through Twilio, unless Twilio is down, paused or not configured. Twilio has no
    /// idempotency key, so once a connection is free for it, the row records that its request is
    /// leaving (and to which number) before it is written, and only while this run's claim on it
    /// holds. The mark stays while the outcome is unclear (a time-out, a 5xx, a dispatcher that
    /// died): the row's next turn asks Twilio whether it has the message (`resolve`) instead of
    /// sending it. A request that waited for a connection and never got one did not leave: no
    /// mark, and it is tried again like any other. Also returns what becomes of its mark.
    func send(_ text: PlannedSMS, run: RunContext) async -> (SendResult, SMSMark) {
        if let held = health.held(.twilio, rows: [text.row]) { return (held, .asAnswered) }
        guard let client = push.sms else { return (.notSent("Twilio is not configured", after: nil), .asAnswered) }
        if let left = text.leftAt { return await resolve(text, leftAt: left, through: client, run: run) }
        guard let database = run.database else {
            return (.notSent("no database to record the SMS's request in", after: nil), .asAnswered)
        }
        // The mark is on the database's clock, the real time Twilio's list is read against (the
        // run's clock stands still at an explicit --now).
        let row = text.row
        let claim = run.claim
        let logger = run.logger
        let number = text.request.to.e164
        @Sendable func mark(on connection: PostgresConnection) async throws -> Bool {
            try await database.bounded(connection) {
                let rows = try await connection.query(
                    """
                    update notification_outbox set request_left_at = now(), request_to = \(number)
                     where id = \(row) and status = 'sending' and claimed_by = \(claim) and request_left_at is null
                    returning id
                    """, logger: logger)
                // (Read to its end: the connection is ready for the next query.)
                var marked = false
                for try await _ in rows.decode(Int64.self) { marked = true }
                return marked
            }
        }
        let health = self.health
        let result = await client.send(text.request, clock: run.clock) { () async -> SendResult? in
            // Asked again once a connection is free for it: an SMS that waited while Twilio was
            // found down stays, parked, rather than going into the outage.
            if let held = health.held(.twilio, rows: [row]) { return held }
            do {
                let marked = try await database.withConnection(mark)
                return marked ? nil : .notSent("the claim on the row ended before its SMS left", after: DispatchRules.timeCriticalRetry)
            } catch {
                return .notSent("could not record the SMS's request before sending: \(error)", after: DispatchRules.timeCriticalRetry)
            }
        }
        health.record(result, from: .twilio, device: number)
        // A request that never reached Twilio (no connection was made) leaves no question; one
        // Twilio answered unclearly is over, and its list soon shows whether Twilio took it.
        if case .unavailable(let why, _) = result, why.hasSuffix(TwilioClient.neverLeftNote) { return (result, .goes) }
        if case .notSent(TwilioClient.boundBeforeLeaving, _) = result { return (result, .goes) }
        if TwilioClient.answeredUnclearly(result) { return (result, .shownAfter(TwilioClient.listShowsAfterAnAnswer)) }
        return (result, .asAnswered)
    }

    /// Asks Twilio whether it has the message of an SMS whose request left at `leftAt` without a
    /// clear answer: found (or a status callback for its row already came), it was sent;
    /// absent once the list has had time to show it (`TwilioClient.listShowsAfter`), it goes
    /// again as new, due now, its mark gone; absent before that, or no answer, it waits (its
    /// mark kept), and fails as of unknown outcome once its shelf life has ended. A list's
    /// answer says nothing of whether Twilio takes messages: only one it could not give is
    /// recorded for Twilio's health.
    private func resolve(
        _ text: PlannedSMS, leftAt: Date, through client: TwilioClient,
        run: RunContext
    ) async -> (SendResult, SMSMark) {
        let left = leftAt.formatted(.iso8601)
        guard let (now, early) = await earlyStatus(of: text.row, run: run) else {
            return (.notSent("could not read the database before asking Twilio about its request", after: 1), .asAnswered)
        }
        if let sid = early { return (.delivered(providerID: sid), .asAnswered) }
        switch await client.find(text.request, leftAt: leftAt) {
        case .sent(let sid):
            return (.delivered(providerID: sid), .asAnswered)
        case .absent:
            let trusted = text.shownBy ?? leftAt.addingTimeInterval(TwilioClient.listShowsAfter)
            guard now >= trusted else {
                return (
                    .notSent(
                        "Twilio's list does not show its request that left at \(left) yet; asked again",
                        after: max(1, trusted.timeIntervalSince(now))), .asAnswered
                )
            }
            return (.notSent("Twilio has no message for its request that left at \(left): it goes again", after: 0), .goes)
        case .notAsked(let why):
            return (.notSent(why, after: 1), .asAnswered)
        case .unanswered(let why, let answer):
            health.record(answer, from: .twilio, device: text.request.to.e164)
            guard run.now < text.expiresAt else {
                return (
                    .rejected(TwilioClient.unknownOutcome("its request left at \(left); \(why), until its shelf life ended")),
                    .asAnswered
                )
            }
            return (.unavailable("its request left at \(left) without a clear answer; \(why)", after: nil), .asAnswered)
        }
    }

    /// The database's time (the clock the marks are on), and the SID of a status callback Twilio
    /// already sent for the row's SMS (kept in `sms_status_early` until its log is written):
    /// proof that Twilio has it. Nil when the database did not answer.
    private func earlyStatus(of row: Int64, run: RunContext) async -> (now: Date, sid: String?)? {
        guard let database = run.database else { return nil }
        let logger = run.logger
        do {
            return try await database.withConnection { connection in
                try await database.bounded(connection) {
                    let rows = try await connection.query(
                        """
                        select now(), (select message_sid from sms_status_early
                                        where outbox_id = \(row) and message_sid <> '' order by received_at limit 1)
                        """, logger: logger)
                    var answer: (now: Date, sid: String?)?
                    for try await (now, sid) in rows.decode((Date, String?).self) { answer = (now, sid) }
                    return answer
                }
            }
        } catch {
            logger.warning("could not read the database before asking Twilio about an SMS", metadata: [LogKey.reason: "\(describe(error))"])
            return nil
        }
    }
}
