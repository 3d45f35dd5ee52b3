import Foundation
import Logging
import PostgresNIO

/// dispatch's emails: a batch's emails together, in Resend's batch requests, each marked as it
/// leaves and sent again only as it left (docs/jobs/dispatch.md, "Email (Resend)").
extension DispatchJob {
    /// The batch's emails, together, in Resend's batch requests of up to 100
    /// (`ResendClient.sendBatch`), each request at once, all of them within `outsideTimeLimit`.
    /// A new batch has a key of its own (`ResendClient.batchKey`); its rows record that key, their
    /// addresses and the batch's shelf life (its emails' earliest) as the request leaves (only
    /// while this run's claim on all of them holds), so that
    /// a request without a recorded answer goes again only as it was: an email planned with its
    /// batch's key is sent in that whole batch, rebuilt from the key's rows, whichever of them
    /// this dispatcher holds, and Resend sends none of them twice.
    public func completeTogether(_ changes: [PlannedChange<Change>], run: RunContext) async -> [PlannedChange<Change>] {
        var results = changes.map(\.change.emailResults)
        var keys = changes.map(\.change.emailKeys)
        var fresh: [EmailSlot] = []
        var again: [String: [EmailSlot]] = [:]
        for (change, planned) in changes.enumerated() {
            for (index, email) in planned.change.plan.emails.enumerated() {
                if let held = health.held(.resend, rows: [email.row]) {
                    results[change][index] = held
                } else if push.email == nil {
                    results[change][index] = .notSent("Resend is not configured", after: nil)
                } else if let key = email.batchKey {
                    again[key, default: []].append(EmailSlot(change: change, index: index, email: email))
                } else {
                    fresh.append(EmailSlot(change: change, index: index, email: email))
                }
            }
        }
        if let client = push.email, !fresh.isEmpty || !again.isEmpty {
            var requests: [EmailBatch] = []
            // By shelf life: a batch goes again (after a lost answer) only until its earliest ends,
            // so emails near the end of theirs go together, not with a hundred fresh ones.
            fresh.sort { ($0.email.expiresAt, $0.email.row) < ($1.email.expiresAt, $1.email.row) }
            for start in stride(from: 0, to: fresh.count, by: ResendClient.batchLimit) {
                // Each request's emails in id order, as a batch that goes again is rebuilt from
                // its key's rows: the replay is byte for byte the request that left.
                let slots = fresh[start..<min(start + ResendClient.batchLimit, fresh.count)].sorted { $0.email.row < $1.email.row }
                requests.append(
                    EmailBatch(
                        key: ResendClient.batchKey(rows: slots.map(\.email.row)), rows: slots.map(\.email.row),
                        emails: slots.map(\.email.request), slots: slots, isNew: true,
                        expiresAt: slots.map(\.email.expiresAt).min()))
            }
            if !again.isEmpty {
                switch await batchesAsTheyLeft(Array(again.keys), run: run) {
                case .success(let members):
                    for (key, slots) in again {
                        guard let rows = members[key], Set(slots.map(\.email.row)).isSubset(of: Set(rows.map(\.id))),
                            rows.allSatisfy({ $0.email != nil })
                        else {
                            for slot in slots {
                                results[slot.change][slot.index] = .rejected(
                                    TwilioClient.unknownOutcomePrefix
                                        + "its email's batch left without an answer and cannot be sent again as it was")
                            }
                            continue
                        }
                        requests.append(
                            EmailBatch(
                                key: key, rows: rows.map(\.id), emails: rows.compactMap(\.email), slots: slots,
                                isNew: false, expiresAt: nil))
                    }
                case .failure(let why):
                    for slot in again.values.joined() {
                        results[slot.change][slot.index] = .notSent(
                            "could not read its email's batch: \(why)",
                            after: DispatchRules.timeCriticalRetry)
                    }
                }
            }
            for (slot, result, key) in await send(requests, through: client, run: run) {
                results[slot.change][slot.index] = result
                keys[slot.change][slot.index] = key
            }
        }
        return changes.indices.map { index in
            let planned = changes[index]
            var change = planned.change
            change.emailResults = results[index]
            change.emailKeys = keys[index]
            return PlannedChange(
                itemID: planned.itemID, change: change, work: planned.work, notifications: planned.notifications,
                tally: planned.tally)
        }
    }

    /// One Resend batch request: its key, its rows and their emails in order, and the emails of
    /// this dispatcher's batch among them.
    private struct EmailBatch: Sendable {
        let key: String
        let rows: [Int64]
        let emails: [EmailRequest]
        let slots: [EmailSlot]
        /// Whether it leaves for the first time (its rows are marked as it leaves).
        let isNew: Bool
        /// A new batch's shelf life: its emails' earliest end.
        let expiresAt: Date?
    }

    /// One email of a batch's changes: which change, which of its emails.
    private struct EmailSlot: Sendable {
        let change: Int
        let index: Int
        let email: PlannedEmail
    }

