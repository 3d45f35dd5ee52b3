import Foundation
import Logging
import PostgresNIO

/// dispatch (docs/jobs/dispatch.md): delivers what the other jobs queued. It drains the outbox (the runner's
/// `OutboxQueue`: claims with leases, any number of dispatchers side by side) and, per user,
/// follows `DispatchRules`: preferences, quiet hours and the weekend pause, grouping, caps, every
/// device. The pushes go out to APNs and FCM; each row then stands sent, pending a retry (up to
/// three attempts, backing off), deferred, suppressed or failed, with every attempt in
/// `notification_logs` and invalid tokens deactivated, in the batch's one write.
public struct DispatchJob: RegisteredJob, OutsideCalls, Bookkeeping, RunReports {
    public static let jobName = "dispatch"

    public let definition: JobDefinition
    public let source: OutboxQueue
    let push: DeliveryServices
    let health: ChannelHealth
    let shelfLife: ShelfLife
    let dryRun: Bool

    /// How far back the caps look (a week, and a day for the local day's edges).
    static let capsLookBack: TimeInterval = 8 * 24 * 3600

    /// `clock`: the run's instant; `waitClock`: what the run's waits are measured on (a
    /// provider's quota pause among them).
    public init(
        definition: JobDefinition, push: DeliveryServices, lease: TimeInterval, dryRun: Bool,
        clock: any RunClock = SystemClock(), waitClock: any WaitClock = SystemWaitClock()
    ) {
        self.definition = definition
        self.source = OutboxQueue(lease: lease)
        self.push = push
        self.health = ChannelHealth(configured: push.states, identities: push.identities, clock: clock, waitClock: waitClock)
        self.shelfLife = definition.shelfLife ?? .fallback
        self.dryRun = dryRun
    }

    /// Built with the providers' clients (shut down after the run) and its lease
    /// (`NUDGE_DISPATCH_LEASE_SECONDS`, never shorter than a push's time-out allows).
    public static func withJob<Result: Sendable>(_ setup: JobSetup, _ body: (any Job) async throws -> Result) async throws -> Result {
        try await DeliveryServices.with(setup.environment, dryRun: setup.options.dryRun) { push in
            let shortest = DispatchJob.shortestLease(pushTimeout: push.timeout)
            let lease = try setup.environment.integer(
                "NUDGE_DISPATCH_LEASE_SECONDS", default: max(120, shortest),
                in: shortest...3_600)
            return try await body(
                DispatchJob(
                    definition: setup.definition, push: push, lease: TimeInterval(lease),
                    dryRun: setup.options.dryRun, clock: setup.options.clock, waitClock: setup.options.waitClock))
        }
    }

    public typealias Facts = DispatchRules.UserFacts

    public struct Change: Sendable {
        public let rows: [QueuedNotification]
        public let plan: DispatchRules.Plan
        /// Per delivery of the plan, each target device's result (by `Device.key`).
        public var results: [[String: SendResult]]
        /// Per email of the plan, Resend's answer (nil: not asked).
        public var emailResults: [SendResult?]
        /// Per email of the plan, the key of the batch request it left in (nil: none left).
        public var emailKeys: [String?]
        /// Per SMS of the plan, Twilio's answer (nil: not asked).
        public var smsResults: [SendResult?]
        /// Per SMS of the plan, what becomes of its request's mark beside what its answer says.
        public var smsMarks: [SMSMark]
    }

    /// The users' preferences, devices and deliveries; the calls and pushes their previews depend on.
    public var readStatements: Int { 2 }

    public var callsOutside: Bool { !dryRun }

    public var bookkeepingStatements: Int { ChannelHealth.statements + 2 }

    /// A batch's sends together: each waits for its answer's head within the push time-out;
    /// this bounds the rest (a provider that stalls mid-answer, a token being minted).
    public var outsideTimeLimit: Duration? { Self.outsideTimeLimit(pushTimeout: push.timeout) }

