import Foundation

/// What dispatch does with one user's due notifications, in the order docs/jobs/dispatch.md gives
/// ("Per user, in this order"): (1) the user's preferences, (2) quiet hours and the weekend pause,
/// (3) grouping of one group's notifications due within five minutes into one delivery, (4) the
/// frequency caps, each delivery counted once, (5) every active device. Pure: the same rows, facts
/// and clock give the same plan.
public enum DispatchRules {
    /// A group's notifications due within five minutes go out as one delivery
    /// (docs/jobs/dispatch.md, "Grouping").
    public static let groupWindow: TimeInterval = 5 * 60
    /// A failed send is retried three times with exponential backoff: the first attempt and three
    /// retries (docs/jobs/dispatch.md, "Retries and waits"). Only an answer about the notification
    /// or its device spends one; a provider that is down, not configured or over its quota spends
    /// none (`ChannelHealth`).
    public static let maxAttempts = 4
    /// The first retry's delay; each further one is four times the last: 30 s, 2 min, 8 min (with
    /// jitter, see `retryDelay`).
    public static let firstRetryDelay: TimeInterval = 30
    /// How long a notification waits when its provider holds it for a reason that passes on its
    /// own (a token it will not call unknown before it has confirmed its configuration).
    public static let providerWait: TimeInterval = 10 * 60
    /// How often a notification whose devices' providers are all down or paused (two of them:
    /// it parks for neither, since either may come back first) looks again.
    public static let providersWait: TimeInterval = 60
    /// How the reason of a row given up after attempts without a result begins: it may have
    /// reached a device.
    public static let gaveUpPrefix = "gave up: "

    public struct UserFacts: Sendable {
        public let preferences: DeliveryPreferences
        public let devices: [Device]
        /// The pushes the caps count.
        public let past: [PastDelivery]
        /// `users.email`, read when the email is sent (nil: none).
        public let address: String?
        /// Why no email goes to that address any more (`email_suppressions`: it bounced hard, or
        /// its owner marked an email as spam), or nil.
        public let emailSuppression: String?
        /// `users.phone_number`, read when the SMS is sent (nil: none).
        public let phone: String?
        /// Whether that number replied STOP to Nudge's SMS (`sms_opt_outs`).
        public let smsOptedOut: Bool
        /// The scheduled calls the user's previews are for, as they stand now
        /// (docs/jobs/preview-notifications.md).
        public let calls: [UUID: CallState]
        /// The pushes the user's fallback SMS depend on, by the push row's deduplication key.
        public let pushes: [String: PushState]
        /// What the user has done that their rows ask for (read only for a user with such a row).
        public let actions: UserActions

        public init(
            preferences: DeliveryPreferences = .standard, devices: [Device], past: [PastDelivery] = [], address: String? = nil,
            emailSuppression: String? = nil, phone: String? = nil, smsOptedOut: Bool = false, calls: [UUID: CallState] = [:],
            pushes: [String: PushState] = [:], actions: UserActions = .none
        ) {
            self.actions = actions
            self.emailSuppression = emailSuppression
            self.preferences = preferences
            self.smsOptedOut = smsOptedOut
            self.devices = devices
            self.past = past
            self.address = address
            self.phone = phone
            self.calls = calls
            self.pushes = pushes
        }
    }

    /// A scheduled call as it stands when its preview's turn comes.
    public struct CallState: Sendable, Equatable {
        public let status: String
        public let scheduledAt: Date
        /// The call's preview rows that reached the user (sent, on some device, or an SMS whose
        /// outcome is unknown): their outbox id, the call time they were for, their key.
        public let reached: [Reached]

        public struct Reached: Sendable, Equatable {
            public let row: Int64
            public let scheduledAt: String
            public let key: String

            public init(row: Int64, scheduledAt: String, key: String) {
                self.row = row
                self.scheduledAt = scheduledAt
                self.key = key
            }
        }

