import Foundation

/// One of the success metrics (docs/report.md, "`nudge report`"): what it measures, its target, and
/// the one SQL query that computes it, so that an analyst can run it again.
///
/// Every query takes `$1` and `$2`, the period's first instant and the instant after it
/// (`timestamptz`), and `$3`, the zone its days are in (`text`), and returns rows of
/// `grain` (`period`: the whole period, `day`: one day, `segment`: one notification type and
/// channel, or one kind of call), `day` (`date`), `type`, `channel` (`text`), `numerator` and
/// `denominator` (`bigint`): the value is their ratio. A day or segment without any row has no
/// value (nothing to measure), not a zero.
public struct SuccessMetric: Sendable {
    public enum Target: Sendable, Equatable {
        case atLeast(Double)
        case atMost(Double)
        case below(Double)

        public func holds(_ value: Double) -> Bool {
            switch self {
            case .atLeast(let bound): value >= bound
            case .atMost(let bound): value <= bound
            case .below(let bound): value < bound
            }
        }

        public var bound: Double {
            switch self {
            case .atLeast(let bound), .atMost(let bound), .below(let bound): bound
            }
        }

        /// "≥ 70 %".
        public var text: String {
            let percent = SuccessMetric.percent(bound)
            switch self {
            case .atLeast: return "≥ \(percent)"
            case .atMost: return "≤ \(percent)"
            case .below: return "< \(percent)"
            }
        }
    }

    /// A stable name (`--json`'s key, the Grafana panel's).
    public let id: String
    public let title: String
    /// Where its definition comes from, printed beside it (docs/report.md, "`nudge report`").
    public let seed: String
    /// What is divided by what, in words.
    public let measures: String
    /// Nil for a figure with a baseline and no target (shown beside the one with; docs/report.md).
    public let target: Target?
    /// A target of its own for some notification types (docs/report.md: 30 % for the weekly digest's
    /// emails, 40 % for streak at risk).
    public let targetsByType: [String: Target]
    public let baseline: String?
    public let sql: String

    public func target(forType type: String?) -> Target? {
        type.flatMap { targetsByType[$0] } ?? target
    }

    static func percent(_ fraction: Double) -> String {
        let value = (fraction * 1000).rounded() / 10
        return (value == value.rounded() ? String(Int(value)) : String(value)) + " %"
    }
}

public enum SuccessMetrics {
    /// How a query's rows become `grain`: the grouping sets of one metric.
    private static let grain = """
        case when grouping(x.day) = 0 then 'day' when grouping(x.type) = 0 then 'segment' else 'period' end
        """

    /// A metric over the notifications sent in the period (`notification_logs.sent_at`), each row
    /// one attempt: `counted` selects the rows, `numerator` the ones that count.
    private static func overLogs(counted: String, numerator: String, distinctUsers: Bool = false) -> String {
        let (top, bottom) =
            distinctUsers
            ? ("count(distinct x.user_id) filter (where \(numerator))", "count(distinct x.user_id)")
            : ("count(*) filter (where \(numerator))", "count(*)")
        return """
            select \(grain) as grain,
                   x.day, x.type, x.channel, \(top) as numerator, \(bottom) as denominator
              from (select (l.sent_at at time zone $3)::date as day, coalesce(l.notification_type, l.type) as type, l.channel,
                           l.user_id, l.delivered, l.opened, l.sent_at, l.opened_at, l.bounced_at
                      from notification_logs l
                     where l.sent_at >= $1 and l.sent_at < $2 and (\(counted))) x
             group by grouping sets ((), (x.day), (x.type, x.channel))
            """
    }

    /// The scheduled calls that came in the period, answered or not (docs/report.md: calls
    /// completed ÷ calls completed or missed; a call cancelled, or that failed on Nudge's side, is
    /// not the user's answer).
    private static func calls(preview: Bool) -> String {
        """
        select \(grain) as grain,
               x.day, x.type, x.channel, count(*) filter (where x.status = 'completed') as numerator, count(*) as denominator
          from (select (c.scheduled_at at time zone $3)::date as day, null::text as type, null::text as channel, c.status
                  from scheduled_calls c
                 where c.scheduled_at >= $1 and c.scheduled_at < $2 and c.status in ('completed', 'missed')
                   and \(preview ? "" : "not ")c.preview_sent) x
         group by grouping sets ((), (x.day), (x.type, x.channel))
        """
    }

    /// The users who signed up in the period (a cohort by sign-up day): `numerator` those that count.
    private static func signUps(numerator: String) -> String {
        """
        select \(grain) as grain,
               x.day, x.type, x.channel, count(*) filter (where x.counted) as numerator, count(*) as denominator
          from (select (u.created_at at time zone $3)::date as day, null::text as type, null::text as channel, \(numerator) as counted
                  from users u
                  left join notification_preferences np on np.user_id = u.id
                 where u.created_at >= $1 and u.created_at < $2) x
         group by grouping sets ((), (x.day), (x.type, x.channel))
        """
    }

