import Foundation

/// Whether a user has a device a push can go to, as the jobs ask it in SQL: one place for the
/// rule dispatch delivers by (`Device`): an active row of `user_push_tokens`, or the app's own
/// `users.fcm_token` while push is on there and no row of `user_push_tokens` holds that token.
enum PushDevices {
    /// The condition, for the user row aliased `user` (its `id`, `fcm_token`, `push_enabled`).
    static func anyOf(_ user: String) -> String {
        """
        exists (select 1 from user_push_tokens t where t.user_id = \(user).id and t.active)
               or (coalesce(\(user).fcm_token, '') <> '' and \(user).push_enabled
                   and not exists (select 1 from user_push_tokens t where t.user_id = \(user).id and t.device_token = \(user).fcm_token))
        """
    }
}