        public init(status: String, scheduledAt: Date, reached: [Reached] = []) {
            self.status = status
            self.scheduledAt = scheduledAt
            self.reached = reached
        }
    }

    /// A preview push as its fallback SMS sees it: the outbox row's status, and when the device
    /// reported it delivered (`notification_logs.delivered_at`, written by the app), if it did.
    public struct PushState: Sendable, Equatable {
        public let status: String
        public let confirmedAt: Date?
        /// Refused for its call (`callStep`): its job may queue it again, the call back.
        public let refusedForCall: Bool

        public init(status: String, confirmedAt: Date?, refusedForCall: Bool = false) {
            self.status = status
            self.confirmedAt = confirmedAt
            self.refusedForCall = refusedForCall
        }
    }

    /// How often a fallback SMS waiting for its push's outcome looks again.
    public static let fallbackPoll: TimeInterval = 10
    /// The longest wait before a call preview's next attempt: it is worthless once the call begins.
    public static let timeCriticalRetry: TimeInterval = 5

    /// What happens to one row.
    public enum RowOutcome: Sendable, Equatable {
        /// It goes out in `deliveries[index]`.
        case deliver(Int)
        /// It goes out as `emails[index]`.
        case email(Int)
        /// It goes out as `texts[index]`.
        case sms(Int)
        /// Refused for good at `step` (`preferences`, `caps`, `devices`), with the reason.
        case suppressed(step: String, reason: String)
        /// Held by quiet hours or the weekend pause until `until`.
        case deferred(until: Date, reason: String)
        /// Its devices' providers cannot be used now; it is looked at again at `until`. Parked for a
        /// provider (down, paused, not configured), it waits until its shelf life ends, unless
        /// the provider is back sooner (`ChannelHealth` wakes its rows).
        case waiting(until: Date, reason: String, parkedFor: DeliveryProvider? = nil)
        /// Claimed ahead of its time to join a delivery, it joined none: back as it was.
        case released
        /// Some of its devices had it, and its shelf life ended before the provider of the others
        /// was back: it stands sent, with why.
        case reached(String)
        case failed(String)
    }

    public struct Plan: Sendable {
        public var outcomes: [Int64: RowOutcome] = [:]
        public var deliveries: [PlannedDelivery] = []
        public var emails: [PlannedEmail] = []
        public var texts: [PlannedSMS] = []
    }

