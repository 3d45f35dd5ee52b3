import Foundation
import Logging
import PostgresNIO

/// dispatch's part in the providers' shared state (`ChannelHealth`): read and written when a run
/// starts, while its queue is idle and after each batch, and the harmless probes it claimed.
extension DispatchJob {
    /// The providers' shared state: read before the first batch and while the queue is idle,
    /// written with what each batch learnt (`ChannelHealth.sync`).
    public func tend(run: RunContext, on connection: PostgresConnection) async throws {
        try await health.sync(now: run.now, dryRun: dryRun, on: connection, logger: run.logger)
        // Twilio callbacks kept for logs written since by a write that did not see them.
        if !dryRun { _ = try await SMSStatus.applyKept(on: connection, logger: run.logger) }
    }

    /// The harmless probes `tend` claimed for providers found down (FCM, Resend, Twilio:
    /// requests that send nobody anything), made together: each answer goes into the providers'
    /// health, written by the `tend` that follows (docs/jobs/dispatch.md, "Provider outages").
    public func tendOutside(run: RunContext) async -> Bool {
        let owed = health.takeOwedProbes()
        guard !owed.isEmpty, !dryRun else { return false }
        let context = SendContext(database: run.database, logger: run.logger, clock: run.clock, waitClock: run.waitClock)
        let push = self.push
        return await withTaskGroup(of: (DeliveryProvider, ProbeAnswer?).self) { group in
            for provider in owed {
                group.addTask { (provider, await push.probe(provider, context: context)) }
            }
            var learnt = false
            for await (provider, answer) in group {
                guard let answer else {
                    run.logger.warning(
                        "a provider found down could not be probed",
                        metadata: [
                            "nudge.provider": "\(provider.rawValue)", LogKey.reason: "no client for it in this dispatcher",
                        ])
                    continue
                }
                run.logger.info(
                    "probed a provider that is down",
                    metadata: [
                        "nudge.provider": "\(provider.rawValue)", LogKey.reason: "\(answer.description)",
                    ])
                health.recordProbe(answer, of: provider)
                switch answer {
                case .answered, .refused: learnt = true
                case .unavailable, .notAsked: break
                }
            }
            return learnt
        }
    }

    /// After a batch, no harmless probe is claimed: the lane goes on to its next batch, and a
    /// dispatcher at rest (or the next run's start) makes it.
    public func afterBatch(run: RunContext, on connection: PostgresConnection) async throws -> [String: Int] {
        try await health.sync(now: max(run.now, run.clock.now()), dryRun: dryRun, probing: false, on: connection, logger: run.logger)
        // Resend's events that came while this batch wrote its emails' logs.
        if !dryRun { _ = try await EmailEvents.applyWhileWritten(run: run.runID, on: connection, logger: run.logger) }
        return [:]
    }
}
