import Foundation
import Logging
import PostgresNIO
import Synchronization

/// What a dispatcher knows about each provider: the shared `provider_health` rows as last read
/// (`ProviderHealth`), what its own sends learnt since (written after each batch, and while the
/// queue is idle), and the quotas providers asked it to respect. Every send asks it first
/// (`hold`), every answer is recorded, and every answer is read through it before a row is
/// settled (`interpret`): a 5xx from a provider found down parks the notification instead of
/// spending an attempt; an unknown token from a provider that has not confirmed its
/// configuration waits instead of being deactivated.
public final class ChannelHealth: Sendable {
    private struct State {
        var shared: [DeliveryProvider: ProviderHealth] = [:]
        var pending: [DeliveryProvider: ProviderHealth.Delta] = [:]
        /// What each `sync` under way (one per lane) took from `pending` and is writing: still
        /// counted until the rows it reads back replace `shared`.
        var writing: [Int: [DeliveryProvider: ProviderHealth.Delta]] = [:]
        var nextSync = 0
        /// Until when, on the wait clock, a provider over its quota is not asked.
        var throttledUntil: [DeliveryProvider: (until: Duration, reason: String)] = [:]
        /// The version of each shared row as last read: a lane that read before another replaces
        /// nothing newer.
        var versions: [DeliveryProvider: Int64] = [:]
        /// The harmless probes this dispatcher claimed and has not made yet (`takeOwedProbes`).
        var owedProbes: Set<DeliveryProvider> = []
    }

    private let state = Mutex(State())
    private let configured: [DeliveryProvider: ProviderState]
    /// Each configured provider's identity (`DeliveryServices.identities`): who it is configured as.
    private let identities: [DeliveryProvider: String]
    private let clock: any RunClock
    /// What a quota's pause is measured on: the run's wait clock.
    private let waitClock: any WaitClock

    /// How many parked rows a dispatcher wakes at a time for a provider that is up.
    static let wakeBatch = 2_000

    public init(
        configured: [DeliveryProvider: ProviderState], identities: [DeliveryProvider: String] = [:],
        clock: any RunClock = SystemClock(), waitClock: any WaitClock = SystemWaitClock()
    ) {
        self.configured = configured
        self.identities = identities
        self.clock = clock
        self.waitClock = waitClock
    }

    /// Each provider's health as this dispatcher sees it now: the shared row with its own news.
    private func current(_ provider: DeliveryProvider, in state: State) -> ProviderHealth {
        let shared = state.shared[provider] ?? ProviderHealth()
        var delta = state.pending[provider] ?? ProviderHealth.Delta()
        for writing in state.writing.values { delta.add(writing[provider] ?? ProviderHealth.Delta()) }
        guard !delta.isEmpty else { return shared }
        return shared.applying(delta, now: clock.now(), config: identities[provider] ?? "")
    }

    public func health(_ provider: DeliveryProvider) -> ProviderHealth {
        state.withLock { current(provider, in: $0) }
    }

    /// Each provider's state for a user's rows: not configured, down or paused (unless one of the
    /// rows is that provider's probe), held by its quota, or ready.
    public func states(probing rows: [Int64] = []) -> [DeliveryProvider: ProviderState] {
        var states = configured
        for provider in DeliveryProvider.allCases where configured[provider] == .ready {
            if let (why, after) = hold(provider, rows: rows) { states[provider] = after.map { .held(why, for: $0) } ?? .down(why) }
        }
        return states
    }

    /// Why `provider` may not be asked now for `rows`, and for how long (nil: until it is back).
    public func hold(_ provider: DeliveryProvider, rows: [Int64] = []) -> (reason: String, after: TimeInterval?)? {
        state.withLock { state in
            let health = current(provider, in: state)
            if !health.allowsSending(config: identities[provider] ?? ""),
                !rows.contains(where: { (state.shared[provider]?.probeRows ?? []).contains($0) })
            {
                return (health.summary(of: provider) ?? "\(provider.displayName) is not available", nil)
            }
            if let throttled = state.throttledUntil[provider] {
                let left = throttled.until - waitClock.now()
                if left > .zero {
                    return ("\(provider.displayName) is over its quota: \(throttled.reason)", left.seconds)
                }
                state.throttledUntil[provider] = nil
            }
            return nil
        }
    }

