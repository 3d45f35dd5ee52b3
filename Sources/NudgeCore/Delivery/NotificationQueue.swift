import Foundation

/// How the jobs queue notifications for dispatch (`notification_outbox`): one entry point, the
/// runner's, for every job's decided messages.
enum NotificationQueue {
    /// The steps of a batch's write that queue `messages` (each with its recipient) for `job` in
    /// run `runID`. A message whose key is queued already is not queued again, with one
    /// exception: a call's preview that dispatch refused for its call (`DispatchRules.callStep`:
    /// moved away, cancelled) and that reached no one is queued anew when its job decides it
    /// again (the call back at that time, pending again).
    static func enqueue(_ messages: [(UUID, OutboxMessage)], job: String, runID: Int64, into writes: inout BatchWrites) {
        guard !messages.isEmpty else { return }
        writes.step(
            "nudge_outbox",
            """
            insert into notification_outbox
                   (dedupe_key, job, user_id, local_day, notification_type, channel, deliver_after, title, body,
                    payload, run_id)
            select dedupe_key, \(job), user_id, local_day, notification_type, channel, deliver_after, title, body,
                   payload::jsonb, \(runID)
              from unnest(\(messages.map { $0.1.dedupeKey(job: job, userID: $0.0) }), \(messages.map(\.0)),
                          \(messages.map(\.1.localDay)), \(messages.map(\.1.type)), \(messages.map(\.1.channel.rawValue)),
                          \(messages.map(\.1.deliverAfter)), \(messages.map(\.1.title)), \(messages.map(\.1.body)),
                          \(messages.map(\.1.payload)))
                   as m(dedupe_key, user_id, local_day, notification_type, channel, deliver_after, title, body, payload)
            on conflict (dedupe_key) do nothing
            """)
        // A call's preview decided again (the call back at that time, pending again) whose row
        // reached no one: queued anew with what the job decided now, whether it was refused for
        // its call, withdrawn by a decision on another path, or still waiting (a fallback held
        // behind a refused push keeps its 30 s after the push's new time). (A step of its own:
        // the insert's conflict clause may not touch one row twice, and a batch may queue a
        // key twice.)
        let revivable = messages.filter { NotificationKind.of($0.1.type).isTimeCritical }
        if !revivable.isEmpty {
            writes.step(
                "nudge_outbox_revived",
                """
                update notification_outbox o
                   set local_day = m.local_day, deliver_after = m.deliver_after, title = m.title, body = m.body,
                       payload = m.payload::jsonb, run_id = \(runID), status = 'pending', next_attempt_at = null,
                       attempts = case when o.status = 'pending' then o.attempts else 0 end, last_error = null,
                       lease_until = null, claimed_by = null, delivery_id = null
                  from unnest(\(revivable.map { $0.1.dedupeKey(job: job, userID: $0.0) }), \(revivable.map(\.1.localDay)),
                              \(revivable.map(\.1.deliverAfter)), \(revivable.map(\.1.title)), \(revivable.map(\.1.body)),
                              \(revivable.map(\.1.payload)))
                       as m(dedupe_key, local_day, deliver_after, title, body, payload)
                 where o.dedupe_key = m.dedupe_key and o.job = \(job)
                   and (o.status = 'pending'
                        or (o.status = 'suppressed' and o.last_error like \(DispatchRules.callStep + ": %"))
                        or (o.status = 'cancelled' and o.last_error like 'superseded:%'))
                   and o.sent_at is null and o.delivered_to = '{}' and o.request_left_at is null
                """)
        }
    }
}
