import Foundation

/// What `prune` removes (docs/jobs/prune.md): for each table that only grows, the rows no job reads any
/// more, older than the age `jobs/prune.json` gives it (`retentionDays`). Each table's shortest
/// age is what its readers need, so that every job decides as if nothing had been pruned.
public struct RetentionRule: Sendable, Equatable {
    /// The table, and the name of its age in `retentionDays`.
    public let table: String
    /// The column a row's age is read from, and whether it holds a day (`date`) or an instant.
    public let ageColumn: String
    public let ageIsDay: Bool
    /// For a table aged by the day, where a day's rows are many: a uuid column that orders the
    /// rows of one day, so that a chunk stays within its size inside a day.
    public var tiebreak: String? = nil
    /// Which rows of the table may go at all (a notification not finished stays, whatever its age).
    public let condition: String
    /// The shortest age the readers of the table allow, and who they are.
    public let minimumDays: Int
    public let readers: String
    /// How old its rows get before they go (from `jobs/prune.json`).
    public var days: Int

    /// Every table `prune` keeps bounded, in the order it prunes them (the ledger's runs last:
    /// the rows above point at them).
    public static let all: [RetentionRule] = [
        RetentionRule(
            table: "notification_outbox", ageColumn: "created_at", ageIsDay: false,
            condition: "status in ('sent', 'failed', 'suppressed', 'cancelled')", minimumDays: 36,
            readers: "reminders reads the check-in reminders of the last 35 days (which check-ins they prompted); "
                + "dispatch's caps and grouping look back 7 days; a notification not finished is never pruned", days: 0),
        RetentionRule(
            table: "notification_logs", ageColumn: "created_at", ageIsDay: false, condition: "true", minimumDays: 8,
            readers: "dispatch's caps look back 7 days; a call preview's delivery (path C) a day", days: 0),
        RetentionRule(
            table: "email_events", ageColumn: "received_at", ageIsDay: false, condition: "true", minimumDays: 3,
            readers: "Resend retries an event for about 28 hours under the same svix-id, which must still be known; "
                + "an email's log written after its first events reads them within seconds", days: 0),
        RetentionRule(
            table: "push_log", ageColumn: "sent_at", ageIsDay: false, condition: "true", minimumDays: 8,
            readers: "push-trigger's weekly frequency looks back 7 days", days: 0),
        RetentionRule(
            table: "llm_calls", ageColumn: "called_at", ageIsDay: false, condition: "true", minimumDays: 1,
            readers: "the LLM budget is counted within a run", days: 0),
        RetentionRule(
            table: "leaderboard_boards", ageColumn: "period_start", ageIsDay: true, tiebreak: "fitcircle_id",
            condition: "period = 'daily'",
            minimumDays: 10, readers: "leaderboard-refresh catches daily boards up for a week after their day", days: 0),
        RetentionRule(
            table: "fitcircle_leaderboard_entries", ageColumn: "period_start", ageIsDay: true, tiebreak: "id",
            condition: "period = 'daily'",
            minimumDays: 10, readers: "leaderboard-refresh ranks a daily board against the day before it", days: 0),
        RetentionRule(
            table: "job_work", ageColumn: "done_at", ageIsDay: false, condition: "true", minimumDays: 40,
            readers: "reminders reads its decisions of the last 35 days; weekly-digest the weeks it digested", days: 0),
        RetentionRule(
            table: "user_timezone_history", ageColumn: "valid_until", ageIsDay: false, condition: "true", minimumDays: 40,
            readers: "reminders learns a user's reminder time from the check-ins of the last 28 days, each in the zone "
                + "it was made in", days: 0),
        RetentionRule(
            table: "job_runs", ageColumn: "started_at", ageIsDay: false,
            condition: """
                ended_at is not null and not exists (select 1 from job_runs later where later.resumed_from = job_runs.id)
                """,
            minimumDays: 8, readers: "a run resumes the last one of its scope; operators read a week's runs at least",
            days: 0),
    ]

    /// The rules with the ages of `retentionDays`: every table named, none below what its readers
    /// need, none unknown.
    public static func configured(_ retentionDays: [String: Int]) throws(NudgeError) -> [RetentionRule] {
        let known = Set(all.map(\.table))
        if let unknown = retentionDays.keys.sorted().first(where: { !known.contains($0) }) {
            throw NudgeError(.configuration, "retentionDays: '\(unknown)' is not a table prune keeps bounded (\(known.sorted().joined(separator: ", ")))")
        }
        return try all.map { rule throws(NudgeError) in
            guard let days = retentionDays[rule.table] else {
                throw NudgeError(.configuration, "retentionDays: no age for \(rule.table)")
            }
            guard days >= rule.minimumDays, days <= 3_660 else {
                throw NudgeError(
                    .configuration,
                    """
                    retentionDays: \(rule.table) must be kept between \(rule.minimumDays) and 3660 days, not \(days) \
                    (\(rule.readers))
                    """)
            }
            var configured = rule
            configured.days = days
            return configured
        }
    }
}
