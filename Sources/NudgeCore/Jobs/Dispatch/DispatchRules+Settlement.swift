import Foundation

/// What an attempt leaves a row as: sent, retried after a backoff, waiting for its provider,
/// or failed for good (docs/jobs/dispatch.md, "Retries and waits"). Pure, as the rest of
/// `DispatchRules`.
extension DispatchRules {
    /// How an SMS row stands after its attempt: sent once Twilio took it; failed, never repeated,
    /// when Twilio refused it (a failed preview SMS is logged, not retried:
    /// docs/jobs/preview-notifications.md); a request that left without a clear answer keeps its
    /// mark and waits, spending no attempt, for Twilio to be asked whether it has the message
    /// (`planLeftSMS`); a request that never left tries again soon; Twilio's rate limit (20429),
    /// Twilio down, paused or not configured, leave it waiting without spending an attempt.
    public static func settleSMS(
        _ row: QueuedNotification, result: SendResult?, now: Date, expiresAt: Date,
        jitter: Double
    ) -> Settlement {
        settleSingle(row, result: result, marker: "sms", provider: .twilio, now: now, expiresAt: expiresAt, jitter: jitter)
    }

    /// How an email row stands after its attempt: sent once Resend took it; a time-out or a 5xx
    /// waits and tries again in its batch, under its key, spending no attempt (unless Resend
    /// answered others meanwhile: then it is a `retry`); a refusal fails it with Resend's words;
    /// a rate limit, a quota, Resend down or paused leaves it waiting without spending an
    /// attempt.
    /// `waitingSince`: when an outage's wait counts from (`outageWait`); for the emails of one
    /// batch request, the same instant, so that they come due together. `attemptsOfRequest`: the
    /// highest attempt among the request's rows, which a retry's backoff counts from for all of
    /// them, for the same reason (each row still fails after its own last attempt).
    public static func settleEmail(
        _ row: QueuedNotification, result: SendResult?, now: Date, expiresAt: Date,
        jitter: Double, waitingSince: Date? = nil, attemptsOfRequest: Int? = nil
    ) -> Settlement {
        settleSingle(
            row, result: result, marker: "email", provider: .resend, now: now, expiresAt: expiresAt, jitter: jitter,
            waitingSince: waitingSince, attemptsOfRequest: attemptsOfRequest)
    }

    /// A row sent as one request to one provider (an email, an SMS); `marker` is what
    /// `delivered_to` records once it went.
    static func settleSingle(
        _ row: QueuedNotification, result: SendResult?, marker: String, provider: DeliveryProvider,
        now: Date, expiresAt: Date, jitter: Double, waitingSince: Date? = nil, attemptsOfRequest: Int? = nil
    ) -> Settlement {
        switch result {
        case .delivered?:
            return Settlement(
                status: .sent, nextAttemptAt: nil, deliveredTo: [marker], sentAt: row.sentAt ?? now, lastError: nil,
                countsAsAttempt: true)
        case .unavailable(let why, let after)?:
            // The provider's trouble, not this notification's: it waits, spending no attempt.
            var wait = outageWait(since: waitingSince ?? row.deliverAfter, now: now, retryAfter: after, jitter: jitter)
            if row.kind.isTimeCritical { wait = min(wait, max(timeCriticalRetry, after ?? 0)) }
            return Settlement(
                status: .pending, nextAttemptAt: min(now.addingTimeInterval(wait), expiresAt), deliveredTo: [],
                sentAt: nil, lastError: why, countsAsAttempt: false)
        case .retry(let why, let after)?:
            guard row.attempts < maxAttempts else {
                return Settlement(status: .failed, nextAttemptAt: nil, deliveredTo: [], sentAt: nil, lastError: why, countsAsAttempt: true)
            }
            var delay = retryDelay(afterAttempt: attemptsOfRequest ?? row.attempts, retryAfter: after, jitter: jitter)
            if row.kind.isTimeCritical { delay = min(delay, max(timeCriticalRetry, after ?? 0)) }
            return Settlement(
                status: .pending, nextAttemptAt: min(now.addingTimeInterval(delay), expiresAt), deliveredTo: [],
                sentAt: nil, lastError: why, countsAsAttempt: true)
        case .rejected(let why)?, .invalidToken(let why, _)?:
            return Settlement(status: .failed, nextAttemptAt: nil, deliveredTo: [], sentAt: nil, lastError: why, countsAsAttempt: true)
        case .throttled(let why, let after)?, .notSent(let why, let after?)?:
            let wait = after.isFinite ? min(max(1, after), 24 * 3600) : providerWait
            return Settlement(
                status: .pending, nextAttemptAt: min(now.addingTimeInterval(wait), expiresAt), deliveredTo: [],
                sentAt: nil, lastError: why, countsAsAttempt: false)
        case .configuration(let why)?, .notSent(let why, nil)?:
            return Settlement(
                status: .pending, nextAttemptAt: expiresAt, deliveredTo: [], sentAt: nil, lastError: why,
                countsAsAttempt: false, parkedFor: provider)
        case nil:
            return Settlement(
                status: .pending, nextAttemptAt: min(now.addingTimeInterval(firstRetryDelay), expiresAt),
                deliveredTo: [], sentAt: nil,
                lastError: "\(provider.displayName): no result (the run stopped before this \(marker)'s turn)",
                countsAsAttempt: false)
        }
    }