    /// What a send to `provider` for `rows` ends as when the provider may not be asked now
    /// (`hold`): not sent, waiting as long as the hold says; nil when it may be asked.
    public func held(_ provider: DeliveryProvider, rows: [Int64] = []) -> SendResult? {
        hold(provider, rows: rows).map { .notSent($0.reason, after: $0.after) }
    }

    /// Why the run must report a configuration error: the providers paused under this
    /// dispatcher's own configuration, each with its reason.
    public var problems: [String] {
        DeliveryProvider.allCases.compactMap { provider in
            let health = self.health(provider)
            guard configured[provider] == .ready, health.state == .paused, health.config == identities[provider] else { return nil }
            return "\(provider.displayName) paused: \(health.reason ?? "its configuration was refused")"
        }
    }

    /// The providers that are not up, in an operator's words.
    public var outages: [String] {
        DeliveryProvider.allCases.compactMap { provider in
            guard configured[provider] == .ready else { return nil }
            return health(provider).summary(of: provider)
        }
    }

    /// Takes one answer into account: one per request, from `device` (a device's key, an
    /// address, a batch's key), which the windows keep only as a digest.
    public func record(_ result: SendResult, from provider: DeliveryProvider, device: String) {
        state.withLock { state in
            if case .throttled(let why, let after) = result {
                let seconds = after.isFinite ? min(max(after, 0), 24 * 3600) : 60
                let until = waitClock.now() + .milliseconds(Int64(seconds * 1000))
                if (state.throttledUntil[provider]?.until).map({ $0 < until }) ?? true {
                    state.throttledUntil[provider] = (until, why)
                }
            }
            if case .notSent = result { return }
            let trial = (state.shared[provider]?.state ?? .up) != .up
            var delta = state.pending[provider] ?? ProviderHealth.Delta()
            if result.isOutage {
                delta.outages += 1
                delta.outageDevices.insert(ProviderHealth.digest(device))
                delta.lastOutage = result.reason
                if trial { delta.trialOutages += 1 }
            } else {
                delta.answers += 1
                if trial { delta.trialAnswers += 1 }
                switch result {
                case .invalidToken(_, true):
                    delta.unknownTokens += 1
                    delta.unknownDevices.insert(ProviderHealth.digest(device))
                case .configuration(let why):
                    delta.configuration = delta.configuration ?? why
                case .delivered, .invalidToken(_, false):
                    // Taken, or a token the provider knows is gone: its configuration is right.
                    delta.accepted += 1
                    if trial { delta.trialAccepted += 1 }
                default:
                    if trial { delta.trialAccepted += 1 }
                }
            }
            state.pending[provider] = delta
        }
    }

    /// What an answer means once the provider's state is known: no answer from a provider that
    /// is down is a wait for it, not an attempt; no answer while it answers other requests is an
    /// answer about this one (an attempt); an unknown token from a provider paused for a burst is
    /// the configuration's fault, and from one that has not yet confirmed its configuration, a
    /// wait.
    public func interpret(_ result: SendResult, from provider: DeliveryProvider) -> SendResult {
        let health = self.health(provider)
        switch result {
        case .unavailable(let why, _) where health.state == .down:
            return .notSent("\(health.summary(of: provider) ?? provider.displayName) (this one: \(why))", after: nil)
        case .unavailable(let why, let after) where health.answersOthers:
            return .retry("\(why), while \(provider.displayName) answered other requests", after: after)
        case .invalidToken(let why, true) where health.state == .paused && health.burst:
            return .configuration("\(why), taken as a configuration error: \(health.reason ?? "")")
        case .invalidToken(let why, true) where !health.confirmsTokens(config: identities[provider] ?? ""):
            return .notSent(
                """
                \(why); kept until \(provider.displayName) has taken other tokens, since a wrong configuration gets the same \
                answer for every token
                """, after: DispatchRules.providerWait)
        default:
            return result
        }
    }

