import Foundation

/// One provider's health as every dispatcher shares it (a `provider_health` row), and the pure
/// rules that move it. A provider is
/// - **up**: sent to;
/// - **down**: most of its answers of the last minute were 5xx, time-outs or refused connections,
///   from at least `outageMinimum` distinct devices (or addresses, or requests), and twice as
///   many as its other answers: one token that always draws a 5xx is that token's trouble, not
///   an outage. Its notifications are parked without spending an attempt; every
///   `downProbeInterval` a dispatcher probes it, with a request that sends nobody anything where
///   the provider offers one (FCM, Resend, Twilio) and otherwise (APNs) with a few parked rows
///   (never the same ones twice running), and it is up as soon as any request of a probe is
///   answered;
/// - **paused**: it refused Nudge's configuration (a key, a topic, a project), or called many
///   distinct tokens unknown at once (`BadDeviceToken`, `SENDER_ID_MISMATCH` from at least
///   `burstMinimum` devices and half its answers: a wrong `APNS_ENVIRONMENT`, bundle id or
///   project, not a quiet hour's few stale tokens). Its notifications are parked and the runs
///   exit 1 until it is fixed: a dispatcher with another configuration tries it at once;
///   otherwise a probe every `pausedProbeInterval`.
///
/// A token called unknown is deactivated only once the provider has confirmed its configuration
/// by taking other tokens (`confirmsTokens`); until then the notification waits, so that a wrong
/// environment at a trickle of pushes deactivates nothing. A token called unknown again counts
/// once: the same stale tokens retried cannot add up to a burst (docs/jobs/dispatch.md,
/// "Provider outages").
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
    /// The configuration (`DeliveryServices.identities`) under which the provider has taken
    /// tokens since it was last paused, and how many: once `confirmingAnswers`, a token it calls
    /// unknown is unknown indeed, however quiet the night.
    public var tokensConfig: String?
    public var tokensAccepted = 0

    public init() {}

    /// The last minute's answers, and the devices (digests) its outages came from.
    public struct Window: Sendable, Equatable {
        public var start: Date?
        public var answers = 0
        public var outages = 0
        public var outageDevices: Set<String> = []
    }

    /// The last half hour's answers, and the distinct devices (digests) it called unknown. A
    /// device called unknown counts once, as one answer.
    public struct TokenWindow: Sendable, Equatable {
        public var start: Date?
        public var answers = 0
        public var unknownDevices: Set<String> = []
        public var unknown: Int { unknownDevices.count }
    }

    static let windowLength: TimeInterval = 60
    static let tokenWindowLength: TimeInterval = 30 * 60
    /// Down: outages from at least this many distinct devices.
    static let outageMinimum = 3
    /// A burst: at least this many distinct devices called unknown, half of the answers or more.
    /// A quiet hour's stale tokens (a few users who deleted the app) stay well under it.
    static let burstMinimum = 20
    /// The most digests a window keeps: enough to decide by, bounded in the shared row.
    static let windowDevicesKept = 8
    static let tokenDevicesKept = 64
    /// Answers that were not "unknown token" a provider must have given before Nudge believes one.
    static let confirmingAnswers = 5
    public static let downProbeInterval: TimeInterval = 30
    public static let pausedProbeInterval: TimeInterval = 5 * 60
    public static let probeSize = 3

    /// What one dispatcher learnt since it last wrote the row.
    public struct Delta: Sendable, Equatable {
        /// Answers about notifications (anything but an outage), unknown tokens included.
        public var answers = 0
        public var outages = 0
        /// The devices (digests) the outages came from.
        public var outageDevices: Set<String> = []
        /// Answers that called the device token unknown, and the devices (digests) they named.
        public var unknownTokens = 0
        public var unknownDevices: Set<String> = []
        /// Of them, those given while the row was not up (probes, or a new configuration tried).
        public var trialAnswers = 0
        public var trialOutages = 0
        /// Trial answers that were neither an unknown token nor a configuration error.
        public var trialAccepted = 0
        /// Harmless probes answered (`ChannelHealth.recordProbe`): they bring up a provider that
        /// is down, never one paused (they ask nothing of its configuration).
        public var probeAnswers = 0
        /// Answers that prove the configuration: a notification taken, or a token the provider
        /// knows is gone.
        public var accepted = 0
        public var lastOutage: String?
        public var configuration: String?

        public var isEmpty: Bool { self == Delta() }

        public init() {}

        mutating func add(_ other: Delta) {
            answers += other.answers
            outages += other.outages
            outageDevices.formUnion(other.outageDevices)
            unknownTokens += other.unknownTokens
            unknownDevices.formUnion(other.unknownDevices)
            trialAnswers += other.trialAnswers
            trialOutages += other.trialOutages
            trialAccepted += other.trialAccepted
            probeAnswers += other.probeAnswers
            accepted += other.accepted
            lastOutage = other.lastOutage ?? lastOutage
            configuration = configuration ?? other.configuration
        }
    }

    /// A device, an address or a request as the windows keep it: a short digest, never the
    /// token or the address itself.
    public static func digest(_ device: String) -> String {
        String(Digest.sha256Hex(device).prefix(12))
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
        next.window.outageDevices = Self.kept(next.window.outageDevices, adding: delta.outageDevices, most: Self.windowDevicesKept)
        // A device called unknown again is no new answer: the same stale tokens retried never add up.
        let newlyUnknown = delta.unknownDevices.subtracting(next.tokens.unknownDevices)
        next.tokens.answers += delta.answers - delta.unknownTokens + newlyUnknown.count
        next.tokens.unknownDevices = Self.kept(next.tokens.unknownDevices, adding: newlyUnknown, most: Self.tokenDevicesKept)
        if next.tokensConfig != config {
            next.tokensConfig = config
            next.tokensAccepted = 0
        }
        next.tokensAccepted = min(next.tokensAccepted + delta.accepted, 1_000_000)

        // Back: any request of a trial answered (one row that keeps drawing a 5xx cannot hold the
        // provider down); for a pause, a token taken or a configuration that is no longer refused.
        switch next.state {
        case .up:
            break
        case .down:
            if delta.trialAnswers + delta.probeAnswers > 0 && delta.configuration == nil { next.markUp() }
        case .paused:
            if next.burst ? delta.trialAccepted > 0 : delta.trialAnswers > 0 && delta.configuration == nil { next.markUp() }
        }
        if let why = delta.configuration, next.state != .paused || next.config != config {
            next.pause(why, burst: false, config: config, now: now)
        } else if next.state != .paused, next.tokens.unknown >= Self.burstMinimum, next.tokens.unknown * 2 >= next.tokens.answers {
            next.pause(
                """
                it called the tokens of \(next.tokens.unknown) distinct devices unknown in \(next.tokens.answers) answers: a configuration \
                error (APNS_ENVIRONMENT sandbox against production tokens, the wrong APNS_BUNDLE_ID or FCM project?), so no \
                token was deactivated
                """, burst: true, config: config, now: now)
        } else if next.state == .up, next.window.outageDevices.count >= Self.outageMinimum,
            next.window.outages >= 2 * (next.window.answers)
        {
            next.state = .down
            next.since = now
            next.reason =
                "\(next.window.outages) of its last \(next.window.outages + next.window.answers) requests got no answer"
                + (delta.lastOutage.map { " (last: \($0))" } ?? "")
            next.probeAt = now.addingTimeInterval(Self.downProbeInterval)
            next.probeRows = []
        }
        return next
    }

    /// `set` with `adding`, keeping at most `most` (enough to count up to the thresholds).
    static func kept(_ set: Set<String>, adding: Set<String>, most: Int) -> Set<String> {
        guard set.count < most else { return set }
        var all = set
        for digest in adding.sorted() where all.count < most { all.insert(digest) }
        return all
    }

    /// Whether the provider is answering other requests now (the last minute's answers outnumber
    /// its outages two to one): an outage drawn meanwhile is about that request, and spends an
    /// attempt like any answer about it.
    public var answersOthers: Bool {
        state == .up && window.answers >= Self.outageMinimum && window.answers >= 2 * window.outages
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
        tokensConfig = nil
        tokensAccepted = 0
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

    /// Whether the provider has shown, by taking other tokens under the configuration `config`
    /// since it was last paused, that this configuration is right, so that a token it calls
    /// unknown is unknown indeed.
    public func confirmsTokens(config: String) -> Bool {
        tokensConfig == config && tokensAccepted >= Self.confirmingAnswers
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
