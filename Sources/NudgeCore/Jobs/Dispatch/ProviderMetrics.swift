import Foundation
import Logging
import PostgresNIO

/// What dispatch tells monitoring about the delivery providers at the end of each run, in its
/// metrics textfile (docs/jobs/dispatch.md, "Provider metrics"): so that a provider down or
/// paused for a quarter of an hour pages someone (`deploy/prometheus/nudge-alerts.yml`), where the
/// runs themselves exit 0 for an outage. Every provider is written, configured or not: its
/// state is the one every dispatcher shares (`provider_health`), and the notifications parked
/// for a provider this dispatcher has no credentials for wait there all the same.
public enum ProviderMetrics {
    /// One provider as the end of a run reads it.
    public struct Reading: Sendable, Equatable {
        public let provider: DeliveryProvider
        public let state: ProviderHealth.State
        public let since: Date?
        /// Its parked notifications (`pending`, `waiting_for` it), up to `parkedCountLimit`.
        public let parked: Int

        public init(provider: DeliveryProvider, state: ProviderHealth.State, since: Date?, parked: Int) {
            self.provider = provider
            self.state = state
            self.since = since
            self.parked = parked
        }
    }

    /// The parked rows counted per provider, at most: the count walks `idx_outbox_parked` and
    /// checks each row's status, and an outage at a million users parks hundreds of thousands
    /// a run must not read every minute. Past it, "at least this many" is all an alert needs.
    public static let parkedCountLimit = 10_000

    /// Each provider's state, since when, and its parked rows, in one statement.
    static func read(on connection: PostgresConnection, logger: Logger) async throws -> [Reading] {
        let rows = try await connection.query(
            """
            select p.provider, coalesce(h.state, 'up'), h.since,
                   (select count(*) from (select 1 from notification_outbox o
                                           where o.waiting_for = p.provider and o.status = 'pending'
                                           limit \(parkedCountLimit)) parked)
              from unnest(\(DeliveryProvider.allCases.map(\.rawValue))::text[]) as p(provider)
              left join provider_health h on h.provider = p.provider
             order by p.provider
            """, logger: logger)
        var readings: [Reading] = []
        for try await (name, state, since, parked) in rows.decode((String, String, Date?, Int).self) {
            guard let provider = DeliveryProvider(rawValue: name) else { continue }
            readings.append(
                Reading(
                    provider: provider, state: ProviderHealth.State(rawValue: state) ?? .up, since: since,
                    parked: parked))
        }
        return readings
    }

    /// The gauges, per provider: its state (one-hot), how long it has not been up, its parked
    /// notifications, and whether this dispatcher is configured for it. Time down is measured on
    /// the run's clock, the one `since` was written on.
    public static func metrics(_ readings: [Reading], configured: [DeliveryProvider: ProviderState], now: Date) -> [RunMetric] {
        func each(_ value: (Reading) -> Double) -> [RunMetric.Sample] {
            readings.map { RunMetric.Sample(["provider": $0.provider.rawValue], value($0)) }
        }
        let states: [ProviderHealth.State] = [.up, .down, .paused]
        return [
            RunMetric(
                name: "nudge_provider_state",
                help: "Each delivery provider's state as every dispatcher shares it (provider_health): 1 for the state it is in.",
                samples: readings.flatMap { reading in
                    states.map {
                        RunMetric.Sample(
                            ["provider": reading.provider.rawValue, "state": $0.rawValue],
                            reading.state == $0 ? 1 : 0)
                    }
                }),
            RunMetric(
                name: "nudge_provider_down_seconds",
                help: "Seconds each delivery provider has been down or paused (since provider_health.since); 0 when up.",
                samples: each { reading in
                    guard reading.state != .up, let since = reading.since else { return 0 }
                    return max(0, now.timeIntervalSince(since).rounded(.down))
                }),
            RunMetric(
                name: "nudge_provider_parked",
                help: "Notifications parked for each delivery provider (pending, waiting_for it), counted up to \(parkedCountLimit).",
                samples: each { Double($0.parked) }),
            RunMetric(
                name: "nudge_provider_configured",
                help: "Whether this dispatcher has each delivery provider's credentials (1) or not (0).",
                samples: each { configured[$0.provider] == .ready ? 1 : 0 }),
        ]
    }
}

extension DispatchJob {
    /// The providers' gauges for the run's textfile (`RunReports.runMetrics`).
    public func runMetrics(run: RunContext, on connection: PostgresConnection) async throws -> [RunMetric] {
        ProviderMetrics.metrics(
            try await ProviderMetrics.read(on: connection, logger: run.logger), configured: push.states,
            now: run.now)
    }
}