    // MARK: Probes

    /// The harmless probes this dispatcher claimed in its last `sync`s, which it now makes: each
    /// provider's once.
    public func takeOwedProbes() -> [DeliveryProvider] {
        state.withLock { state in
            defer { state.owedProbes = [] }
            return DeliveryProvider.allCases.filter { state.owedProbes.contains($0) }
        }
    }

    /// Takes a harmless probe's answer into account: answered, the provider is up again at the
    /// next `sync` (and its parked rows are woken) if it is still down then, never if it was
    /// paused meanwhile; refused, it is paused; unanswered, it stays down until the next probe.
    public func recordProbe(_ answer: ProbeAnswer, of provider: DeliveryProvider) {
        state.withLock { state in
            var delta = state.pending[provider] ?? ProviderHealth.Delta()
            switch answer {
            case .answered:
                delta.probeAnswers += 1
            case .refused(let why):
                delta.configuration = delta.configuration ?? why
            case .unavailable, .notAsked:
                return
            }
            state.pending[provider] = delta
        }
    }

    // MARK: The shared rows

    /// Writes what this dispatcher learnt since it last did, reads every provider's row back,
    /// and then, for each provider it is configured for: when it is not up and a probe is due,
    /// claims a harmless probe (a provider down that offers one: `takeOwedProbes`) or wakes a few
    /// of its parked rows to try it; when it is up, wakes the next of its parked rows. Each row is written only as it was read (its `version`), read again when another
    /// dispatcher wrote it first. Nothing is written on a dry run. A harmless probe is claimed
    /// only when `probing` (a dispatcher with nothing else to do for a moment: it makes the probe
    /// next, `takeOwedProbes`). At most `statements` statements.
    public func sync(now: Date, dryRun: Bool, probing: Bool = true, on connection: PostgresConnection, logger: Logger) async throws {
        let (token, took): (Int, [DeliveryProvider: ProviderHealth.Delta]) = state.withLock { state in
            state.nextSync += 1
            guard !dryRun else { return (state.nextSync, [:]) }
            defer { state.pending = [:] }
            state.writing[state.nextSync] = state.pending.filter { !$0.value.isEmpty }
            return (state.nextSync, state.writing[state.nextSync]!)
        }
        var taken = took
        do {
            var rows: [DeliveryProvider: (health: ProviderHealth, version: Int64)] = [:]
            for _ in 0..<Self.writeAttempts {
                rows = try await Self.read(on: connection, logger: logger)
                guard !taken.isEmpty else { break }
                var written: [DeliveryProvider: ProviderHealth] = [:]
                for (provider, delta) in taken {
                    written[provider] = (rows[provider]?.health ?? ProviderHealth())
                        .applying(delta, now: now, config: identities[provider] ?? "")
                }
                let done = try await write(written, versions: rows.mapValues(\.version), on: connection, logger: logger)
                for provider in done {
                    log(provider, from: rows[provider]?.health.state ?? .up, to: written[provider]!, delta: taken[provider]!, logger: logger)
                    rows[provider] = (written[provider]!, (rows[provider]?.version ?? 0) + 1)
                    taken[provider] = nil
                }
            }
            if !taken.isEmpty { throw NudgeError(.database, "provider_health kept changing under this dispatcher's write") }
            var shared = rows.mapValues(\.health)
            let versions = rows.mapValues(\.version)
            if !dryRun {
                var ready: [DeliveryProvider] = []
                for provider in DeliveryProvider.allCases where configured[provider] == .ready {
                    guard let health = shared[provider] else { continue }
                    if health.probeDue(at: now), health.state == .down, DeliveryServices.probesHarmlessly(provider) {
                        if probing, try await claimHarmlessProbe(provider, health: health, now: now, on: connection, logger: logger) {
                            // Owed at once: a later statement of this sync that fails loses no probe claimed.
                            state.withLock { _ = $0.owedProbes.insert(provider) }
                            shared[provider]?.probeRows = []
                            shared[provider]?.probeAt = now.addingTimeInterval(health.probeInterval)
                        }
                    } else if health.probeDue(at: now) {
                        if let probe = try await claimProbe(provider, health: health, now: now, on: connection, logger: logger) {
                            shared[provider]?.probeRows = probe
                            shared[provider]?.probeAt = now.addingTimeInterval(health.probeInterval)
                        }
                    } else if health.state == .up {
                        ready.append(provider)
                    }
                }
                if !ready.isEmpty { try await wake(ready, now: now, on: connection, logger: logger) }
            }
            state.withLock { state in
                // Lanes may finish out of order: a row read before another lane's newer read is
                // not put back over it.
                for (provider, health) in shared where (state.versions[provider] ?? -1) <= (versions[provider] ?? 0) {
                    state.shared[provider] = health
                    state.versions[provider] = versions[provider] ?? 0
                }
                state.writing[token] = nil
            }
        } catch {
            state.withLock { state in
                for (provider, delta) in taken { state.pending[provider, default: .init()].add(delta) }
                state.writing[token] = nil
            }
            throw error
        }
    }

