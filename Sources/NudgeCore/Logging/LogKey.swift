/// The metadata keys of Nudge's log lines, named once.
enum LogKey {
    static let runID = "nudge.run_id"
    static let job = "nudge.job"
    static let shard = "nudge.shard"
    static let batch = "nudge.batch"
    static let lane = "nudge.lane"
    static let userID = "nudge.user_id"
    static let reason = "nudge.reason"
    static let status = "nudge.status"
    static let now = "nudge.now"
    static let dryRun = "nudge.dry_run"
    static let resumedFrom = "nudge.resumed_from"
}