    /// The plan for one user's claimed rows at `now`. Rows due after `now` (claimed within the
    /// grouping window) go out only with a delivery of their group that is due. A row past its
    /// shelf life is not sent (`ShelfLife`).
    public static func plan(
        rows: [QueuedNotification], facts: UserFacts, providers: [DeliveryProvider: ProviderState],
        locale: String, calendar: LocalCalendar, now: Date, shelfLife: ShelfLife = .fallback
    ) -> Plan {
        var plan = Plan()
        var deliverable: [QueuedNotification] = []
        var early: [QueuedNotification] = []
        for row in rows.sorted(by: { ($0.dueAt, $0.id) < ($1.dueAt, $1.id) }) {
            // An SMS whose request may have reached Twilio is settled by asking Twilio first,
            // before anything else (its attempts, a refusal that its job might queue again).
            if row.channel == .sms, let left = row.requestLeftAt {
                if row.dueAt.timeIntervalSince(now) > 0.001 {
                    plan.outcomes[row.id] = .released
                } else {
                    planLeftSMS(
                        row, leftAt: left, facts: facts, provider: providers[.twilio], now: now,
                        expiry: shelfLife.expiry(of: row, calendar: calendar), into: &plan)
                }
                continue
            }
            if row.attempts > maxAttempts {
                plan.outcomes[row.id] = .failed(gaveUpPrefix + "its last \(maxAttempts) attempts ended without a result (the dispatcher stopped while sending)")
                continue
            }
            // An email whose batch request left was decided then: it goes again only in that batch,
            // as it was (`planLeftEmail`), whatever has changed since.
            if row.channel == .email, let key = row.requestKey, let left = row.requestLeftAt {
                if row.dueAt.timeIntervalSince(now) > 0.001 {
                    plan.outcomes[row.id] = .released
                } else {
                    planLeftEmail(row, key: key, leftAt: left, provider: providers[.resend], now: now, into: &plan)
                }
                continue
            }
            // A call's preview goes only while its call is pending at the time it was queued for.
            if let call = row.call, let refusal = callRefusal(call, facts: facts, now: now) {
                plan.outcomes[row.id] = .suppressed(step: callStep, reason: refusal)
                continue
            }
            // ...and once per call time: a row of another decision (another path) that reached
            // the user already is the preview; only this row's own push may have its fallback.
            if let already = alreadyReached(row, facts: facts) {
                plan.outcomes[row.id] = .suppressed(step: "once", reason: already)
                continue
            }
            // Past its shelf life, a notification is stale: not sent, whatever held it.
            let expiry = shelfLife.expiry(of: row, calendar: calendar)
            if row.dueAt.timeIntervalSince(now) <= 0.001, now >= expiry {
                plan.outcomes[row.id] = .suppressed(step: "expired", reason: expired(row, at: expiry, shelfLife: shelfLife))
                continue
            }
            // What it asks the user to do is done: it is not sent, whatever channel it is on.
            if row.dueAt.timeIntervalSince(now) <= 0.001, let done = answered(row, actions: facts.actions) {
                plan.outcomes[row.id] = .suppressed(step: answeredStep, reason: done)
                continue
            }
            if row.channel != .push {
                if row.dueAt.timeIntervalSince(now) > 0.001 {
                    plan.outcomes[row.id] = .released
                } else if row.channel == .email {
                    planEmail(row, facts: facts, provider: providers[.resend], now: now, expiry: expiry, into: &plan)
                } else {
                    planSMS(row, facts: facts, provider: providers[.twilio], now: now, expiry: expiry, into: &plan)
                }
                continue
            }
            guard row.payloadObject != nil else {
                plan.outcomes[row.id] = .failed("its payload is not a JSON object")
                continue
            }
            // (A millisecond's grace: the instant went to the database and came back in microseconds.)
            if row.dueAt.timeIntervalSince(now) > 0.001 {
                early.append(row)
                continue
            }
            let kind = row.kind
            // 1. Preferences.
            if let refusal = facts.preferences.pushRefusal(for: kind) {
                plan.outcomes[row.id] = .suppressed(step: "preferences", reason: refusal)
                continue
            }
            // 2. Quiet hours and the weekend pause: held until they end, never dropped.
            if let quiet = quietHours(holding: row, preferences: facts.preferences)?.release(at: now, calendar: calendar) {
                // Held past its shelf life, it would go out stale: it ends now instead.
                plan.outcomes[row.id] =
                    quiet.until >= expiry
                    ? .suppressed(
                        step: "expired", reason: expired(row, at: expiry, shelfLife: shelfLife) + "; \(quiet.reason) until \(quiet.until.formatted(.iso8601))")
                    : .deferred(until: quiet.until, reason: quiet.reason)
                continue
            }
            deliverable.append(row)
        }

        // 3. Grouping: a retry keeps the delivery it was part of; new rows of one group due within
        // five minutes of the group's first go out together, those claimed early included.
        var groups: [[QueuedNotification]] = []
        var retries: [Int64: [QueuedNotification]] = [:]
        for row in deliverable {
            if let delivery = row.deliveryID { retries[delivery, default: []].append(row) }
        }
        // A retry's rows claimed ahead of their time (its deferred part) go with it.
        for row in early {
            if let delivery = row.deliveryID, retries[delivery] != nil { retries[delivery]!.append(row) }
        }
        groups += retries.keys.sorted().map { retries[$0]! }
        var open = deliverable.filter { $0.deliveryID == nil }
        var waitingEarly = early.filter {
            $0.deliveryID == nil && facts.preferences.pushRefusal(for: $0.kind) == nil && answered($0, actions: facts.actions) == nil
        }
        while let first = open.first {
            // (Two calls' previews never go as one: each says its own call.)
            let joins: (QueuedNotification) -> Bool = {
                $0.kind.group == first.kind.group && $0.dueAt.timeIntervalSince(first.dueAt) < groupWindow
                    && $0.call?.id == first.call?.id
            }
            groups.append(open.filter(joins) + waitingEarly.filter(joins))
            open.removeAll(where: joins)
            waitingEarly.removeAll(where: joins)
        }
        for row in early where !groups.contains(where: { $0.contains(row) }) {
            plan.outcomes[row.id] = .released
        }

        // 4. Caps, each delivery counted once; 5. every device.
        var past = facts.past
        for group in groups {
            let lead = group.min { $0.id < $1.id }!
            let newest = group.max { ($0.dueAt, $0.id) < ($1.dueAt, $1.id) }!
            let kind = lead.kind
            let challenge = lead.payloadObject?["fitcircle_id"]?.text
            // A retry of a delivery some device already has was counted then; one that reached no
            // device yet is held to the caps like a new one.
            let counted = lead.deliveryID != nil && group.contains { $0.sentAt != nil }
            if !counted,
                let refusal = FrequencyCaps.refusal(
                    for: kind, challenge: challenge, localDay: lead.localDay, at: now,
                    calendar: calendar, past: past)
            {
                for row in group { plan.outcomes[row.id] = .suppressed(step: "caps", reason: refusal) }
                continue
            }
            if facts.devices.isEmpty && lead.deliveredTo.isEmpty {
                for row in group {
                    plan.outcomes[row.id] = .suppressed(step: "devices", reason: "no active device (user_push_tokens, users.fcm_token)")
                }
                continue
            }
            let targets = facts.devices.filter { !lead.deliveredTo.contains($0.key) }
            let ready = targets.filter { providers[$0.provider] == .ready }
            // Every device of the user gets it: it waits for a provider that comes back (down,
            // paused, over its quota) even when another device has it, unless it is time-critical
            // (a call's preview is worth nothing late); for one not configured, only while no
            // device has it.
            let waitsForReturn = !kind.isTimeCritical && targets.contains { Self.comesBack(providers[$0.provider]) }
            if ready.isEmpty && !targets.isEmpty && (lead.deliveredTo.isEmpty || waitsForReturn) {
                // Held for a while (a quota): looked at again then. Otherwise parked for a provider
                // until it is back or the group's shelf life ends.
                var reasons: Set<String> = []
                var heldFor: TimeInterval?
                var parkedFor: Set<DeliveryProvider> = []
                for device in targets {
                    switch providers[device.provider] {
                    case .held(let why, let seconds)?:
                        reasons.insert(why)
                        heldFor = min(heldFor ?? .infinity, max(1, seconds))
                    case .unavailable(let why)?, .down(let why)?:
                        reasons.insert(why)
                        parkedFor.insert(device.provider)
                    default:
                        reasons.insert("\(device.provider.displayName) is not configured")
                        parkedFor.insert(device.provider)
                    }
                }
                let expiry = group.map { shelfLife.expiry(of: $0, calendar: calendar) }.min()!
                // (A row parks for one provider, which wakes it; one waiting for two looks again
                // every `providersWait`, since either may come back first.)
                let why = reasons.sorted().joined(separator: "; ")
                for row in group {
                    if let heldFor {
                        plan.outcomes[row.id] = .waiting(until: min(now.addingTimeInterval(heldFor), expiry), reason: why)
                    } else if parkedFor.count == 1 {
                        plan.outcomes[row.id] = .waiting(until: expiry, reason: why, parkedFor: parkedFor.first)
                    } else {
                        plan.outcomes[row.id] = .waiting(until: min(now.addingTimeInterval(providersWait), expiry), reason: why)
                    }
                }
                continue
            }
            let content = PushContent(lead: lead, newest: newest, count: group.count, kind: kind, locale: locale)
            if let tooLarge = content.sizeProblem(for: Set(ready.map(\.provider))) {
                for row in group { plan.outcomes[row.id] = .failed(tooLarge) }
                continue
            }
            if !counted { past.append(PastDelivery(type: kind.type, sentAt: now, challenge: challenge, localDay: lead.localDay)) }
            let index = plan.deliveries.count
            let expiry = group.map { shelfLife.expiry(of: $0, calendar: calendar) }.min()!
            plan.deliveries.append(
                PlannedDelivery(
                    id: lead.deliveryID ?? lead.id, rows: group.map(\.id).sorted(),
                    content: content, targets: ready,
                    waiting: targets.filter { providers[$0.provider] != .ready },
                    waitsForReturn: waitsForReturn,
                    keepUntil: keepUntil(lead, expiry: expiry), expiresAt: expiry))
            for row in group { plan.outcomes[row.id] = .deliver(index) }
        }
        // A row some device already has (waiting for the others' provider) that ends now, held,
        // refused or stale for the rest (quiet hours, a preference, its reason gone, its shelf
        // life): it stands sent, with why; the rest never get it late.
        for row in rows where !row.deliveredTo.isEmpty {
            let reached = "\(row.deliveredTo.count) of its devices had it; "
            switch plan.outcomes[row.id] {
            case .suppressed(let step, let reason)?: plan.outcomes[row.id] = .reached(reached + "\(step): \(reason)")
            case .deferred(_, let reason)?: plan.outcomes[row.id] = .reached(reached + "the others' would come late: \(reason)")
            case .failed(let reason)?: plan.outcomes[row.id] = .reached(reached + "the others' failed: \(reason)")
            default: break
            }
        }
        return plan
    }

