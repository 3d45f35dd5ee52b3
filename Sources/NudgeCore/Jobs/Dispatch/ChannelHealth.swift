import Foundation
import Synchronization

/// What a run has learnt about each push provider. A provider is paused for the rest of the run
/// when it refuses Nudge's configuration (a key, a topic, a project), or when it calls many
/// tokens unknown at once: a burst of `BadDeviceToken` or `SENDER_ID_MISMATCH` answers across
/// many devices is the signature of a wrong environment (sandbox tokens sent to production), a
/// wrong bundle id or project, not of that many broken tokens, so those tokens are kept and their
/// notifications wait. Uninstalled apps (APNs 410, FCM `UNREGISTERED`) never count towards it. A
/// provider over its project's quota is held for the time it asks. A pause is a configuration
/// error the run reports (exit 1); a quota is not.
public final class ChannelHealth: Sendable {
    /// A burst: at least this many unknown-token answers…
    static let burstMinimum = 5
    /// …making up at least half of the provider's last `window` answers.
    static let window = 100

    private struct State {
        var paused: [DeliveryProvider: (reason: String, burst: Bool)] = [:]
        var throttledUntil: [DeliveryProvider: (until: ContinuousClock.Instant, reason: String)] = [:]
        /// The provider's last answers, oldest first: whether each called the token unknown.
        var recent: [DeliveryProvider: [Bool]] = [:]
    }

    private let state = Mutex(State())
    private let configured: [DeliveryProvider: ProviderState]

    public init(configured: [DeliveryProvider: ProviderState]) {
        self.configured = configured
    }

    /// Each provider's state now: not configured, paused, held by its quota, or ready.
    public var states: [DeliveryProvider: ProviderState] {
        var states = configured
        for provider in DeliveryProvider.allCases {
            if let (why, after) = hold(provider) { states[provider] = after.map { .held(why, for: $0) } ?? .unavailable(why) }
        }
        return states
    }

    /// Why `provider` may not be asked now, and for how long (nil: for the rest of the run).
    public func hold(_ provider: DeliveryProvider) -> (reason: String, after: TimeInterval?)? {
        state.withLock { state in
            if let paused = state.paused[provider] {
                return ("\(provider.displayName) is paused for this run: \(paused.reason)", nil)
            }
            if let throttled = state.throttledUntil[provider] {
                let left = ContinuousClock.now.duration(to: throttled.until)
                if left > .zero {
                    return ("\(provider.displayName) is over its quota: \(throttled.reason)", left.seconds)
                }
                state.throttledUntil[provider] = nil
            }
            return nil
        }
    }

    /// Why the run must report a configuration error: the providers paused, each with its reason.
    public var problems: [String] {
        state.withLock { state in
            state.paused.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key.displayName) paused: \($0.value.reason)" }
        }
    }

    /// Takes one answer into account; pauses the provider on a configuration error or a burst,
    /// holds it on a quota.
    public func record(_ result: SendResult, from provider: DeliveryProvider) {
        state.withLock { state in
            switch result {
            case .configuration(let why):
                if state.paused[provider] == nil { state.paused[provider] = (why, false) }
                return
            case .throttled(let why, let after):
                let seconds = after.isFinite ? min(max(after, 0), 24 * 3600) : 60
                let until = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
                if (state.throttledUntil[provider]?.until).map({ $0 < until }) ?? true {
                    state.throttledUntil[provider] = (until, why)
                }
                return
            case .notSent:
                return
            case .invalidToken(_, let unknownToProvider):
                state.recent[provider, default: []].append(unknownToProvider)
            default:
                state.recent[provider, default: []].append(false)
            }
            if state.recent[provider]!.count > Self.window { state.recent[provider]!.removeFirst() }
            let answers = state.recent[provider]!
            let unknown = answers.count { $0 }
            if state.paused[provider] == nil, unknown >= Self.burstMinimum, unknown * 2 >= answers.count {
                state.paused[provider] = ("""
                    \(unknown) of its last \(answers.count) answers called the device token unknown: a configuration error \
                    (APNS_ENVIRONMENT sandbox against production tokens, the wrong APNS_BUNDLE_ID or FCM project?), \
                    so no token was deactivated
                    """, true)
            }
        }
    }

    /// What an answer means once the run's view of the provider is known: an unknown token from a
    /// provider paused for a burst is the configuration's fault, not the token's.
    public func interpret(_ result: SendResult, from provider: DeliveryProvider) -> SendResult {
        guard case .invalidToken(let why, true) = result,
              let paused = state.withLock({ $0.paused[provider] }), paused.burst else { return result }
        return .configuration("\(why), taken as a configuration error: \(paused.reason)")
    }
}
