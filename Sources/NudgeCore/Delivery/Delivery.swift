import Foundation

/// One outbox row as dispatch holds it.
public struct QueuedNotification: Sendable, Equatable {
    public let id: Int64
    public let type: String
    public let channel: DeliveryChannel
    public let localDay: LocalDate
    public let deliverAfter: Date
    /// When it is due: `deliverAfter`, or the end of the quiet hours it was deferred to, or the
    /// time of its next attempt.
    public let dueAt: Date
    public let title: String
    public let body: String
    /// A JSON object, as text.
    public let payload: String
    /// How many attempts it has had, this one included.
    public let attempts: Int
    /// The devices that have it already (`Device.key`).
    public let deliveredTo: Set<String>
    /// The lead row of the delivery it went out in, once it has been attempted.
    public let deliveryID: Int64?
    /// When it first reached a device.
    public let sentAt: Date?
    /// The payload read, once: nil when it is not a JSON object.
    public let payloadObject: [String: JSONValue]?
    /// What dispatch knows of its type, looked up once.
    public let kind: NotificationKind
    /// When a request left for it: an SMS's (which may not be repeated) while its outcome is
    /// not recorded (its dispatcher died, or the answer was lost); an email's batch request, for
    /// good (it goes again only as it was: `requestKey`).
    public let requestLeftAt: Date?
    /// The Idempotency-Key of the Resend batch request an email left in, and the address it
    /// went to (`ResendClient.batchKey`).
    public let requestKey: String?
    public let requestTo: String?
    /// When that batch's shelf life ends: its emails' earliest.
    public let requestExpiresAt: Date?
    /// For an SMS whose request left without a clear answer: from when Twilio's message list is
    /// believed when it does not show it (nil: `TwilioClient.listShowsAfter` after it left).
    public let requestShownBy: Date?

    public init(
        id: Int64, type: String, channel: DeliveryChannel = .push, localDay: LocalDate, deliverAfter: Date, dueAt: Date? = nil,
        title: String, body: String, payload: String = "{}", attempts: Int = 1, deliveredTo: Set<String> = [],
        deliveryID: Int64? = nil, sentAt: Date? = nil, requestLeftAt: Date? = nil, requestKey: String? = nil,
        requestTo: String? = nil, requestExpiresAt: Date? = nil, requestShownBy: Date? = nil
    ) {
        self.id = id
        self.type = type
        self.channel = channel
        self.localDay = localDay
        self.deliverAfter = deliverAfter
        self.dueAt = dueAt ?? deliverAfter
        self.title = title
        self.body = body
        self.payload = payload
        self.attempts = attempts
        self.deliveredTo = deliveredTo
        self.deliveryID = deliveryID
        self.sentAt = sentAt
        self.payloadObject = PushContent.payloadObject(payload)
        self.kind = NotificationKind.of(type)
        self.requestLeftAt = requestLeftAt
        self.requestKey = requestKey
        self.requestTo = requestTo
        self.requestExpiresAt = requestExpiresAt
        self.requestShownBy = requestShownBy
    }

    /// The scheduled call a preview is for (docs/jobs/preview-notifications.md): its id and the call time it was queued for.
    public var call: (id: UUID, scheduledAt: Date)? {
        guard let id = payloadObject?["call_id"]?.text, let uuid = UUID(uuidString: id),
            let at = payloadObject?["scheduled_at"]?.text, let instant = try? Date(at, strategy: .iso8601)
        else { return nil }
        return (uuid, instant)
    }
}

/// Which service carries a notification: APNs and FCM a push (by the device's platform),
/// Resend an email, Twilio an SMS.
public enum DeliveryProvider: String, Sendable, CaseIterable, Codable {
    case apns, fcm, resend, twilio

    public var displayName: String {
        switch self {
        case .apns: "APNs"
        case .fcm: "FCM"
        case .resend: "Resend"
        case .twilio: "Twilio"
        }
    }
}