    /// How much longer each retry waits than the one before.
    static let retryGrowth = 4.0

    /// The delay before attempt `attempts + 1`: 30 s, then 2 min, then 8 min, each between half
    /// and all of that (`jitter` in 0...1 picks where), and never less than the provider's
    /// `retry-after`.
    public static func retryDelay(afterAttempt attempts: Int, retryAfter: TimeInterval?, jitter: Double) -> TimeInterval {
        let ceiling = firstRetryDelay * pow(retryGrowth, Double(max(0, min(attempts - 1, 8))))
        return max(ceiling * (0.5 + 0.5 * min(max(jitter, 0), 1)), retryAfter ?? 0)
    }

    /// `retryDelay`'s ceiling in SQL, for the rows the queue puts back itself (a batch's users
    /// that failed): the same policy, without the jitter. `attempts` names the column.
    static func retryCeiling(afterAttemptsIn attempts: String) -> SQLFragment {
        "make_interval(secs => \(firstRetryDelay) * \(retryGrowth) ^ least(8, greatest(0, \(unescaped: attempts) - 1)))"
    }

    /// How long a row waits after its provider gave no answer about it (a 5xx, a time-out, a
    /// refused connection) while the provider is not known to answer others: no attempt is
    /// spent, and the longer the row has waited since it was due, the longer its next wait (a
    /// quarter of that, between 30 s and 5 min; `jitter` in 0...1 picks between half and all of
    /// it), never less than the provider's `retry-after`. It ends with its shelf life.
    public static func outageWait(since due: Date, now: Date, retryAfter: TimeInterval?, jitter: Double) -> TimeInterval {
        let waited = max(0, now.timeIntervalSince(due))
        let ceiling = min(max(waited / 4, firstRetryDelay), longestOutageWait)
        return max(ceiling * (0.5 + 0.5 * min(max(jitter, 0), 1)), min(retryAfter ?? 0, 3600))
    }

    /// The longest wait between two tries of a row whose provider gives no answer.
    public static let longestOutageWait: TimeInterval = 5 * 60

    /// How one row stands after its delivery's attempt.
    public struct Settlement: Sendable, Equatable {
        /// Where the row stands: its outbox status, one of three.
        public enum Status: Sendable {
            case pending, sent, failed

            public var outbox: OutboxStatus {
                switch self {
                case .pending: .pending
                case .sent: .sent
                case .failed: .failed
                }
            }
        }
        public let status: Status
        /// When a `pending` row is due again.
        public let nextAttemptAt: Date?
        public let deliveredTo: Set<String>
        public let sentAt: Date?
        public let lastError: String?
        /// Whether this attempt counts towards `maxAttempts`: not when no provider was asked.
        public let countsAsAttempt: Bool
        /// The provider a `pending` row waits for, parked until it is back (or its shelf life ends).
        public var parkedFor: DeliveryProvider? = nil
    }