    /// How long a row sent through one provider (an email, an SMS) waits when that provider
    /// cannot be used now: held by its quota, for that long; down, paused or not configured,
    /// parked until it is back or the row's shelf life ends. Nil when it is ready.
    static func wait(for state: ProviderState?, _ provider: DeliveryProvider, now: Date, expiry: Date) -> RowOutcome? {
        switch state {
        case .ready?:
            return nil
        case .held(let why, let seconds)?:
            return .waiting(until: min(now.addingTimeInterval(max(1, min(seconds, providerWait))), expiry), reason: why)
        case .unavailable(let why)?, .down(let why)?:
            return .waiting(until: expiry, reason: why, parkedFor: provider)
        case nil:
            return .waiting(until: expiry, reason: "\(provider.displayName) is not configured", parkedFor: provider)
        }
    }

    /// Whether a provider in `state` comes back by itself or once fixed (down, paused, over its
    /// quota), as a provider not configured does not: a notification waits for its devices.
    static func comesBack(_ state: ProviderState?) -> Bool {
        switch state {
        case .down?, .held?: true
        case .ready?, .unavailable?, nil: false
        }
    }

    /// Why a row is not sent past its shelf life.
    static func expired(_ row: QueuedNotification, at expiry: Date, shelfLife: ShelfLife) -> String {
        "\(row.type) due \(row.deliverAfter.formatted(.iso8601)) was worth sending until \(expiry.formatted(.iso8601)) "
            + "(shelf life: \(shelfLife.rule(type: row.type, channel: row.channel)))"
    }

