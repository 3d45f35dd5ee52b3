import Foundation

/// Which of the digest's two channels a user gets (docs/jobs/weekly-digest.md): the push when push
/// notifications and the weekly-digest push are on and a device is registered; the email when
/// email, the weekly-digest email (both tables' switches) are on and the user has an address.
public struct DigestPreferences: Sendable, Equatable {
    /// `notification_preferences` (no row: everything on).
    public var pushEnabled = true
    public var pushWeeklyDigest = true
    public var emailEnabled = true
    public var emailWeeklyDigest = true
    /// `email_preferences.weekly_digest` (no row: on); one-click unsubscribe turns it off.
    public var emailPreference = true

    public init() {}
}

public enum DigestChannels {
    /// Why the user gets no digest push, or nil when they get one.
    public static func pushRefusal(_ preferences: DigestPreferences, hasDevice: Bool) -> String? {
        if !preferences.pushEnabled { return "push_off" }
        if !preferences.pushWeeklyDigest { return "push_digest_off" }
        if !hasDevice { return "no_device" }
        return nil
    }

    /// Why the user gets no digest email, or nil when they get one.
    public static func emailRefusal(_ preferences: DigestPreferences, address: String?) -> String? {
        if !preferences.emailEnabled { return "email_off" }
        if !preferences.emailWeeklyDigest || !preferences.emailPreference { return "unsubscribed" }
        guard let address, !address.isEmpty else { return "no_address" }
        if !isDeliverableAddress(address) { return "bad_address" }
        return nil
    }
}