    /// How many times a dispatcher reads and writes the rows when others write them meanwhile.
    static let writeAttempts = 3
    /// The most statements `sync` sends: a read and a write per attempt, a probe's claim and
    /// wake per provider, and the wake.
    public static let statements = 2 * writeAttempts + 2 * DeliveryProvider.allCases.count + 1

    private func log(
        _ provider: DeliveryProvider, from before: ProviderHealth.State, to health: ProviderHealth,
        delta: ProviderHealth.Delta, logger: Logger
    ) {
        guard before != health.state else { return }
        logger.notice(
            "provider state changed",
            metadata: [
                "nudge.provider": "\(provider.rawValue)", LogKey.status: "\(health.state.rawValue)",
                LogKey.reason: "\(health.summary(of: provider) ?? "answering again")",
                "nudge.answers": "\(delta.answers)", "nudge.outages": "\(delta.outages)",
            ])
    }

    /// Every provider's row as it stands, for an operator (`nudge list`).
    public static func shared(in database: Database) async throws -> [DeliveryProvider: ProviderHealth] {
        try await database.withConnection { connection in
            try await database.bounded(connection) { try await read(on: connection, logger: database.logger).mapValues(\.health) }
        }
    }

    private static func read(
        on connection: PostgresConnection,
        logger: Logger
    ) async throws -> [DeliveryProvider: (health: ProviderHealth, version: Int64)] {
        let rows = try await connection.query(
            """
            select provider, state, since, reason, config, burst, probe_at, probe_rows, window_start, window_answers,
                   window_outages, window_outage_devices, tokens_start, tokens_answers, tokens_unknown_devices, tokens_config,
                   tokens_accepted, version
              from provider_health
            """, logger: logger)
        var read: [DeliveryProvider: (health: ProviderHealth, version: Int64)] = [:]
        for try await (
            name, state, since, reason, config, burst, probeAt, probeRows, windowStart, windowAnswers, windowOutages,
            outageDevices, tokensStart, tokensAnswers, unknownDevices, tokensConfig, tokensAccepted, version
        )
            in rows.decode(
                (
                    String, String, Date?, String?, String?, Bool, Date?, [Int64], Date?, Int, Int, [String], Date?, Int,
                    [String], String?, Int, Int64
                ).self)
        {
            guard let provider = DeliveryProvider(rawValue: name) else { continue }
            var health = ProviderHealth()
            health.state = ProviderHealth.State(rawValue: state) ?? .up
            health.since = since
            health.reason = reason
            health.config = config
            health.burst = burst
            health.probeAt = probeAt
            health.probeRows = probeRows
            health.window = .init(
                start: windowStart, answers: windowAnswers, outages: windowOutages,
                outageDevices: Set(outageDevices))
            health.tokens = .init(start: tokensStart, answers: tokensAnswers, unknownDevices: Set(unknownDevices))
            health.tokensConfig = tokensConfig
            health.tokensAccepted = tokensAccepted
            read[provider] = (health, version)
        }
        return read
    }

