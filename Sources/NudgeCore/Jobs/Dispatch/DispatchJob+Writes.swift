import Foundation
import Logging
import PostgresNIO

/// dispatch's one write per batch (`DispatchJob`): each row's new state, a log row per attempt,
/// suppression or deferral, and the tokens providers called invalid.
extension DispatchJob {
    // MARK: Writing

    /// Per row, what became of it; per attempt (and per suppression or deferral), a log row; the
    /// tokens providers called invalid, deactivated.
    public func writes(for changes: [PlannedChange<Change>], run: RunContext) -> BatchWrites {
        var updates = RowUpdates()
        var logs = LogRows()
        var invalid: [(userID: UUID, device: Device, row: Int64)] = []
        var emailsSent: [(userID: UUID, type: String, providerID: String, row: Int64)] = []
        // Preview pushes that could not be delivered: their fallback SMS goes at once
        // (docs/jobs/preview-notifications.md).
        var fallbacksNow: [(userID: UUID, call: UUID, scheduledAt: String, row: Int64)] = []
        // Preview pushes that left now: a path C fallback SMS waits 30 seconds from then
        // (docs/jobs/preview-notifications.md).
        var pushesLeft: [(userID: UUID, call: UUID, scheduledAt: String, at: Date, row: Int64)] = []
        var refusedPreviews: [(call: UUID, row: Int64, scheduledAt: Date, text: String, reason: String)] = []
        // Numbers whose SMS Twilio refused because they replied STOP (21610).
        var optedOut: [(number: String, row: Int64)] = []
        // Fallbacks claimed with their push, ahead of their time, and put back: by call, their update.
        var releasedFallbacks: [String: Int] = [:]
        // Each batch request's highest attempt among its rows, across the batch's users.
        var requestAttempts: [String: Int] = [:]
        for planned in changes {
            for row in planned.change.rows {
                guard case .email(let index)? = planned.change.plan.outcomes[row.id],
                    let key = planned.change.emailKeys[index] ?? planned.change.plan.emails[index].batchKey
                else { continue }
                requestAttempts[key] = max(requestAttempts[key] ?? 0, row.attempts)
            }
        }
        /// An email's or an SMS's row after its one request: settled, and the attempt logged. For an
        /// SMS, an answer that says Twilio took nothing (its rate limit, its configuration) is no
        /// attempt. Returns the provider's id when it was sent.
        @discardableResult
        func settleSingle(
            _ row: QueuedNotification, userID: UUID, result: SendResult?, provider: DeliveryProvider,
            expiresAt: Date, forgetRequest: Bool = false, keepRequest: Bool = false, shownAfter: TimeInterval? = nil,
            request: String? = nil
        ) -> String? {
            // An email that left in a batch request retries on that request's jitter and its
            // highest attempt, whatever each row's own: the batch comes due, and is claimed and
            // sent again, together.
            let jitter = request.map { Self.jitter(request: $0) } ?? Self.jitter(delivery: row.id, attempt: row.attempts)
            let settled =
                row.channel == .sms
                ? DispatchRules.settleSMS(row, result: result, now: run.now, expiresAt: expiresAt, jitter: jitter)
                : DispatchRules.settleEmail(
                    row, result: result, now: run.now, expiresAt: expiresAt, jitter: jitter,
                    waitingSince: request == nil ? nil : row.requestLeftAt ?? run.now,
                    attemptsOfRequest: request.flatMap { requestAttempts[$0] })
            updates.add(
                row, status: settled.status.outbox, next: settled.nextAttemptAt, deliveredTo: settled.deliveredTo,
                deliveryID: row.id, sentAt: settled.sentAt, error: settled.lastError, attemptUndone: !settled.countsAsAttempt,
                waitingFor: settled.parkedFor, forgetRequest: forgetRequest, keepRequest: keepRequest, shownAfter: shownAfter)
            let provider = provider.rawValue
            switch result {
            case .delivered(let providerID)?:
                logs.add(
                    userID, row, status: .sent, provider: provider, providerID: providerID, error: nil, sentAt: run.now,
                    device: nil, content: nil, runID: run.runID)
                return providerID
            case .notSent?, nil:
                return nil
            case .unavailable?:
                // No answer from the provider: a wait, no attempt (the row's last error says why).
                return nil
            case .throttled?:
                // A wait the provider asked for (its rate), not an attempt: nothing to log.
                return nil
            case .configuration? where row.channel == .sms:
                return nil
            case let other?:
                logs.add(
                    userID, row, status: .failed, provider: provider, providerID: nil, error: other.reason, sentAt: nil,
                    device: nil, content: nil, runID: run.runID)
                return nil
            }
        }
        let never = Date(timeIntervalSince1970: 0)
        for planned in changes {
            let userID = planned.itemID
            let change = planned.change
            for row in change.rows {
                guard let outcome = change.plan.outcomes[row.id] else { continue }
                switch outcome {
                case .deliver(let index):
                    let delivery = change.plan.deliveries[index]
                    let results = change.results[index]
                    // One jitter for the delivery: its rows stay together for their retry.
                    let settled = DispatchRules.settle(
                        row, delivery: delivery, results: results, now: run.now,
                        jitter: Self.jitter(delivery: delivery.id, attempt: row.attempts))
                    updates.add(
                        row, status: settled.status.outbox, next: settled.nextAttemptAt, deliveredTo: settled.deliveredTo,
                        deliveryID: delivery.id, sentAt: settled.sentAt, error: settled.lastError,
                        attemptUndone: !settled.countsAsAttempt, waitingFor: settled.parkedFor)
                    if row.type == "preview_push", row.sentAt == nil, let left = settled.sentAt, let call = row.call,
                        let at = row.payloadObject?["scheduled_at"]?.text
                    {
                        pushesLeft.append((userID, call.id, at, left, row.id))
                    }
                    if settled.status == .failed, let call = row.call, let at = row.payloadObject?["scheduled_at"]?.text {
                        fallbacksNow.append((userID, call.id, at, row.id))
                    }
                    for device in delivery.targets {
                        guard let result = results[device.key] else { continue }
                        switch result {
                        case .delivered(let providerID):
                            logs.add(
                                userID, row, status: .sent, provider: device.provider.rawValue, providerID: providerID,
                                error: nil, sentAt: run.now, device: device, content: delivery.content, runID: run.runID)
                        case .notSent, .unavailable:
                            // Not sent, or no answer from the provider: a wait, no attempt.
                            continue
                        default:
                            logs.add(
                                userID, row, status: .failed, provider: device.provider.rawValue, providerID: nil,
                                error: result.reason, sentAt: nil, device: device, content: delivery.content, runID: run.runID)
                            if case .invalidToken = result { invalid.append((userID, device, row.id)) }
                        }
                    }
                case .email(let index):
                    // A new batch that Resend answered without sending anything (its rate, its quota, its
                    // configuration) is forgotten: its rows go again in a new batch, under a new key.
                    let email = change.plan.emails[index]
                    let nothingSent: Bool
                    switch change.emailResults[index] {
                    case .throttled?, .configuration?: nothingSent = email.batchKey == nil
                    default: nothingSent = false
                    }
                    // One that left in a new batch now goes again only under its key: not past Resend's hold on it.
                    let until =
                        email.batchKey == nil && !nothingSent
                        ? min(email.expiresAt, run.now.addingTimeInterval(ResendClient.keyLifetime)) : email.expiresAt
                    if let providerID = settleSingle(
                        row, userID: userID, result: change.emailResults[index], provider: .resend,
                        expiresAt: until, forgetRequest: nothingSent,
                        request: change.emailKeys[index] ?? email.batchKey)
                    {
                        emailsSent.append((userID, change.plan.emails[index].emailType, providerID, row.id))
                    }
                case .sms(let index):
                    // The request's mark stays while Twilio's answer leaves open whether it was sent.
                    let keep: Bool
                    switch (change.smsResults[index], change.smsMarks[index]) {
                    case (.delivered?, _), (.rejected?, _), (.configuration?, _), (.throttled?, _), (.invalidToken?, _), (_, .goes):
                        keep = false
                    default:
                        keep = true
                    }
                    let shownAfter: TimeInterval? = if case .shownAfter(let seconds) = change.smsMarks[index] { seconds } else { nil }
                    settleSingle(
                        row, userID: userID, result: change.smsResults[index], provider: .twilio,
                        expiresAt: change.plan.texts[index].expiresAt, keepRequest: keep, shownAfter: shownAfter)
                    if let result = change.smsResults[index], TwilioClient.isOptOut(result) {
                        optedOut.append((change.plan.texts[index].request.to.e164, row.id))
                    }
                case .suppressed(let step, let reason):
                    updates.add(
                        row, status: .suppressed, next: nil, deliveredTo: row.deliveredTo, deliveryID: row.deliveryID,
                        sentAt: row.sentAt, error: "\(step): \(reason)", attemptUndone: true)
                    // A preview push with no device to go to: its fallback SMS goes at once too.
                    if row.channel == .push, step != DispatchRules.callStep, let call = row.call, let at = row.payloadObject?["scheduled_at"]?.text {
                        fallbacksNow.append((userID, call.id, at, row.id))
                    }
                    // The call is told when its preview itself (not a fallback) reached no one.
                    if step == DispatchRules.callStep, row.type != "fallback_sms", row.sentAt == nil, row.deliveredTo.isEmpty,
                        let call = row.call, let at = row.payloadObject?["scheduled_at"]?.text
                    {
                        refusedPreviews.append((call.id, row.id, call.scheduledAt, at, reason))
                    }
                    logs.add(
                        userID, row, status: .suppressed, provider: nil, providerID: nil, error: "\(step): \(reason)",
                        sentAt: nil, device: nil, content: nil, runID: run.runID)
                case .deferred(let until, let reason):
                    updates.add(
                        row, status: .pending, next: until, deliveredTo: row.deliveredTo, deliveryID: row.deliveryID,
                        sentAt: row.sentAt, error: "deferred: \(reason)", attemptUndone: true)
                    logs.add(
                        userID, row, status: .deferred, provider: nil, providerID: nil,
                        error: "\(reason): until \(until.formatted(.iso8601))", sentAt: nil, device: nil, content: nil,
                        runID: run.runID)
                case .waiting(let until, let reason, let parkedFor):
                    // (An SMS whose earlier request left waits to ask Twilio about it: its mark stays.)
                    updates.add(
                        row, status: .pending, next: until, deliveredTo: row.deliveredTo, deliveryID: row.deliveryID,
                        sentAt: row.sentAt, error: "waiting: \(reason)", attemptUndone: true, waitingFor: parkedFor,
                        keepRequest: row.channel == .sms)
                case .released:
                    if row.type == "fallback_sms", let call = row.call, let at = row.payloadObject?["scheduled_at"]?.text {
                        releasedFallbacks["\(userID):\(call.id):\(at)"] = updates.ids.count
                    }
                    updates.add(
                        row, status: .pending, next: nil, deliveredTo: row.deliveredTo, deliveryID: row.deliveryID,
                        sentAt: row.sentAt, error: nil, attemptUndone: true, keepNext: true, keepRequest: row.channel == .sms)
                case .reached(let reason):
                    updates.add(
                        row, status: .sent, next: nil, deliveredTo: row.deliveredTo, deliveryID: row.deliveryID,
                        sentAt: row.sentAt, error: reason, attemptUndone: true)
                case .failed(let reason):
                    updates.add(
                        row, status: .failed, next: nil, deliveredTo: row.deliveredTo, deliveryID: row.deliveryID,
                        sentAt: row.sentAt, error: reason, attemptUndone: false)
                    logs.add(
                        userID, row, status: .failed, provider: nil, providerID: nil, error: reason, sentAt: nil,
                        device: nil, content: nil, runID: run.runID)
                }
            }
        }
        // A path C fallback waits 30 seconds from when its push left, however late that was: one
        // this batch holds is put back due then; one it does not hold is moved then.
        pushesLeft.removeAll { push in
            guard let index = releasedFallbacks["\(push.userID):\(push.call):\(push.scheduledAt)"] else { return false }
            updates.dueNow(at: index, push.at.addingTimeInterval(PreviewNotificationsJob.fallbackAfter))
            return true
        }
        // A fallback this batch holds is put back due now; one it does not hold is moved to now.
        fallbacksNow.removeAll { fallback in
            guard let index = releasedFallbacks["\(fallback.userID):\(fallback.call):\(fallback.scheduledAt)"] else { return false }
            updates.dueNow(at: index, run.now)
            return true
        }
        var writes = BatchWrites()
        guard !updates.ids.isEmpty else { return writes }
        // Compare-and-set on the claim: a row whose lease ran out and was taken by another
        // dispatcher is that dispatcher's now. A batch request that proved nothing was sent is
        // forgotten on all its rows at once, and only when this claim holds every row carrying
        // its key: otherwise every row keeps it, and the batch goes again whole, as it was.
        let forgetting = updates.ids.indices.filter { updates.forgetRequest[$0] }.map { updates.ids[$0] }
        writes.step(
            "outbox_rows",
            """
            with carrying as (
                select id, request_key,
                       coalesce(status = 'sending' and claimed_by = \(run.claim) and id = any(\(forgetting)), false) as mine
                  from notification_outbox
                 where request_key in (select request_key from notification_outbox where id = any(\(forgetting)))
                 order by id
                   for update
            ), forgotten as (
                select id from carrying
                 where request_key in (select request_key from carrying group by request_key having bool_and(mine))
            )
            update notification_outbox o
               set status = v.status,
                   next_attempt_at = case when v.status in ('sent', 'failed', 'suppressed') then 'infinity'
                                          when v.keep_next then o.next_attempt_at
                                          else nullif(v.next_attempt_at, \(never)) end,
                   delivered_to = case when v.delivered_to = '' then '{}'::text[] else string_to_array(v.delivered_to, ',') end,
                   delivery_id = nullif(v.delivery_id, 0), sent_at = nullif(v.sent_at, \(never)),
                   last_error = nullif(v.last_error, ''), attempts = greatest(0, o.attempts - v.undone),
                   lease_until = null, claimed_by = null,
                   waiting_for = case when v.keep_next then o.waiting_for else nullif(v.waiting_for, '') end,
                   -- An SMS's mark goes with a clear outcome, and stays while Twilio is to be asked
                   -- about it; a row put back untouched keeps it, and an email keeps its batch's for
                   -- good (it goes again only in that batch), unless Resend's answer to a new batch
                   -- proved nothing was sent.
                   request_left_at = case when v.keep_next or v.keep_request
                                               or (o.channel = 'email' and o.id not in (select id from forgotten))
                                          then o.request_left_at end,
                   request_key = case when o.id in (select id from forgotten) then null else o.request_key end,
                   request_to = case when o.id in (select id from forgotten)
                                          or (o.channel = 'sms' and not (v.keep_next or v.keep_request)) then null
                                     else o.request_to end,
                   request_expires_at = case when o.id in (select id from forgotten) then null else o.request_expires_at end,
                   request_shown_by = case when v.keep_next or v.keep_request
                                           then case when v.shown_after >= 0 then now() + make_interval(secs => v.shown_after)
                                                     else o.request_shown_by end end
              from unnest(\(updates.ids), \(updates.statuses), \(updates.nexts), \(updates.keepNext), \(updates.deliveredTo),
                          \(updates.deliveryIDs), \(updates.sentAts), \(updates.errors), \(updates.undone), \(updates.waitingFor),
                          \(updates.keepRequest), \(updates.shownAfter))
                   as v(id, status, next_attempt_at, keep_next, delivered_to, delivery_id, sent_at, last_error, undone, waiting_for,
                        keep_request, shown_after)
             where o.id = v.id and o.status = 'sending' and o.claimed_by = \(run.claim)
            returning o.id
            """)
        // Every other step is behind the claim too: it writes only for the rows `outbox_rows`
        // settled (a batch whose lease lapsed mid-way, its rows taken by another dispatcher,
        // leaves their logs and effects to that dispatcher).
        if !logs.outboxIDs.isEmpty {
            // An SMS's status callback that came before this write (kept in sms_status_early) is
            // applied as its log is written, and forgotten.
            writes.step(
                "attempt_logs",
                """
                insert into notification_logs (user_id, call_id, type, notification_type, channel, status, title, body, payload,
                                               provider, provider_id, error_msg, sent_at, outbox_id, device_token_id, attempt, run_id,
                                               delivered, delivered_at)
                select l.user_id, c.id, l.notification_type, l.notification_type, l.channel, coalesce(e.status, l.status),
                       nullif(l.title, ''), nullif(l.body, ''), l.payload::jsonb,
                       nullif(l.provider, ''), coalesce(nullif(l.provider_id, ''), e.message_sid),
                       case when e.status = 'delivered' then null else coalesce(e.error_msg, nullif(l.error_msg, '')) end,
                       nullif(l.sent_at, \(never)),
                       l.outbox_id, nullif(l.device_token_id, \(UUID.allZeros)),
                       l.attempt, \(run.runID), coalesce(e.status = 'delivered', false),
                       case when e.status = 'delivered' then e.received_at end
                  from unnest(\(logs.userIDs), \(logs.types), \(logs.statuses), \(logs.titles), \(logs.bodies), \(logs.payloads),
                              \(logs.providers), \(logs.providerIDs), \(logs.errors), \(logs.sentAts), \(logs.outboxIDs),
                              \(logs.deviceIDs), \(logs.attempts), \(logs.channels), \(logs.callIDs))
                       as l(user_id, notification_type, status, title, body, payload, provider, provider_id, error_msg, sent_at,
                            outbox_id, device_token_id, attempt, channel, call_id)
                  -- (a call deleted since is named by no log: the column's foreign key)
                  left join scheduled_calls c on c.id = l.call_id
                  left join lateral (
                      select k.message_sid, k.status, k.error_msg, k.received_at from sms_status_early k
                       where l.channel = 'sms'
                         and (k.message_sid = nullif(l.provider_id, '')
                              or (l.provider_id = '' and k.outbox_id = l.outbox_id and l.error_msg like 'outcome unknown%'))
                       order by k.received_at limit 1) e on true
                 where l.outbox_id in (select id from outbox_rows)
                """)
            let smsLogs = logs.outboxIDs.indices.filter { logs.channels[$0] == DeliveryChannel.sms.rawValue }
            if !smsLogs.isEmpty {
                writes.step(
                    "early_sms_statuses",
                    """
                    delete from sms_status_early k
                     using unnest(\(smsLogs.map { logs.providerIDs[$0] }), \(smsLogs.map { logs.outboxIDs[$0] }),
                                  \(smsLogs.map { logs.providerIDs[$0].isEmpty && logs.errors[$0].hasPrefix("outcome unknown") }))
                           as s(message_sid, outbox_id, unknown)
                     where s.outbox_id in (select id from outbox_rows)
                       and (k.message_sid = nullif(s.message_sid, '') or (s.unknown and k.outbox_id = s.outbox_id))
                    """)
            }
        }
        if !emailsSent.isEmpty {
            // The log of the emails sent, beside notification_logs (docs/jobs/dispatch.md,
            // "Email (Resend)").
            writes.step(
                "email_logs",
                """
                insert into email_logs (user_id, email_type, sent_at, provider_id)
                select e.user_id, e.email_type, e.sent_at, e.provider_id
                  from unnest(\(emailsSent.map(\.userID)), \(emailsSent.map(\.type)), \(emailsSent.map { _ in run.now }),
                              \(emailsSent.map(\.providerID)), \(emailsSent.map(\.row)))
                       as e(user_id, email_type, sent_at, provider_id, outbox_id)
                 where e.outbox_id in (select id from outbox_rows)
                """)
        }
        if !refusedPreviews.isEmpty {
            // The call is told its preview was not sent, while the decision the row came from is
            // its latest (the job has not decided it again for a new time) or the call is back at
            // that time (the refusal read it away: the call is decided again), this dispatcher
            // still holds the row, and no other row of that preview reached the user. A call
            // whose time is still ahead is left undecided, so that moved back (or pending again)
            // the job decides it again and the runner revives the refused rows
            // (`DispatchRules.callStep`).
            let refused = refusedPreviews.sorted { ($0.call.uuidString, $0.row) < ($1.call.uuidString, $1.row) }
            writes.step(
                "refused_previews",
                """
                update scheduled_calls c
                   set preview_sent = false, preview_sent_at = null, preview_note = 'not sent: ' || v.reason,
                       preview_for = case when v.scheduled_at > \(run.now) then null else c.preview_for end,
                       updated_at = \(run.now)
                  from unnest(\(refused.map(\.call)), \(refused.map(\.row)), \(refused.map(\.scheduledAt)),
                              \(refused.map(\.text)), \(refused.map(\.reason)))
                       as v(id, row_id, scheduled_at, scheduled_text, reason)
                 where c.id = v.id
                   and (abs(extract(epoch from c.preview_for - v.scheduled_at)) < 1
                        or abs(extract(epoch from c.scheduled_at - v.scheduled_at)) < 1)
                   and v.row_id in (select id from outbox_rows)
                   and not exists (select 1 from notification_outbox o
                                    where o.user_id = c.user_id and o.payload->>'call_id' = c.id::text
                                      and o.payload->>'scheduled_at' = v.scheduled_text
                                      and \(unescaped: Self.reachedTheUser))
                """)
        }
        if !optedOut.isEmpty {
            writes.step(
                "sms_opt_outs",
                """
                insert into sms_opt_outs (phone_number, opted_out_at, source)
                select distinct n.number, \(run.now)::timestamptz, 'twilio 21610'
                  from unnest(\(optedOut.map(\.number)), \(optedOut.map(\.row))) as n(number, outbox_id)
                 where n.outbox_id in (select id from outbox_rows)
                on conflict (phone_number) do nothing
                """)
        }
        let previewsSent = logs.outboxIDs.indices.filter { logs.statuses[$0] == LogStatus.sent.rawValue && logs.callIDs[$0] != UUID.allZeros }
        if !previewsSent.isEmpty {
            // A preview reached a channel: the call was previewed (the call answer rate with
            // and without a preview reads it, docs/report.md).
            writes.step(
                "previews_sent",
                """
                update scheduled_calls c set preview_sent = true, preview_sent_at = v.sent_at, updated_at = \(run.now)
                  from (select id, min(sent_at) as sent_at
                          from unnest(\(previewsSent.map { logs.callIDs[$0] }), \(previewsSent.map { logs.sentAts[$0] }),
                                      \(previewsSent.map { logs.outboxIDs[$0] })) as s(id, sent_at, outbox_id)
                         where s.outbox_id in (select id from outbox_rows)
                         group by id) v
                 where c.id = v.id and not c.preview_sent
                """)
        }
        if !pushesLeft.isEmpty {
            writes.step(
                "fallbacks_after_push",
                """
                update notification_outbox o set next_attempt_at = f.after
                  from unnest(\(pushesLeft.map(\.userID)), \(pushesLeft.map { $0.call.uuidString.lowercased() }),
                              \(pushesLeft.map(\.scheduledAt)),
                              \(pushesLeft.map { $0.at.addingTimeInterval(PreviewNotificationsJob.fallbackAfter) }),
                              \(pushesLeft.map(\.row)))
                       as f(user_id, call_id, scheduled_at, after, push_id)
                 where f.push_id in (select id from outbox_rows) and o.user_id = f.user_id and o.notification_type = 'fallback_sms' and o.status = 'pending'
                   and o.payload->>'call_id' = f.call_id and o.payload->>'scheduled_at' = f.scheduled_at
                   and o.payload->>'send_when' = 'unconfirmed'
                   and coalesce(o.next_attempt_at, o.deliver_after) < f.after
                """)
        }
        if !fallbacksNow.isEmpty {
            writes.step(
                "fallbacks_now",
                """
                update notification_outbox o set next_attempt_at = \(run.now)
                  from unnest(\(fallbacksNow.map(\.userID)), \(fallbacksNow.map { $0.call.uuidString.lowercased() }),
                              \(fallbacksNow.map(\.scheduledAt)), \(fallbacksNow.map(\.row))) as f(user_id, call_id, scheduled_at, push_id)
                 where f.push_id in (select id from outbox_rows) and o.user_id = f.user_id and o.notification_type = 'fallback_sms' and o.status = 'pending'
                   and o.payload->>'call_id' = f.call_id and o.payload->>'scheduled_at' = f.scheduled_at
                   and coalesce(o.next_attempt_at, o.deliver_after) > \(run.now)
                """)
        }
        // A token's end, like everything else the batch learnt, is written only for the rows the
        // claim still settled (a device is named by each of its user's rows it failed for).
        let registered = invalid.filter { $0.device.tokenID != nil }
        if !registered.isEmpty {
            writes.step(
                "deactivated_tokens",
                """
                update user_push_tokens set active = false
                 where id in (select t.id from unnest(\(registered.map { $0.device.tokenID! }), \(registered.map(\.row))) as t(id, row_id)
                               where t.row_id in (select id from outbox_rows))
                   and active
                """)
        }
        // users.fcm_token belongs to the apps: its token is recorded, inactive, in the one token
        // store (which push_tokens and dispatch then skip), and kept for audit; and, the token
        // having expired, users.push_enabled is turned off until the app registers a new one
        // (docs/jobs/preview-notifications.md).
        var seen = Set<String>()
        let legacy = invalid.filter { $0.device.tokenID == nil }
        if !legacy.isEmpty {
            writes.step(
                "deactivated_fcm_tokens",
                """
                insert into user_push_tokens (user_id, device_token, platform, active, last_used)
                select distinct user_id, token, 'android', false, \(run.now)
                  from unnest(\(legacy.map(\.userID)), \(legacy.map(\.device.token)), \(legacy.map(\.row))) as t(user_id, token, row_id)
                 where t.row_id in (select id from outbox_rows)
                on conflict (user_id, device_token) do update set active = false
                """)
            writes.step(
                "push_disabled_users",
                """
                update users u set push_enabled = false
                  from unnest(\(legacy.map(\.userID)), \(legacy.map(\.device.token)), \(legacy.map(\.row))) as t(user_id, token, row_id)
                 where t.row_id in (select id from outbox_rows)
                   and u.id = t.user_id and u.fcm_token = t.token and u.push_enabled
                """)
        }
        let used = changes.flatMap { planned in
            planned.change.plan.deliveries.enumerated().flatMap { index, delivery in
                delivery.targets.compactMap { device -> (token: UUID, row: Int64)? in
                    guard case .delivered? = planned.change.results[index][device.key], let token = device.tokenID,
                        let row = delivery.rows.first, seen.insert("\(token)").inserted
                    else { return nil }
                    return (token, row)
                }
            }
        }
        if !used.isEmpty {
            // When a token last took a push, to the hour: a write per token and hour at most.
            writes.step(
                "used_tokens",
                """
                update user_push_tokens set last_used = \(run.now)
                 where id in (select t.id from unnest(\(used.map(\.token)), \(used.map(\.row))) as t(id, row_id)
                               where t.row_id in (select id from outbox_rows))
                   and not (id = any(\(registered.map { $0.device.tokenID! })))
                   and (last_used is null or last_used < \(run.now.addingTimeInterval(-3600)))
                """)
        }
        return writes
    }
}

