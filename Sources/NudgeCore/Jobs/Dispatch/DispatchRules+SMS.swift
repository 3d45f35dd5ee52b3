import Foundation

/// dispatch's rules for an SMS row, the call preview's fallback (`DispatchRules.plan`).
extension DispatchRules {
    /// An SMS row (one whose earlier request may have reached Twilio never comes here: `plan`
    /// sends it to `planLeftSMS`, which asks Twilio first): a fallback only when its push did not
    /// reach the user (`fallbackHold`); a phone number Twilio takes; one segment; Twilio ready. Quiet hours and caps do not hold an SMS: its only use is the call
    /// preview, which the user asked for.
    static func planSMS(
        _ row: QueuedNotification, facts: UserFacts, provider: ProviderState?, now: Date, expiry: Date,
        into plan: inout Plan
    ) {
        if let hold = fallbackHold(row, facts: facts, now: now) {
            plan.outcomes[row.id] = hold
            return
        }
        guard let text = facts.phone, !text.trimmingCharacters(in: .whitespaces).isEmpty else {
            plan.outcomes[row.id] = .suppressed(step: "phone", reason: "the user has no phone number (users.phone_number)")
            return
        }
        guard let phone = PhoneNumber(text) else {
            plan.outcomes[row.id] = .suppressed(step: "phone", reason: "users.phone_number (\(PhoneNumber.mask(text))) is not an E.164 number")
            return
        }
        guard !facts.smsOptedOut else {
            plan.outcomes[row.id] = .suppressed(
                step: "preferences",
                reason: "the number replied STOP to Nudge's SMS: none goes to it until it replies START")
            return
        }
        let measured = SMSText(row.body)
        guard !row.body.isEmpty, measured.segments == 1 else {
            plan.outcomes[row.id] = .failed(
                "the SMS would be \(measured.segments) segments (\(measured.units) \(measured.encoding.rawValue) units): only one is sent")
            return
        }
        if let wait = wait(for: provider, .twilio, now: now, expiry: expiry) {
            plan.outcomes[row.id] = wait
            return
        }
        queue(row, to: phone, expiry: expiry, into: &plan)
    }

    /// `row`'s text planned to go to `phone`. Twilio keeps it no longer than it is worth: until the
    /// call begins, or its shelf life ends. `leftAt` and `shownBy`: a request that left before
    /// (`planLeftSMS`).
    private static func queue(
        _ row: QueuedNotification, to phone: PhoneNumber, expiry: Date, leftAt: Date? = nil, shownBy: Date? = nil,
        into plan: inout Plan
    ) {
        plan.outcomes[row.id] = .sms(plan.texts.count)
        let request = SMSRequest(to: phone, body: row.body, outboxID: row.id, validUntil: keepUntil(row, expiry: expiry))
        plan.texts.append(PlannedSMS(row: row.id, expiresAt: expiry, request: request, leftAt: leftAt, shownBy: shownBy))
    }

    /// An SMS whose request left without a clear answer (a time-out, a 5xx, a dispatcher that
    /// stopped): Twilio is asked whether it has the message (`TwilioClient.find`) before anything
    /// else; found, it was sent; absent, the row goes again as new. The number asked about is the
    /// one the request went to.
    static func planLeftSMS(
        _ row: QueuedNotification, leftAt: Date, facts: UserFacts, provider: ProviderState?, now: Date,
        expiry: Date, into plan: inout Plan
    ) {
        guard let phone = (row.requestTo ?? facts.phone).flatMap(PhoneNumber.init) else {
            plan.outcomes[row.id] = .failed(
                TwilioClient.unknownOutcome(
                    "its request left at \(leftAt.formatted(.iso8601)) with no answer recorded, and there is no number to ask Twilio about"))
            return
        }
        if let wait = wait(for: provider, .twilio, now: now, expiry: expiry) {
            // Twilio cannot be asked now: the row waits for it, until its shelf life ends.
            plan.outcomes[row.id] =
                now < expiry
                ? wait
                : .failed(
                    TwilioClient.unknownOutcome(
                        "its request left at \(leftAt.formatted(.iso8601)) with no answer recorded, and Twilio could not be asked before its shelf life ended"))
            return
        }
        queue(
            row, to: phone, expiry: expiry, leftAt: leftAt,
            shownBy: row.requestShownBy ?? leftAt.addingTimeInterval(TwilioClient.listShowsAfter), into: &plan)
    }

    /// Whether a fallback SMS waits or is not needed, by its push
    /// (docs/jobs/preview-notifications.md): no SMS once the device confirmed the push; on path C
    /// (`send_when: unconfirmed`) it goes when that has not happened by its time, 30 seconds after
    /// the push; on path A (`push_failed`) only once the push could not be delivered (failed, or
    /// suppressed: no device left), and it waits while the push is still being tried, 30 seconds at
    /// most. Nil: it goes (a row that is no fallback, or whose push is gone).
    static func fallbackHold(_ row: QueuedNotification, facts: UserFacts, now: Date) -> RowOutcome? {
        guard let key = row.payloadObject?["fallback_for"]?.text, let push = facts.pushes[key] else { return nil }
        if let confirmed = push.confirmedAt {
            return .suppressed(step: "fallback", reason: "the push was confirmed delivered at \(confirmed.formatted(.iso8601))")
        }
        // A push refused for its call (the call was away) is queued again if the call is back at
        // its time: the fallback waits for it, never sent in its place. Refused itself when its
        // own turn finds the call away, or begun.
        if push.refusedForCall {
            return .waiting(until: now.addingTimeInterval(fallbackPoll), reason: "its push was refused for its call; waiting for it to be queued again")
        }
        guard row.payloadObject?["send_when"]?.text == "push_failed" else { return nil }
        switch push.status {
        case "failed", "suppressed", "cancelled":
            return nil
        case "sent":
            return .suppressed(step: "fallback", reason: "the push reached its provider; this SMS is only for a push that cannot be delivered")
        default:
            // A push still not gone 30 s after the fallback's own time (its provider held or not
            // configured) has not reached the user either: the SMS goes.
            if now.timeIntervalSince(row.deliverAfter) >= PreviewNotificationsJob.fallbackAfter { return nil }
            return .waiting(until: now.addingTimeInterval(fallbackPoll), reason: "waiting for the push's outcome")
        }
    }
}