/// One of a user's devices: a row of `user_push_tokens`, or the legacy `users.fcm_token`
/// (docs/jobs/dispatch.md, "Every active device").
public struct Device: Sendable, Equatable, Hashable {
    /// How the outbox remembers that this device has a notification: the token's row id, or for
    /// `users.fcm_token` a digest of the token (never the token itself).
    public let key: String
    /// The `user_push_tokens` row; nil for `users.fcm_token`.
    public let tokenID: UUID?
    public let token: String
    /// `ios` (APNs) or `android` (FCM); `users.fcm_token` is an FCM token.
    public let platform: String

    public init(tokenID: UUID?, token: String, platform: String) {
        self.tokenID = tokenID
        self.token = token
        self.platform = platform
        self.key = tokenID.map { $0.uuidString.lowercased() } ?? "fcm_token:" + Digest.sha256Hex(token).prefix(16)
    }

    public var provider: DeliveryProvider { platform == "ios" ? .apns : .fcm }

    /// The token's beginning, for logs and errors: enough to find it, never the whole token.
    public var shortToken: String { String(token.prefix(8)) + "…" }
}

/// Whether a push service can be used now.
public enum ProviderState: Sendable, Equatable {
    case ready
    /// Not configured: its notifications wait, nothing is dropped; a notification another
    /// device of the user has does not wait for it.
    case unavailable(String)
    /// Down or paused for every dispatcher (`provider_health`): it comes back, and its
    /// notifications wait for it on every device, until it is back or their shelf life ends.
    case down(String)
    /// Held for a while (a project's quota): its notifications wait that long.
    case held(String, for: TimeInterval)
}

/// What one request to a provider ended in, for one device.
public enum SendResult: Sendable, Equatable {
    /// The provider took it: `apns-id`, the FCM message name, the Resend email id.
    case delivered(providerID: String)
    /// An answer about this request that another attempt may change (APNs' 429 for one device,
    /// FCM's per-device quota, Resend's 408): worth another attempt, after `after` at the least.
    case retry(String, after: TimeInterval?)
    /// The provider did not answer about this notification: a 5xx, no answer within the time-out,
    /// a connection refused or cut. Another attempt while attempts remain; when most answers are
    /// like this the provider is down (`ChannelHealth`), and its notifications wait for it
    /// without spending attempts.
    case unavailable(String, after: TimeInterval?)
    /// The provider says this device's token is no longer valid: the token is deactivated.
    /// `unknownToProvider` marks the answers that a wrong configuration also gives for every
    /// token (APNs 400 `BadDeviceToken`, FCM `SENDER_ID_MISMATCH`): many of them at once pause the
    /// provider instead. An uninstalled app's answer (APNs 410, FCM `UNREGISTERED`) is never that.
    case invalidToken(String, unknownToProvider: Bool)
    /// The provider refuses this notification for good (too large, malformed): no retry.
    case rejected(String)
    /// The provider refuses Nudge's configuration (key, topic, project): the provider is paused
    /// for the run, the notification waits.
    case configuration(String)
    /// The provider is over its quota for the whole project: paused for `after`, the
    /// notification waits without spending an attempt.
    case throttled(String, after: TimeInterval)
    /// Not sent: the provider was paused or not configured when its turn came; look again after
    /// `after` (nil: the usual wait for a provider).
    case notSent(String, after: TimeInterval?)

    public var reason: String? {
        switch self {
        case .delivered: nil
        case .retry(let why, _), .unavailable(let why, _), .invalidToken(let why, _), .rejected(let why), .configuration(let why),
            .throttled(let why, _), .notSent(let why, _):
            why
        }
    }

    /// Whether this answer says the provider is in trouble rather than anything about the
    /// notification: a 5xx, a time-out, a refused connection, or an SMS whose request may have
    /// left into such trouble (its outcome unknown).
    public var isOutage: Bool {
        switch self {
        case .unavailable: true
        case .rejected(let why): why.hasPrefix(TwilioClient.unknownOutcomePrefix)
        default: false
        }
    }
}