    /// Writes each row where it still is at the version read; returns the providers written.
    private func write(
        _ rows: [DeliveryProvider: ProviderHealth], versions: [DeliveryProvider: Int64],
        on connection: PostgresConnection, logger: Logger
    ) async throws -> [DeliveryProvider] {
        let providers = rows.keys.sorted { $0.rawValue < $1.rawValue }
        let all = providers.map { rows[$0]! }
        let never = Date(timeIntervalSince1970: 0)
        let answer = try await connection.query(
            """
            update provider_health h
               set state = v.state, since = nullif(v.since, \(never)), reason = nullif(v.reason, ''),
                   config = nullif(v.config, ''), burst = v.burst, probe_at = nullif(v.probe_at, \(never)),
                   probe_rows = case when v.keep_probe then h.probe_rows else '{}' end,
                   window_start = nullif(v.window_start, \(never)), window_answers = v.window_answers,
                   window_outages = v.window_outages,
                   window_outage_devices = case when v.window_outage_devices = '' then '{}'::text[]
                                                else string_to_array(v.window_outage_devices, ',') end,
                   tokens_start = nullif(v.tokens_start, \(never)), tokens_answers = v.tokens_answers,
                   tokens_unknown = v.tokens_unknown,
                   tokens_unknown_devices = case when v.tokens_unknown_devices = '' then '{}'::text[]
                                                 else string_to_array(v.tokens_unknown_devices, ',') end,
                   tokens_config = nullif(v.tokens_config, ''), tokens_accepted = v.tokens_accepted,
                   version = h.version + 1, updated_at = now()
              from unnest(\(providers.map(\.rawValue)), \(providers.map { versions[$0] ?? 0 }), \(all.map(\.state.rawValue)),
                          \(all.map { $0.since ?? never }), \(all.map { $0.reason ?? "" }), \(all.map { $0.config ?? "" }),
                          \(all.map(\.burst)), \(all.map { $0.probeAt ?? never }), \(all.map { !$0.probeRows.isEmpty }),
                          \(all.map { $0.window.start ?? never }), \(all.map(\.window.answers)), \(all.map(\.window.outages)),
                          \(all.map { $0.window.outageDevices.sorted().joined(separator: ",") }),
                          \(all.map { $0.tokens.start ?? never }), \(all.map(\.tokens.answers)), \(all.map(\.tokens.unknown)),
                          \(all.map { $0.tokens.unknownDevices.sorted().joined(separator: ",") }),
                          \(all.map { $0.tokensConfig ?? "" }), \(all.map(\.tokensAccepted)))
                   as v(provider, version, state, since, reason, config, burst, probe_at, keep_probe, window_start, window_answers,
                        window_outages, window_outage_devices, tokens_start, tokens_answers, tokens_unknown, tokens_unknown_devices,
                        tokens_config, tokens_accepted)
             where h.provider = v.provider and h.version = v.version
            returning h.provider
            """, logger: logger)
        var written: [DeliveryProvider] = []
        for try await name in answer.decode(String.self) {
            if let provider = DeliveryProvider(rawValue: name) { written.append(provider) }
        }
        return written
    }