    static func outsideTimeLimit(pushTimeout: Duration) -> Duration { pushTimeout * 3 + .seconds(10) }

    /// The shortest lease a claim may have: the batch's sends, and time for its write, must end
    /// before another dispatcher may take its rows. (The runner renews a batch's claims before
    /// its sends when less is left of them than its users' sends, its emails' and its write may
    /// take: `OutboxQueue.keep`.)
    static func shortestLease(pushTimeout: Duration) -> Int {
        Int(outsideTimeLimit(pushTimeout: pushTimeout).seconds.rounded(.up)) + 20
    }

    public func summaryNote(tally: [String: Int]) -> String? {
        let missing =
            DeliveryProvider.allCases.compactMap { provider -> String? in
                guard case .unavailable(let why)? = push.states[provider] else { return nil }
                return why
            } + health.outages
        guard !missing.isEmpty else { return nil }
        return missing.joined(separator: "; ")
            + "; notifications waiting for a provider: \(tally["waiting", default: 0]) (each until it is back or its shelf life ends)"
    }

    public var runProblem: String? {
        let problems = health.problems
        return problems.isEmpty ? nil : problems.joined(separator: "; ")
    }

    // MARK: Deciding

    public func decide(for item: UserNotifications, facts: Facts?, run: RunContext) throws -> Decision<Change> {
        guard let facts else { throw NudgeError(.configuration, "the user's row is gone") }
        // A user whose zone is unknown (placed in UTC) gets what needs no local clock; what does
        // cannot be timed to their day and is suppressed with why.
        let untimed = item.zoneProblem == nil ? [] : item.rows.filter { needsLocalClock($0) }
        let planned = item.rows.filter { row in !untimed.contains { $0.id == row.id } }
        var plan = DispatchRules.plan(
            rows: planned, facts: facts, providers: health.states(probing: planned.map(\.id)),
            locale: item.user.user.locale, calendar: item.user.calendar, now: run.now,
            shelfLife: shelfLife)
        for row in untimed {
            plan.outcomes[row.id] = .suppressed(step: "zone", reason: "\(item.zoneProblem ?? ""): it cannot be timed to the user's day")
        }
        var tally: [String: Int] = [:]
        for outcome in plan.outcomes.values {
            switch outcome {
            case .deliver: break
            case .email: if dryRun { tally["would_email", default: 0] += 1 }
            case .sms: if dryRun { tally["would_sms", default: 0] += 1 }
            case .suppressed(let step, _): tally["suppressed:\(step)", default: 0] += 1
            case .deferred: tally["deferred", default: 0] += 1
            case .waiting: tally["waiting", default: 0] += 1
            case .released: break
            // Some device had it (earlier): it stands sent now.
            case .reached: tally["sent", default: 0] += 1
            case .failed: tally["failed", default: 0] += 1
            }
        }
        for delivery in plan.deliveries {
            if dryRun { tally["would_deliver", default: 0] += 1 }
            if delivery.rows.count > 1 { tally["grouped", default: 0] += delivery.rows.count }
        }
        let change = Change(
            rows: item.rows, plan: plan, results: plan.deliveries.map { _ in [:] },
            emailResults: plan.emails.map { _ in nil }, emailKeys: plan.emails.map { _ in nil },
            smsResults: plan.texts.map { _ in nil }, smsMarks: plan.texts.map { _ in .asAnswered })
        return .act(PlannedChange(itemID: item.user.user.id, change: change, work: [], notifications: [], tally: tally))
    }