    /// Why a preview row must not go because another row of its call time reached the user, or
    /// nil. A fallback SMS after its own push is the fallback's own rule (`fallbackHold`).
    static func alreadyReached(_ row: QueuedNotification, facts: UserFacts) -> String? {
        guard let call = row.call, let at = row.payloadObject?["scheduled_at"]?.text,
            let state = facts.calls[call.id]
        else { return nil }
        let ownPush = row.payloadObject?["fallback_for"]?.text
        guard let other = state.reached.first(where: { $0.row != row.id && $0.scheduledAt == at && $0.key != ownPush })
        else { return nil }
        return "the preview for this call time already reached the user (outbox row \(other.row)); one preview a call time"
    }

    /// Until when APNs and FCM keep a push for a device that is offline: until its shelf life
    /// ends, and a call's preview no longer than until the call begins ("calling in 5 min" shown
    /// during the call, or after it, misleads). An instant, not a duration: each request turns
    /// it into its header as it leaves (`keepFor(until:at:)`), however long it waited for its turn.
    static func keepUntil(_ row: QueuedNotification, expiry: Date) -> Date {
        row.call.map { min(expiry, $0.scheduledAt) } ?? expiry
    }

    /// How many whole seconds are left at `now` of what is kept until `end`: at least one, since
    /// FCM reads 0 as "now or never".
    public static func keepFor(until end: Date, at now: Date) -> TimeInterval {
        max(1, end.timeIntervalSince(now).rounded(.down))
    }