    /// Sends the requests at once (they share Resend's pace and connections), within
    /// `outsideTimeLimit`; each email of this dispatcher's batch with its answer. A request still
    /// waiting for its turn at the bound does not leave; one cut off on the way is unanswered
    /// (it goes again under its key).
    private func send(
        _ requests: [EmailBatch], through client: ResendClient,
        run: RunContext
    ) async -> [(EmailSlot, SendResult, String)] {
        guard !requests.isEmpty else { return [] }
        let limit = outsideTimeLimit ?? .seconds(60)
        return await withTaskGroup(of: [(EmailSlot, SendResult, String)]?.self) { group in
            group.addTask {
                try? await run.waitClock.sleep(for: limit)
                return nil
            }
            for request in requests {
                group.addTask { await self.send(request, through: client, run: run) }
            }
            var answered: [(EmailSlot, SendResult, String)] = []
            var remaining = requests.count
            while remaining > 0, let done = await group.next() {
                guard let done else {
                    group.cancelAll()
                    continue
                }
                answered += done
                remaining -= 1
            }
            group.cancelAll()
            return answered
        }
    }

    /// One batch request, its rows marked as it leaves when it is new; its answer is recorded
    /// once for the provider's health.
    private func send(_ request: EmailBatch, through client: ResendClient, run: RunContext) async -> [(EmailSlot, SendResult, String)] {
        // Health is asked again once the request has its turn: a batch that waited while Resend
        // was found down stays (nothing is marked, nothing leaves).
        let health = self.health
        let rows = request.rows
        let isNew = request.isNew
        let leaving: @Sendable () async -> SendResult? = {
            if let held = health.held(.resend, rows: rows) { return held }
            guard isNew else { return nil }
            return await self.markLeaving(request, run: run)
                ? nil : .notSent("the claim on its rows ended before their batch left", after: 1)
        }
        // Resend's rate is the team's: every dispatcher (overlapping cron minutes, every shard)
        // takes its turns from the database's one pace.
        let pace = run.database.map { client.sharedPace($0, logger: run.logger) }
        let answers = await client.sendBatch(request.emails, key: request.key, pace: pace, waitClock: run.waitClock, leaving: leaving)
        // One request, one answer for health: a batch of a hundred unanswered is one outage.
        if let answer = answers.first(where: { if case .delivered = $0 { false } else { true } }) ?? answers.first {
            health.record(answer, from: .resend, device: request.key)
        }
        var byRow: [Int64: SendResult] = [:]
        for (row, answer) in zip(request.rows, answers) { byRow[row] = answer }
        return request.slots.map { slot in
            (slot, byRow[slot.email.row] ?? .unavailable("Resend gave no answer for it", after: nil), request.key)
        }
    }

    /// Records on a new batch's rows their key, addresses and the time, as its request is about
    /// to leave: all of them or none, and only while this run's claim on each holds. False
    /// (nothing leaves) otherwise, or when the database did not answer.
    private func markLeaving(_ request: EmailBatch, run: RunContext) async -> Bool {
        guard let database = run.database else { return false }
        let claim = run.claim
        let logger = run.logger
        let rows = request.rows
        let addresses = request.emails.map(\.to)
        let key = request.key
        let expiresAt = min(request.expiresAt ?? .distantFuture, run.now.addingTimeInterval(ResendClient.keyLifetime))
        // The run's clock (the key's lifetime counts from it).
        let now = run.now
        do {
            return try await database.withConnection { connection in
                try await database.bounded(connection) {
                    let answer = try await connection.query(
                        """
                        with mine as (
                            select o.id from notification_outbox o
                             where o.id = any(\(rows)) and o.status = 'sending' and o.claimed_by = \(claim) and o.request_key is null
                               for update
                        ), whole as (select count(*) = \(rows.count) as held from mine)
                        update notification_outbox o
                           set request_key = \(key), request_to = v.address, request_left_at = \(now), request_expires_at = \(expiresAt)
                          from unnest(\(rows), \(addresses)) as v(id, address), whole
                         where o.id = v.id and whole.held and o.id in (select id from mine)
                        returning o.id
                        """, logger: logger)
                    // (Read to its end: the connection goes back to the pool ready for the next.)
                    var marked = 0
                    for try await _ in answer.decode(Int64.self) { marked += 1 }
                    return marked == rows.count
                }
            }
        } catch {
            logger.warning("could not record a batch of emails before sending it; it waits", metadata: [LogKey.reason: "\(describe(error))"])
            return false
        }
    }

    /// The rows of batches that left before, by key, in id order, each with its email rebuilt as
    /// it left (nil when it can no longer be).
    private func batchesAsTheyLeft(_ keys: [String], run: RunContext)
        async -> Result<[String: [(id: Int64, email: EmailRequest?)]], NudgeError>
    {
        guard let database = run.database else { return .failure(NudgeError(.configuration, "no database")) }
        let logger = run.logger
        do {
            return .success(
                try await database.withConnection { connection in
                    try await database.bounded(connection) {
                        let answer = try await connection.query(
                            """
                            select request_key, id, coalesce(title, ''), coalesce(body, ''), payload::text, request_to
                              from notification_outbox where request_key = any(\(keys)) order by request_key, id
                            """, logger: logger)
                        var members: [String: [(id: Int64, email: EmailRequest?)]] = [:]
                        for try await (key, id, subject, text, payload, address)
                            in answer.decode((String, Int64, String, String, String, String?).self)
                        {
                            let email = EmailPayload.decode(payload).flatMap { payload in
                                address.map { DispatchRules.emailRequest(subject: subject, text: text, payload: payload, to: $0) }
                            }
                            members[key, default: []].append((id, email))
                        }
                        return members
                    }
                })
        } catch {
            return .failure(NudgeError(.database, describe(error)))
        }
    }
}
