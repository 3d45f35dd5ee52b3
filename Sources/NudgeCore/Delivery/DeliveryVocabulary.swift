/// How a notification reaches its user (`notification_outbox.channel`, `notification_logs.channel`;
/// docs/jobs/dispatch.md): a push to each of the user's devices, an email, or an SMS.
public enum DeliveryChannel: String, Sendable, CaseIterable, CustomStringConvertible {
    case push, email, sms

    public var description: String { rawValue }

    /// What a notification's type takes after it in the keys and tallies that tell its channels
    /// apart: nothing for a push, the type's first channel, `:email` or `:sms` for the others.
    public var suffix: String { self == .push ? "" : ":\(rawValue)" }
}

/// Where an outbox row stands (`notification_outbox.status`; docs/jobs/dispatch.md).
public enum OutboxStatus: String, Sendable {
    case pending, sending, sent, failed, suppressed, cancelled
}

/// What became of one notification on one channel or device (`notification_logs.status`): what
/// dispatch records, then what the provider's and the app's reports add (`delivered`, `opened`).
public enum LogStatus: String, Sendable {
    case queued, sent, delivered, failed, opened, suppressed, deferred
}
