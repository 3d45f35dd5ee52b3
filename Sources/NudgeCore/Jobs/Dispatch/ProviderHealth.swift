import Foundation

/// One provider's health as every dispatcher shares it (a `provider_health` row), and the pure
/// rules that move it. A provider is
/// - **up**: sent to;
/// - **down**: most of its answers of the last minute were 5xx, time-outs or refused connections
///   (at least `outageMinimum`, and twice as many as its other answers). Its notifications are
///   parked without spending an attempt; every `downProbeInterval` a dispatcher wakes
///   `probeSize` of them to try it again, and it is up as soon as a probe gets an answer;
/// - **paused**: it refused Nudge's configuration (a key, a topic, a project), or called many
///   tokens unknown at once (`BadDeviceToken`, `SENDER_ID_MISMATCH` across many devices: a wrong
///   `APNS_ENVIRONMENT`, bundle id or project, not that many broken tokens). Its notifications are
///   parked and the runs exit 1 until it is fixed: a dispatcher with another configuration tries
///   it at once; otherwise a probe every `pausedProbeInterval`.
///
/// A token called unknown is deactivated only once the provider has confirmed its configuration
/// by taking other tokens (`confirmsTokens`); until then the notification waits, so that a wrong
/// environment at a trickle of pushes deactivates nothing.
public struct ProviderHealth: Sendable, Equatable {
    public enum State: String, Sendable { case up, down, paused }

    public var state: State = .up
    public var since: Date?
    public var reason: String?
    /// Paused: the configuration it was paused under (`DeliveryServices.identities`).
    public var config: String?
    public var burst = false
    public var probeAt: Date?
    public var probeRows: [Int64] = []
    public var window = Window()
    public var tokens = TokenWindow()

    public init() {}

    /// The last minute's answers.
    public struct Window: Sendable, Equatable {
        public var start: Date?
        public var answers = 0
        public var outages = 0
    }

    /// The last half hour's answers, and those that called the device token unknown.
    public struct TokenWindow: Sendable, Equatable {
        public var start: Date?
        public var answers = 0
        public var unknown = 0
    }

    static let windowLength: TimeInterval = 60
    static let tokenWindowLength: TimeInterval = 30 * 60
    static let outageMinimum = 3
    /// A burst: at least this many unknown-token answers, half of the answers or more.
    static let burstMinimum = 5
    /// Answers that were not "unknown token" a provider must have given before Nudge believes one.
    static let confirmingAnswers = 5
    public static let downProbeInterval: TimeInterval = 30
    public static let pausedProbeInterval: TimeInterval = 5 * 60
    public static let probeSize = 3

    /// What one dispatcher learnt since it last wrote the row.
    public struct Delta: Sendable, Equatable {
        /// Answers about notifications (anything but an outage).
        public var answers = 0
        public var outages = 0
        public var unknownTokens = 0
        /// Of them, those given while the row was not up (probes, or a new configuration tried).
        public var trialAnswers = 0
        public var trialOutages = 0
        /// Trial answers that were neither an unknown token nor a configuration error.
        public var trialAccepted = 0
        public var lastOutage: String?
        public var configuration: String?

        public var isEmpty: Bool { self == Delta() }

        public init() {}

        mutating func add(_ other: Delta) {
            answers += other.answers
            outages += other.outages
            unknownTokens += other.unknownTokens
            trialAnswers += other.trialAnswers
            trialOutages += other.trialOutages
            trialAccepted += other.trialAccepted
            lastOutage = other.lastOutage ?? lastOutage
            configuration = configuration ?? other.configuration
        }
    }

    /// The row once `delta` is taken into account at `now`, by a dispatcher whose configuration
    /// of this provider is `config`.
    public func applying(_ delta: Delta, now: Date, config: String) -> ProviderHealth {
        var next = self
        if next.window.start.map({ now.timeIntervalSince($0) >= Self.windowLength }) ?? true {
            next.window = Window(start: now)
        }
        if next.tokens.start.map({ now.timeIntervalSince($0) >= Self.tokenWindowLength }) ?? true {
            next.tokens = TokenWindow(start: now)
        }
        next.window.answers += delta.answers
        next.window.outages += delta.outages
        next.tokens.answers += delta.answers
        next.tokens.unknown += delta.unknownTokens

        // Back: a trial answered, none of its answers an outage; for a pause, a token taken or a
        // configuration that is no longer refused.
        switch next.state {
        case .up:
            break
        case .down:
            if delta.trialAnswers > 0 && delta.trialOutages == 0 && delta.configuration == nil { next.markUp() }
        case .paused:
            let accepted = next.burst ? delta.trialAccepted > 0 : delta.trialAnswers > 0 && delta.configuration == nil
            if accepted && delta.trialOutages == 0 { next.markUp() }
        }
        if let why = delta.configuration, next.state != .paused || next.config != config {
            next.pause(why, burst: false, config: config, now: now)
        } else if next.state != .paused, next.tokens.unknown >= Self.burstMinimum, next.tokens.unknown * 2 >= next.tokens.answers {
            next.pause("""
                \(next.tokens.unknown) of its last \(next.tokens.answers) answers called the device token unknown: a configuration \
                error (APNS_ENVIRONMENT sandbox against production tokens, the wrong APNS_BUNDLE_ID or FCM project?), so no \
                token was deactivated
                """, burst: true, config: config, now: now)
        } else if next.state == .up, next.window.outages >= Self.outageMinimum,
                  next.window.outages >= 2 * (next.window.answers) {
            next.state = .down
            next.since = now
            next.reason = "\(next.window.outages) of its last \(next.window.outages + next.window.answers) requests got no answer"
                + (delta.lastOutage.map { " (last: \($0))" } ?? "")
            next.probeAt = now.addingTimeInterval(Self.downProbeInterval)
            next.probeRows = []
        }
        return next
    }

    private mutating func markUp() {
        state = .up
        since = nil
        reason = nil
        config = nil
        burst = false
        probeAt = nil
        probeRows = []
        window = Window()
        tokens = TokenWindow()
    }

    private mutating func pause(_ why: String, burst: Bool, config: String, now: Date) {
        state = .paused
        since = now
        reason = why
        self.config = config
        self.burst = burst
        probeAt = now.addingTimeInterval(Self.pausedProbeInterval)
        probeRows = []
    }

    /// Whether a dispatcher configured as `config` may send to this provider now: up, or paused
    /// under another configuration than its own (which is then tried).
    public func allowsSending(config: String) -> Bool {
        switch state {
        case .up: true
        case .down: false
        case .paused: self.config != config
        }
    }

    /// Whether the provider has shown, by taking other tokens, that its configuration is right, so
    /// that a token it calls unknown is unknown indeed.
    public var confirmsTokens: Bool {
        tokens.answers - tokens.unknown >= Self.confirmingAnswers && tokens.unknown * 2 < tokens.answers
    }

    /// When a dispatcher may next wake parked rows to try the provider again.
    public func probeDue(at now: Date) -> Bool {
        state != .up && (probeAt.map { $0 <= now } ?? true)
    }

    public var probeInterval: TimeInterval { state == .paused ? Self.pausedProbeInterval : Self.downProbeInterval }

    /// How an operator reads it: "down since …: why".
    public func summary(of provider: DeliveryProvider) -> String? {
        let when = since.map { " since \($0.formatted(.iso8601))" } ?? ""
        switch state {
        case .up: return nil
        case .down: return "\(provider.displayName) is down\(when): \(reason ?? "no answer")"
        case .paused: return "\(provider.displayName) is paused\(when): \(reason ?? "its configuration was refused")"
        }
    }
}