    /// Settles a row of `delivery` from the results of its attempt, device by device: delivered
    /// devices are remembered; a retryable failure leaves it pending for a later attempt while
    /// attempts remain; a provider that cannot be used now (down, paused, not configured, over
    /// its quota, or giving no answer: `outageWait`) leaves it waiting without spending one,
    /// unless some device already has it and the provider is only not configured (one that
    /// comes back is waited for, on every device, until the shelf life ends);
    /// otherwise it is sent (some device has it) or failed (none has), with the last reason.
    public static func settle(
        _ row: QueuedNotification, delivery: PlannedDelivery, results: [String: SendResult],
        now: Date, jitter: Double
    ) -> Settlement {
        var delivered = row.deliveredTo
        var retryAfter: TimeInterval?
        var retryable = false
        // Held for a while (a quota: `blockedFor`), or parked for a provider until it is back.
        var blocked = !delivery.waiting.isEmpty
        var blockedFor: TimeInterval?
        var parkedFor = Set(delivery.waiting.map(\.provider))
        // Whether what holds it comes back (an outage, a pause, a quota): then it waits for those
        // devices even when another has it.
        var comesBack = delivery.waitsForReturn
        var askedAProvider = false
        var lastError: String?
        for device in delivery.targets {
            let name = device.provider.displayName
            switch results[device.key] {
            case .delivered?:
                delivered.insert(device.key)
                askedAProvider = true
            case .retry(let why, let after)?:
                retryable = true
                retryAfter = max(retryAfter ?? 0, after ?? 0)
                lastError = "\(name) \(device.shortToken): \(why)"
                askedAProvider = true
            case .unavailable(let why, let after)?:
                // The provider's trouble: a wait, no attempt (`outageWait`). (Not waited for once
                // another device has it, unless the provider is found down: one device's 5xx at
                // a trickle would otherwise be tried all day.)
                blocked = true
                var wait = outageWait(since: row.deliverAfter, now: now, retryAfter: after, jitter: jitter)
                if row.kind.isTimeCritical { wait = min(wait, max(timeCriticalRetry, after ?? 0)) }
                blockedFor = min(blockedFor ?? .infinity, wait)
                lastError = "\(name) \(device.shortToken): \(why)"
            case .invalidToken(let why, _)?, .rejected(let why)?:
                lastError = "\(name) \(device.shortToken): \(why)"
                askedAProvider = true
            case .throttled(let why, let after)?, .notSent(let why, let after?)?:
                blocked = true
                comesBack = true
                blockedFor = min(blockedFor ?? .infinity, after)
                lastError = "\(name): \(why)"
            case .configuration(let why)?, .notSent(let why, nil)?:
                blocked = true
                comesBack = true
                parkedFor.insert(device.provider)
                lastError = "\(name): \(why)"
            case nil:
                blocked = true
                comesBack = true
                blockedFor = min(blockedFor ?? .infinity, firstRetryDelay)
                lastError = "\(name): no result (the run stopped before this device's turn)"
            }
        }
        if !delivery.waiting.isEmpty, lastError == nil {
            lastError = "waiting for \(Set(delivery.waiting.map(\.provider.displayName)).sorted().joined(separator: ", "))"
        }
        let sentAt = row.sentAt ?? (delivered.count > row.deliveredTo.count ? now : nil)
        // Held for a while, it is looked at again then; parked for its one provider, when its
        // shelf life ends (or when the provider is back, which wakes it); waiting for two, every
        // `providersWait`.
        if blockedFor == nil && parkedFor.count > 1 { blockedFor = providersWait }
        let wait = min(blockedFor.map { now.addingTimeInterval(min($0, providerWait)) } ?? delivery.expiresAt, delivery.expiresAt)
        let parked = blockedFor == nil ? parkedFor.first : nil
        if retryable && row.attempts < maxAttempts {
            let delay = retryDelay(afterAttempt: row.attempts, retryAfter: retryAfter, jitter: jitter)
            let next = min(now.addingTimeInterval(delay), delivery.expiresAt)
            return Settlement(
                status: .pending, nextAttemptAt: blocked ? min(next, wait) : next, deliveredTo: delivered,
                sentAt: sentAt, lastError: lastError, countsAsAttempt: true)
        }
        // Nothing is dropped for a provider that cannot be used now: the row waits, for all its
        // devices while the provider comes back and its shelf life lasts; for one not configured,
        // only while no device has it.
        // (Unless this was the last attempt a provider answered: then it ends, with that answer.)
        let waitsForOthers = comesBack && !row.kind.isTimeCritical && now < delivery.expiresAt
        if blocked && !retryable && (delivered.isEmpty || waitsForOthers) && !(askedAProvider && row.attempts >= maxAttempts) {
            return Settlement(
                status: .pending, nextAttemptAt: wait, deliveredTo: delivered, sentAt: sentAt,
                lastError: lastError, countsAsAttempt: askedAProvider, parkedFor: parked)
        }
        if !delivered.isEmpty {
            return Settlement(
                status: .sent, nextAttemptAt: nil, deliveredTo: delivered, sentAt: sentAt, lastError: lastError,
                countsAsAttempt: true)
        }
        return Settlement(
            status: .failed, nextAttemptAt: nil, deliveredTo: delivered, sentAt: nil,
            lastError: lastError ?? "no device took it", countsAsAttempt: true)
    }
}