    /// Takes the next probe of a provider that is down and offers a harmless one, unless another
    /// dispatcher took it first: only the dispatcher whose claim moved `probe_at` makes it
    /// (`takeOwedProbes`). No parked row is woken: the probe sends nobody anything.
    private func claimHarmlessProbe(
        _ provider: DeliveryProvider, health: ProviderHealth, now: Date,
        on connection: PostgresConnection, logger: Logger
    ) async throws -> Bool {
        let next = now.addingTimeInterval(health.probeInterval)
        let claimed = try await connection.query(
            """
            update provider_health set probe_at = \(next), probe_rows = '{}', version = version + 1, updated_at = now()
             where provider = \(provider.rawValue) and state = 'down' and (probe_at is null or probe_at <= \(now))
            returning provider
            """, logger: logger)
        for try await _ in claimed.decode(String.self) { return true }
        return false
    }

    /// Takes the provider's next probe, unless another dispatcher took it first (only the
    /// dispatcher whose claim moved `probe_at` wakes anything): wakes up to `probeSize` of its
    /// parked rows, of distinct users, the next ones after the last probe's (never the same row
    /// twice running, so one row that keeps drawing a 5xx cannot hold the provider down), which
    /// any dispatcher then sends. Returns their ids.
    private func claimProbe(
        _ provider: DeliveryProvider, health: ProviderHealth, now: Date,
        on connection: PostgresConnection, logger: Logger
    ) async throws -> [Int64]? {
        let next = now.addingTimeInterval(health.probeInterval)
        let claimed = try await connection.query(
            """
            update provider_health h set probe_at = \(next), probe_rows = '{}', version = h.version + 1, updated_at = now()
              from (select probe_rows as previous from provider_health where provider = \(provider.rawValue)) last
             where h.provider = \(provider.rawValue) and h.state <> 'up' and (h.probe_at is null or h.probe_at <= \(now))
            returning last.previous
            """, logger: logger)
        var previous: [Int64]?
        for try await rows in claimed.decode([Int64].self) { previous = rows }
        guard let previous else { return nil }
        let after = previous.max() ?? 0
        let rows = try await connection.query(
            """
            with candidates as (
                (select id, user_id, 0 as pass from notification_outbox
                  where waiting_for = \(provider.rawValue) and status = 'pending' and id > \(after)
                  order by id limit \(Self.probeCandidates))
                union all
                (select id, user_id, 1 from notification_outbox
                  where waiting_for = \(provider.rawValue) and status = 'pending' and id <= \(after) and not (id = any(\(previous)))
                  order by id limit \(Self.probeCandidates))
            ), picked as (
                select id from (select distinct on (user_id) id, pass from candidates order by user_id, pass, id) one_each
                 order by pass, id limit \(ProviderHealth.probeSize)
            ), woken as (
                update notification_outbox o set next_attempt_at = \(now), waiting_for = null
                  from picked p where o.id = p.id and o.waiting_for = \(provider.rawValue) and o.status = 'pending'
                returning o.id
            )
            update provider_health
               set probe_rows = coalesce((select array_agg(id order by id) from woken), '{}'), version = version + 1, updated_at = now()
             where provider = \(provider.rawValue)
            returning probe_rows
            """, logger: logger)
        for try await probe in rows.decode([Int64].self) {
            logger.info(
                "probing a provider that is not up",
                metadata: [
                    "nudge.provider": "\(provider.rawValue)", "nudge.rows": "\(probe.count)",
                ])
            return probe
        }
        return nil
    }

    /// How many parked rows a probe looks at to find `probeSize` of distinct users.
    static let probeCandidates = 50

    /// Wakes the next of the rows parked for providers that are up again (or configured now).
    private func wake(_ providers: [DeliveryProvider], now: Date, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query(
            """
            with picked as (
                select id from notification_outbox
                 where waiting_for = any(\(providers.map(\.rawValue))) and status = 'pending'
                 order by waiting_for, id limit \(Self.wakeBatch)
                   for update skip locked
            )
            update notification_outbox o set next_attempt_at = \(now), waiting_for = null
              from picked p where o.id = p.id
            """, logger: logger)
    }
}
