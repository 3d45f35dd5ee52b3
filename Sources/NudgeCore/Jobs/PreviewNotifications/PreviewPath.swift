import Foundation

/// Which way a call's preview goes (docs/jobs/preview-notifications.md). Pure: the same user gives
/// the same path.
///
/// - **A, push**: the user has a device that takes pushes, and pushes on.
/// - **B, SMS**: `notification_pref = 'sms_only'`, or no push (no app, push off), with a phone.
/// - **C, push then SMS**: `notification_pref = 'push_and_sms'` ("never miss a notification"):
///   the push, and the SMS 30 seconds later unless the push's delivery receipt came back.
///
/// On path A a user with a phone number also gets the SMS when the push cannot reach them at all
/// (the token expired), at once.
public enum PreviewPath: String, Sendable, Equatable, CaseIterable {
    case push = "A"
    case sms = "B"
    case pushThenSMS = "C"

    /// What the path needs to know of the user.
    public struct Reach: Sendable, Equatable {
        /// `users.notification_pref`: `push_only`, `sms_only` or `push_and_sms`.
        public var preference: String
        /// Whether a push can reach them: an active device (`user_push_tokens`, or
        /// `users.fcm_token` with `users.push_enabled`) and push notifications on
        /// (`notification_preferences.push_enabled`).
        public var push: Bool
        /// `users.phone_number`, when it is a number Twilio takes.
        public var phone: PhoneNumber?
        /// Whether `users.phone_number` holds something that is not a number (for the reason).
        public var phoneUnusable: Bool
        /// Whether that number replied STOP to Nudge's SMS (`sms_opt_outs`): no SMS goes to it.
        public var smsOptedOut: Bool

        public init(preference: String, push: Bool, phone: PhoneNumber?, phoneUnusable: Bool = false, smsOptedOut: Bool = false) {
            self.preference = preference
            self.push = push
            self.phone = phone
            self.phoneUnusable = phoneUnusable
            self.smsOptedOut = smsOptedOut
        }
    }

    /// The path for `reach`, or why there is none (the call then goes ahead without a preview,
    /// docs/jobs/preview-notifications.md). Where the preference asks for a channel the user lacks,
    /// the other one is used: a preview on the other channel is better than none, since the call
    /// comes anyway. The one exception is `sms_only` without a phone: the user asked for no pushes.
    /// A number that replied STOP is another matter: the user turned SMS off from the phone itself,
    /// and the preview goes by push when it can, whatever the preference.
    public static func select(_ reach: Reach) -> Result<PreviewPath, NoChannel> {
        let phone = reach.phone != nil && !reach.smsOptedOut
        switch reach.preference {
        case "sms_only" where reach.smsOptedOut && reach.push:
            return .success(.push)
        case "sms_only":
            return phone ? .success(.sms) : .failure(NoChannel(reach: reach, asked: "SMS only"))
        case "push_and_sms":
            if reach.push && phone { return .success(.pushThenSMS) }
            fallthrough
        default:
            if reach.push { return .success(.push) }
            if phone { return .success(.sms) }
            return .failure(NoChannel(reach: reach, asked: nil))
        }
    }

    /// Why no preview can be sent.
    public struct NoChannel: Error, Sendable, Equatable, CustomStringConvertible {
        let reach: Reach
        /// The preference that ruled out the channel the user has.
        let asked: String?

        public var description: String {
            let phone =
                reach.smsOptedOut
                ? "a number that replied STOP to Nudge's SMS"
                : reach.phoneUnusable ? "no usable phone number (users.phone_number is not E.164)" : "no phone number"
            if let asked { return "no notification channel: the user asked for \(asked) and has \(phone)" }
            return "no notification channel: no push token (or push off) and \(phone)"
        }
    }
}