    /// Whether delivering `row` needs the user's local clock: a push or SMS that quiet hours can
    /// hold, or that a cap of their local day or week or the daily total counts, or whose shelf
    /// life ends with their day or period. Not a call preview, an email, a critical kind without
    /// a local cap, nor a row that has left already (its retry goes as it began).
    func needsLocalClock(_ row: QueuedNotification) -> Bool {
        let kind = row.kind
        if kind.isTimeCritical || row.sentAt != nil || !row.deliveredTo.isEmpty || row.requestLeftAt != nil || row.requestKey != nil {
            return false
        }
        switch shelfLife.rule(type: row.type, channel: row.channel) {
        case .endOfLocalDay, .endOfPeriod: return true
        case .duration: break
        }
        if row.channel == .email { return false }
        let localCap = kind.caps.contains { cap in
            switch cap {
            case .perLocalDay, .perLocalWeek: true
            case .perHour, .perChallenge: false
            }
        }
        return !kind.passesQuietHours || kind.heldByDailyTotal || localCap
    }

    // MARK: Sending

    /// Sends the user's deliveries to their devices, all at once; a provider paused meanwhile is
    /// not asked.
    public func complete(_ change: PlannedChange<Change>, run: RunContext) async throws -> PlannedChange<Change> {
        let context = SendContext(database: run.database, logger: run.logger, clock: run.clock, waitClock: run.waitClock)
        let deliveries = change.change.plan.deliveries
        let kindOf = Dictionary(uniqueKeysWithValues: change.change.rows.map { ($0.id, $0.kind) })
        var sends: [(index: Int, device: Device, push: PushRequest, rows: [Int64])] = []
        for (index, delivery) in deliveries.enumerated() {
            let timeCritical = delivery.rows.contains { kindOf[$0]?.isTimeCritical ?? false }
            for device in delivery.targets {
                sends.append((index, device, PushRequest(delivery: delivery, device: device, timeCritical: timeCritical), delivery.rows))
            }
        }
        var results = change.change.results
        var smsResults = change.change.smsResults
        var smsMarks = change.change.smsMarks
        let texts = change.change.plan.texts
        if sends.count == 1 && texts.isEmpty {
            // Most users have one device and one delivery: no task of its own.
            results[sends[0].index][sends[0].device.key] = await send(sends[0].push, rows: sends[0].rows, context: context)
        } else {
            enum Sent: Sendable {
                case push(Int, String, SendResult)
                case sms(Int, SendResult, SMSMark)
            }
            await withTaskGroup(of: Sent.self) { group in
                for send in sends {
                    group.addTask { .push(send.index, send.device.key, await self.send(send.push, rows: send.rows, context: context)) }
                }
                for (index, text) in texts.enumerated() {
                    group.addTask {
                        let (result, mark) = await self.send(text, run: run)
                        return .sms(index, result, mark)
                    }
                }
                for await sent in group {
                    switch sent {
                    case .push(let index, let key, let result): results[index][key] = result
                    case .sms(let index, let result, let mark):
                        smsResults[index] = result
                        smsMarks[index] = mark
                    }
                }
            }
        }
        var done = change.change
        done.results = results
        done.smsResults = smsResults
        done.smsMarks = smsMarks
        return PlannedChange(itemID: change.itemID, change: done, work: [], notifications: [], tally: change.tally)
    }