    public static let all: [SuccessMetric] = [
        SuccessMetric(
            id: "call_answer_rate", title: "Call answer rate, with a preview", seed: "seed 000 §13 (primary KPI)",
            measures: "calls answered (completed) ÷ calls that came (completed or missed), among those whose preview was sent",
            target: .atLeast(0.70), targetsByType: [:], baseline: "about 20 % without a preview", sql: calls(preview: true)),
        SuccessMetric(
            id: "call_answer_rate_without_preview", title: "Call answer rate, without a preview", seed: "seed 000 §13 (the baseline)",
            measures: "calls answered (completed) ÷ calls that came (completed or missed), among those whose preview was not sent",
            target: nil, targetsByType: [:], baseline: "about 20 %", sql: calls(preview: false)),
        SuccessMetric(
            id: "notification_open_rate", title: "Notification open rate", seed: "seed 000 §13",
            measures: "notifications opened ÷ notifications delivered (notification_logs: push, in-app and email; an SMS cannot be opened)",
            target: .atLeast(0.60), targetsByType: [:], baseline: nil,
            sql: overLogs(counted: "l.delivered and l.channel <> 'sms'", numerator: "x.opened")),
        SuccessMetric(
            id: "push_delivery_rate", title: "Push delivery rate", seed: "seed 000 §13",
            measures: "pushes the device reported delivered ÷ pushes the provider took (channel push)",
            target: .atLeast(0.95), targetsByType: [:], baseline: nil,
            sql: overLogs(counted: "l.channel = 'push'", numerator: "x.delivered")),
        SuccessMetric(
            id: "sms_fallback_rate", title: "SMS fallback rate", seed: "seed 000 §13 (guardrail, cost control)",
            measures: "calls whose fallback SMS was sent ÷ calls whose preview was sent",
            target: .atMost(0.15), targetsByType: [:], baseline: nil,
            sql: """
                select \(grain) as grain,
                       x.day, x.type, x.channel, count(*) filter (where x.fell_back) as numerator, count(*) as denominator
                  from (select (p.first_sent at time zone $3)::date as day, null::text as type, null::text as channel, p.fell_back
                          from (select l.call_id, min(l.sent_at) as first_sent,
                                       bool_or(coalesce(l.notification_type, l.type) = 'fallback_sms') as fell_back
                                  from notification_logs l
                                 where l.call_id is not null and l.sent_at >= $1 - interval '1 day' and l.sent_at < $2 + interval '1 day'
                                   and coalesce(l.notification_type, l.type) in ('preview_push', 'preview_sms', 'fallback_sms')
                                 group by l.call_id) p
                         where p.first_sent >= $1 and p.first_sent < $2) x
                 group by grouping sets ((), (x.day), (x.type, x.channel))
                """),
        SuccessMetric(
            id: "push_opt_in_rate", title: "Push opt-in rate", seed: "seed 003 Phase 2",
            measures: "users who signed up in the period with push on and a device that can take it ÷ users who signed up",
            target: .atLeast(0.75), targetsByType: [:], baseline: nil,
            sql: signUps(numerator: "coalesce(np.push_enabled, true) and exists (select 1 from push_tokens t where t.user_id = u.id)")),
        SuccessMetric(
            id: "push_open_rate", title: "Push open rate, within an hour", seed: "seed 003 Phase 2",
            measures: "pushes opened within an hour of being sent ÷ pushes sent",
            target: .atLeast(0.25), targetsByType: [:], baseline: nil,
            sql: overLogs(counted: "l.channel = 'push'", numerator: "x.opened_at <= x.sent_at + interval '1 hour'")),
        SuccessMetric(
            id: "email_deliverability", title: "Email deliverability", seed: "seed 003 Phase 2",
            measures: "emails not bounced ÷ emails Resend took",
            target: .atLeast(0.99), targetsByType: [:], baseline: nil,
            sql: overLogs(counted: "l.channel = 'email'", numerator: "x.bounced_at is null")),
        SuccessMetric(
            id: "email_open_rate", title: "Email open rate", seed: "seed 003 Phase 2",
            measures: "emails opened (or clicked) ÷ emails delivered",
            target: .atLeast(0.30), targetsByType: ["weekly_digest": .atLeast(0.30), "streak_at_risk": .atLeast(0.40)], baseline: nil,
            sql: overLogs(counted: "l.channel = 'email' and l.delivered", numerator: "x.opened")),
        SuccessMetric(
            id: "notification_driven_return", title: "Notification-driven return", seed: "seed 003 Phase 2",
            measures: "users who opened a notification ÷ users who were sent one",
            target: .atLeast(0.25), targetsByType: [:], baseline: nil,
            sql: overLogs(counted: "true", numerator: "x.opened", distinctUsers: true)),
        SuccessMetric(
            id: "opt_out_rate", title: "Opt-out rate, within 30 days", seed: "seed 003 Phase 2",
            measures: "users who signed up in the period and turned every notification off (push, email, in-app) within 30 days ÷ users who signed up",
            target: .below(0.10), targetsByType: [:], baseline: nil,
            sql: signUps(numerator: "np.all_off_since is not null and np.all_off_since < u.created_at + interval '30 days'")),
    ]
}
