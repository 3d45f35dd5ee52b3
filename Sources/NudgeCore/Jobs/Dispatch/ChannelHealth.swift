import Foundation
import Synchronization

/// What a run has learnt about each push provider: whether it is paused, and why. A provider is
/// paused for the rest of the run when it refuses Nudge's configuration (a key, a topic, a
/// project), or when it calls many tokens invalid at once: a burst of BadDeviceToken or
/// UNREGISTERED answers across many devices is the signature of a wrong environment (sandbox
/// tokens sent to production), a wrong bundle id or project, not of that many uninstalled apps,
/// so those tokens are kept and their notifications wait.
public final class ChannelHealth: Sendable {
    /// A burst: at least this many invalid-token answers…
    static let burstMinimum = 5
    /// …making up at least half of the provider's last `window` answers.
    static let window = 100

    private struct State {
        var paused: [PushProvider: String] = [:]
        /// The provider's last answers, oldest first: whether each called the token invalid.
        var recent: [PushProvider: [Bool]] = [:]
    }

    private let state = Mutex(State())
    private let configured: [PushProvider: ProviderState]

    public init(configured: [PushProvider: ProviderState]) {
        self.configured = configured
    }

    /// Each provider's state now: not configured, paused, or ready.
    public var states: [PushProvider: ProviderState] {
        let paused = state.withLock { $0.paused }
        var states = configured
        for (provider, why) in paused { states[provider] = .unavailable("\(provider.displayName) is paused for this run: \(why)") }
        return states
    }

    public func pauseReason(_ provider: PushProvider) -> String? {
        state.withLock { $0.paused[provider] }
    }

    /// Why the run must report a configuration error: the providers paused, each with its reason.
    public var problems: [String] {
        state.withLock { state in
            state.paused.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key.displayName) paused: \($0.value)" }
        }
    }

    /// Takes one answer into account; pauses the provider on a configuration error or a burst.
    public func record(_ result: SendResult, from provider: PushProvider) {
        state.withLock { state in
            switch result {
            case .configuration(let why):
                if state.paused[provider] == nil { state.paused[provider] = why }
                return
            case .notSent:
                return
            case .invalidToken:
                state.recent[provider, default: []].append(true)
            default:
                state.recent[provider, default: []].append(false)
            }
            if state.recent[provider]!.count > Self.window { state.recent[provider]!.removeFirst() }
            let answers = state.recent[provider]!
            let invalid = answers.count { $0 }
            if state.paused[provider] == nil, invalid >= Self.burstMinimum, invalid * 2 >= answers.count {
                state.paused[provider] = """
                    \(invalid) of its last \(answers.count) answers called the device token invalid: a configuration error \
                    (APNS_ENVIRONMENT sandbox against production tokens, the wrong APNS_BUNDLE_ID or FCM project?), \
                    so no token was deactivated
                    """
            }
        }
    }

    /// What an answer means once the run's view of the provider is known: an invalid token from
    /// a provider paused for a burst is the configuration's fault, not the token's.
    public func interpret(_ result: SendResult, from provider: PushProvider) -> SendResult {
        guard case .invalidToken(let why) = result, let paused = pauseReason(provider) else { return result }
        return .configuration("\(why), taken as a configuration error: \(paused)")
    }
}