    /// The batch's answers once all of them are in, read through what they taught about each
    /// provider (`ChannelHealth.interpret`: an outage found late in the batch still turns its
    /// early 503s into waits, and enough accepted tokens make an unknown one believed); the write
    /// settles each row by these, and the summary counts what it will write: pushes per
    /// provider, tokens found gone, and what became of each row.
    public func review(_ changes: [PlannedChange<Change>], run: RunContext) -> [PlannedChange<Change>] {
        changes.map { planned in
            var change = planned.change
            var tally = planned.tally
            for (index, delivery) in change.plan.deliveries.enumerated() {
                for device in delivery.targets {
                    guard let result = change.results[index][device.key] else { continue }
                    let interpreted = health.interpret(result, from: device.provider)
                    change.results[index][device.key] = interpreted
                    switch interpreted {
                    case .delivered: tally["pushes_sent:\(device.provider.rawValue)", default: 0] += 1
                    case .invalidToken: tally["tokens_deactivated", default: 0] += 1
                    // No answer, and no attempt spent: counted, since no log row records it.
                    case .unavailable: tally["unanswered:\(device.provider.rawValue)", default: 0] += 1
                    default: break
                    }
                }
                for row in change.rows where delivery.rows.contains(row.id) {
                    let settled = DispatchRules.settle(row, delivery: delivery, results: change.results[index], now: run.now, jitter: 0)
                    count(settled, sent: "sent", into: &tally)
                }
            }
            change.emailResults = change.emailResults.map { $0.map { health.interpret($0, from: .resend) } }
            // An SMS's unanswered request is never taken as an answer about it (an attempt): it
            // may have been sent, and only Twilio's list settles that.
            change.smsResults = change.smsResults.map { result in
                result.map { result in
                    if case .unavailable = result, health.health(.twilio).state != .down { return result }
                    return health.interpret(result, from: .twilio)
                }
            }
            for case .unavailable? in change.emailResults { tally["unanswered:resend", default: 0] += 1 }
            for case .unavailable? in change.smsResults { tally["unanswered:twilio", default: 0] += 1 }
            // An email or an SMS: one request, one row.
            for (index, email) in change.plan.emails.enumerated() {
                guard let row = change.rows.first(where: { $0.id == email.row }) else { continue }
                count(
                    DispatchRules.settleEmail(
                        row, result: change.emailResults[index], now: run.now, expiresAt: email.expiresAt,
                        jitter: 0), sent: "emails_sent", into: &tally)
            }
            for (index, text) in change.plan.texts.enumerated() {
                guard let row = change.rows.first(where: { $0.id == text.row }) else { continue }
                count(
                    DispatchRules.settleSMS(
                        row, result: change.smsResults[index], now: run.now, expiresAt: text.expiresAt,
                        jitter: 0), sent: "sms_sent", into: &tally)
            }
            return PlannedChange(
                itemID: planned.itemID, change: change, work: planned.work, notifications: planned.notifications,
                tally: tally)
        }
    }

    private func count(_ settled: DispatchRules.Settlement, sent: String, into tally: inout [String: Int]) {
        switch settled.status {
        case .sent: tally[sent, default: 0] += 1
        case .failed: tally["failed", default: 0] += 1
        // (A row some device has, parked for the others' provider, waits: it retries nothing.)
        case .pending: tally[settled.countsAsAttempt && settled.parkedFor == nil ? "retrying" : "waiting", default: 0] += 1
        }
    }

    /// One push through its provider, unless the provider is paused or not configured, or is
    /// found down (or paused) while the push waits for a connection: it is asked again just
    /// before the push leaves, and a push held then is parked, not sent into the outage.
    private func send(_ push: PushRequest, rows: [Int64], context: SendContext) async -> SendResult {
        let provider = push.device.provider
        if let held = health.held(provider, rows: rows) { return held }
        guard let service = self.push.services[provider] else {
            return .notSent("\(provider.displayName) is not configured", after: nil)
        }
        let health = self.health
        let result = await service.send(
            push,
            context: context.leaving {
                health.held(provider, rows: rows)
            })
        health.record(result, from: provider, device: push.device.key)
        return result
    }

    /// Where between half and all of its backoff a delivery's retry falls: spread, and the same
    /// for the same delivery and attempt.
    static func jitter(delivery: Int64, attempt: Int) -> Double {
        let mixed = (UInt64(bitPattern: delivery) &* 0x9E37_79B9_7F4A_7C15) ^ UInt64(attempt)
        return Double(mixed % 1000) / 1000
    }

    /// The same for every email of one batch request (its key) and attempt.
    static func jitter(request key: String) -> Double {
        let digest = Digest.sha256Hex(key)
        return Double(UInt64(digest.prefix(8), radix: 16)! % 1000) / 1000
    }
}
