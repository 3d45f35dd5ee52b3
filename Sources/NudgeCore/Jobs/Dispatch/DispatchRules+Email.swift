import Foundation

/// dispatch's rules for an email row (`DispatchRules.plan`).
extension DispatchRules {
    /// An email row (docs/jobs/dispatch.md, "Email (Resend)"): the user's email switches (the
    /// master, the type's switch in either table), an address that can be sent to and that has not
    /// bounced hard nor complained (`emailSuppression`), and Resend ready. Emails are not held by
    /// quiet hours (they do not wake anyone) nor by the push caps; their job queues each at most
    /// once per user and period.
    static func planEmail(
        _ row: QueuedNotification, facts: UserFacts, provider: ProviderState?, now: Date, expiry: Date,
        into plan: inout Plan
    ) {
        if let refusal = facts.preferences.emailRefusal(for: row.type) {
            plan.outcomes[row.id] = .suppressed(step: "preferences", reason: refusal)
            return
        }
        guard let address = facts.address else {
            plan.outcomes[row.id] = .suppressed(step: "address", reason: "the user has no email address (users.email)")
            return
        }
        guard isDeliverableAddress(address) else {
            plan.outcomes[row.id] = .suppressed(step: "address", reason: "users.email is not an address Nudge can send to")
            return
        }
        if let suppression = facts.emailSuppression {
            plan.outcomes[row.id] = .suppressed(step: "suppression", reason: suppression)
            return
        }
        guard let payload = EmailPayload.decode(row.payload) else {
            plan.outcomes[row.id] = .failed("its payload is not an email (email_type, html)")
            return
        }
        planSend(row, payload: payload, to: address, batchKey: nil, provider: provider, now: now, until: expiry, into: &plan)
    }

    /// An email whose batch request left without a recorded answer (a time-out, a 5xx, a
    /// dispatcher that stopped): it may have been sent, so it goes again only in that batch, the
    /// same rows to the same addresses under the same key, and Resend sends it at most once. That
    /// holds while Resend keeps the key (`ResendClient.keyLifetime`) and until the batch's shelf
    /// life ends (its emails' earliest: the whole batch goes again, so none may be stale); past
    /// either, the email is not sent again and fails as an unknown outcome. Waiting for Resend,
    /// it waits until then.
    static func planLeftEmail(
        _ row: QueuedNotification, key: String, leftAt: Date, provider: ProviderState?, now: Date,
        into plan: inout Plan
    ) {
        let keyLapses = min(leftAt.addingTimeInterval(ResendClient.keyLifetime), row.requestExpiresAt ?? .distantFuture)
        guard let payload = EmailPayload.decode(row.payload), let address = row.requestTo else {
            plan.outcomes[row.id] = .failed(
                TwilioClient.unknownOutcomePrefix
                    + "its email left in a batch at \(leftAt.formatted(.iso8601)) and cannot be sent again as it was")
            return
        }
        guard now < keyLapses else {
            plan.outcomes[row.id] = .failed(
                TwilioClient.unknownOutcomePrefix
                    + "its email left in a batch at \(leftAt.formatted(.iso8601)) with no answer recorded, and by "
                    + "\(keyLapses.formatted(.iso8601)) the batch's shelf life or Resend's hold on its key ended: it may have been "
                    + "sent, and is not sent again")
            return
        }
        planSend(row, payload: payload, to: address, batchKey: key, provider: provider, now: now, until: keyLapses, into: &plan)
    }

    /// An email that goes now (in a new batch, or again in the batch `batchKey`) unless Resend
    /// cannot be used: then it waits, at most `until`.
    private static func planSend(
        _ row: QueuedNotification, payload: EmailPayload, to address: String, batchKey: String?,
        provider: ProviderState?, now: Date, until: Date, into plan: inout Plan
    ) {
        if let wait = wait(for: provider, .resend, now: now, expiry: until) {
            plan.outcomes[row.id] = wait
            return
        }
        plan.outcomes[row.id] = .email(plan.emails.count)
        plan.emails.append(
            PlannedEmail(
                row: row.id, emailType: payload.emailType, expiresAt: until, batchKey: batchKey,
                request: emailRequest(subject: row.title, text: row.body, payload: payload, to: address)))
    }

    /// What Resend is asked for an email row (its subject and text, its payload's parts) to
    /// `address`: the same row and address, the same request.
    public static func emailRequest(subject: String, text: String, payload: EmailPayload, to address: String) -> EmailRequest {
        EmailRequest(
            to: address, subject: subject, html: payload.html, text: text, unsubscribeURL: payload.unsubscribeURL,
            tags: payload.tags.merging(["email_type": payload.emailType]) { mine, _ in mine })
    }
}