/// The outbox rows' new values, as the columns of one `unnest`.
private struct RowUpdates {
    var ids: [Int64] = []
    var statuses: [String] = []
    var nexts: [Date] = []
    var keepNext: [Bool] = []
    var deliveredTo: [String] = []
    var deliveryIDs: [Int64] = []
    var sentAts: [Date] = []
    var errors: [String] = []
    var undone: [Int] = []
    /// The provider a row is parked for (empty: none).
    var waitingFor: [String] = []
    /// Whether an email row forgets the batch request it left in (nothing was sent).
    var forgetRequest: [Bool] = []
    /// Whether an SMS row keeps the mark of a request that left without a clear answer.
    var keepRequest: [Bool] = []
    /// How long after the write Twilio's list is believed about that request (negative: as it was).
    var shownAfter: [Double] = []

    /// The row at `index` put back due at `instant` rather than when it was.
    mutating func dueNow(at index: Int, _ instant: Date) {
        nexts[index] = instant
        keepNext[index] = false
    }

    mutating func add(
        _ row: QueuedNotification, status: OutboxStatus, next: Date?, deliveredTo: Set<String>, deliveryID: Int64?,
        sentAt: Date?, error: String?, attemptUndone: Bool, keepNext: Bool = false, waitingFor: DeliveryProvider? = nil,
        forgetRequest: Bool = false, keepRequest: Bool = false, shownAfter: TimeInterval? = nil
    ) {
        let never = Date(timeIntervalSince1970: 0)
        ids.append(row.id)
        statuses.append(status.rawValue)
        nexts.append(next ?? never)
        self.keepNext.append(keepNext)
        self.deliveredTo.append(deliveredTo.sorted().joined(separator: ","))
        deliveryIDs.append(deliveryID ?? 0)
        sentAts.append(sentAt ?? never)
        errors.append(error ?? "")
        undone.append(attemptUndone ? 1 : 0)
        self.waitingFor.append(waitingFor?.rawValue ?? "")
        self.forgetRequest.append(forgetRequest)
        self.keepRequest.append(keepRequest)
        self.shownAfter.append(shownAfter ?? -1)
    }
}