    /// The step a preview refused by `callRefusal` is suppressed under. Its refusal holds only
    /// while the call is not at the time queued for: when the call comes back to that time, the
    /// job queues the same message again and the runner revives the row.
    public static let callStep = "call"

    /// Why a call's preview must not go now (docs/jobs/preview-notifications.md, "Exactly one
    /// preview per call time"), or nil: the call is gone, no longer pending (cancelled or done
    /// after its preview was queued), moved to another time (its preview for the new time is queued
    /// anew), or begun.
    static func callRefusal(_ call: (id: UUID, scheduledAt: Date), facts: UserFacts, now: Date) -> String? {
        guard let state = facts.calls[call.id] else { return "the call is gone (scheduled_calls)" }
        guard state.status == "pending" else { return "the call is \(state.status), no longer pending" }
        guard abs(state.scheduledAt.timeIntervalSince(call.scheduledAt)) < 1 else {
            return
                "the call was moved from \(call.scheduledAt.formatted(.iso8601)) to \(state.scheduledAt.formatted(.iso8601)); its preview is queued for the new time"
        }
        guard now < state.scheduledAt else {
            return "the call began at \(state.scheduledAt.formatted(.iso8601)): a preview after it is worthless"
        }
        return nil
    }

}

/// One delivery: one or more notifications of a group, to the devices that do not have it yet.
public struct PlannedDelivery: Sendable, Equatable {
    /// The lead row's id: the collapse id every device and every retry of it carries, so that a
    /// re-sent push replaces the first one instead of showing twice.
    public let id: Int64
    public let rows: [Int64]
    public let content: PushContent
    /// The devices to send to now.
    public let targets: [Device]
    /// The devices whose provider cannot be used now: the rows wait for them, unless another
    /// device has it and none of them comes back (`waitsForReturn`).
    public let waiting: [Device]
    /// Whether a device of `waiting` is on a provider that comes back (down, paused, over its
    /// quota): the rows then wait for it even when another device has them.
    public var waitsForReturn = false
    /// Until when APNs and FCM keep it for an offline device.
    public let keepUntil: Date
    /// When its rows' shelf life ends (the earliest of them).
    public let expiresAt: Date

    public var collapseID: String { "nudge-\(id)" }
}

/// One email of the plan: its row and what Resend is asked.
public struct PlannedEmail: Sendable, Equatable {
    public let row: Int64
    /// `email_logs.email_type`.
    public let emailType: String
    /// When its shelf life ends (for one whose batch left: when Resend stops holding its key).
    public let expiresAt: Date
    /// The Idempotency-Key of the batch request it left in without a recorded answer: it goes
    /// again in that batch, as it was. Nil: it has not left; it goes in a new batch.
    public let batchKey: String?
    public let request: EmailRequest
}

/// One SMS of the plan: its row and what Twilio is asked.
public struct PlannedSMS: Sendable, Equatable {
    public let row: Int64
    /// When its shelf life ends.
    public let expiresAt: Date
    public let request: SMSRequest
    /// When an earlier request for it left without a clear answer: Twilio is asked about that
    /// one, and nothing is sent.
    public var leftAt: Date? = nil
    /// From when Twilio's list is believed when it does not show that request.
    public var shownBy: Date? = nil
}