/// `notification_logs` rows, as the columns of one `unnest`.
private struct LogRows {
    var userIDs: [UUID] = []
    var types: [String] = []
    var statuses: [String] = []
    var titles: [String] = []
    var bodies: [String] = []
    var payloads: [String] = []
    var providers: [String] = []
    var providerIDs: [String] = []
    var errors: [String] = []
    var sentAts: [Date] = []
    var outboxIDs: [Int64] = []
    var deviceIDs: [UUID] = []
    var attempts: [Int] = []
    var channels: [String] = []
    var callIDs: [UUID] = []

    mutating func add(
        _ userID: UUID, _ row: QueuedNotification, status: LogStatus, provider: String?, providerID: String?,
        error: String?, sentAt: Date?, device: Device?, content: PushContent?, runID: Int64, channel: DeliveryChannel? = nil
    ) {
        let channel = channel ?? row.channel
        channels.append(channel.rawValue)
        userIDs.append(userID)
        types.append(row.type)
        statuses.append(status.rawValue)
        titles.append(content?.title ?? row.title)
        if channel == .email {
            // An email's log names it (its subject, type and tags); its parts, with the user's
            // unsubscribe link, stay in the outbox row.
            bodies.append("")
            payloads.append(EmailPayload.decode(row.payload).map { #"{"email_type":"\#($0.emailType)"}"# } ?? "{}")
        } else {
            bodies.append(content?.body ?? row.body)
            payloads.append(row.payload)
        }
        providers.append(provider ?? "")
        providerIDs.append(providerID ?? "")
        errors.append(error ?? "")
        sentAts.append(sentAt ?? Date(timeIntervalSince1970: 0))
        outboxIDs.append(row.id)
        deviceIDs.append(device?.tokenID ?? UUID.allZeros)
        attempts.append(row.attempts)
        callIDs.append(row.call?.id ?? UUID.allZeros)
    }
}
