import Foundation
import Logging
import PostgresNIO

/// `nudge report` (docs/report.md): the success metrics (`SuccessMetrics`) over a period of days in a zone,
/// each beside its target, for the period, per day and per notification type and channel.
public struct SuccessReport: Sendable, Encodable {
    /// A ratio and what it is made of; no value when nothing was there to measure.
    public struct Figure: Sendable, Encodable, Equatable {
        public let numerator: Int
        public let denominator: Int
        public var value: Double? { denominator > 0 ? Double(numerator) / Double(denominator) : nil }

        public init(numerator: Int, denominator: Int) {
            self.numerator = numerator
            self.denominator = denominator
        }

        enum CodingKeys: String, CodingKey { case numerator, denominator, value }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(numerator, forKey: .numerator)
            try container.encode(denominator, forKey: .denominator)
            try container.encode(value, forKey: .value)
        }
    }

    public struct Day: Sendable, Encodable, Equatable {
        public let day: String
        public let figure: Figure?

        enum CodingKeys: String, CodingKey { case day, numerator, denominator, value }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(day, forKey: .day)
            try container.encode(figure?.numerator ?? 0, forKey: .numerator)
            try container.encode(figure?.denominator ?? 0, forKey: .denominator)
            try container.encode(figure?.value, forKey: .value)
        }
    }

    public struct Segment: Sendable, Encodable, Equatable {
        public let type: String?
        public let channel: String?
        public let figure: Figure
        public let target: String?
        public let holds: Bool?

        enum CodingKeys: String, CodingKey { case type, channel, numerator, denominator, value, target, holds }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(type, forKey: .type)
            try container.encode(channel, forKey: .channel)
            try container.encode(figure.numerator, forKey: .numerator)
            try container.encode(figure.denominator, forKey: .denominator)
            try container.encode(figure.value, forKey: .value)
            try container.encode(target, forKey: .target)
            try container.encode(holds, forKey: .holds)
        }
    }

    public struct Metric: Sendable, Encodable {
        public let id: String
        public let title: String
        public let seed: String
        public let measures: String
        public let target: String?
        public let targetValue: Double?
        public let baseline: String?
        public let period: Figure
        /// Whether the period's value meets the target; nil with no target or no value.
        public let holds: Bool?
        public let days: [Day]
        public let segments: [Segment]

        enum CodingKeys: String, CodingKey {
            case id, title, seed, measures, target, baseline, numerator, denominator, value, holds, days, segments
            case targetValue = "target_value"
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(id, forKey: .id)
            try container.encode(title, forKey: .title)
            try container.encode(seed, forKey: .seed)
            try container.encode(measures, forKey: .measures)
            try container.encode(target, forKey: .target)
            try container.encode(targetValue, forKey: .targetValue)
            try container.encode(baseline, forKey: .baseline)
            try container.encode(period.numerator, forKey: .numerator)
            try container.encode(period.denominator, forKey: .denominator)
            try container.encode(period.value, forKey: .value)
            try container.encode(holds, forKey: .holds)
            try container.encode(days, forKey: .days)
            try container.encode(segments, forKey: .segments)
        }
    }

    /// The first and last local day of the period (both included), in `zone`.
    public let from: String
    public let to: String
    public let zone: String
    public let metrics: [Metric]

    /// The period's days in the zone, from the zone's calendar: `from` through `to`.
    public static func bounds(from: LocalDate, to: LocalDate, calendar: LocalCalendar) -> (start: Date, end: Date) {
        (calendar.start(of: from), calendar.end(of: to))
    }

    /// Runs every metric's query for the period; each is one statement, bounded by the connection's limits.
    /// `zone` is the zone's name as given (Foundation calls UTC "GMT").
    public static func compute(
        from: LocalDate, to: LocalDate, calendar: LocalCalendar, zone: String,
        metrics: [SuccessMetric] = SuccessMetrics.all,
        on connection: PostgresConnection, logger: Logger
    ) async throws -> SuccessReport {
        let (start, end) = bounds(from: from, to: to, calendar: calendar)
        var days: [LocalDate] = []
        var day = from
        while day <= to {
            days.append(day)
            day = day.adding(days: 1)
        }
        var results: [Metric] = []
        for metric in metrics {
            var query = PostgresQuery(unsafeSQL: metric.sql)
            query.binds.append(start)
            query.binds.append(end)
            query.binds.append(zone)
            var period = Figure(numerator: 0, denominator: 0)
            var byDay: [LocalDate: Figure] = [:]
            var segments: [Segment] = []
            for try await (grain, rowDay, type, channel, numerator, denominator)
                in try await connection.query(query, logger: logger).decode((String, LocalDate?, String?, String?, Int, Int).self)
            {
                let figure = Figure(numerator: numerator, denominator: denominator)
                switch grain {
                case "period": period = figure
                case "day": if let rowDay { byDay[rowDay] = figure }
                default:
                    if type == nil && channel == nil { continue }
                    let target = metric.target(forType: type)
                    segments.append(
                        Segment(
                            type: type, channel: channel, figure: figure, target: target?.text,
                            holds: figure.value.flatMap { value in target.map { $0.holds(value) } }))
                }
            }
            segments.sort { ($0.type ?? "", $0.channel ?? "") < ($1.type ?? "", $1.channel ?? "") }
            results.append(
                Metric(
                    id: metric.id, title: metric.title, seed: metric.seed, measures: metric.measures, target: metric.target?.text,
                    targetValue: metric.target?.bound, baseline: metric.baseline, period: period,
                    holds: period.value.flatMap { value in metric.target.map { $0.holds(value) } },
                    days: days.map { Day(day: $0.description, figure: byDay[$0]) }, segments: segments))
        }
        return SuccessReport(from: from.description, to: to.description, zone: zone, metrics: results)
    }
}

/// The metrics' queries as an analyst runs them again: each with the period's values in place of
/// its parameters, ready for psql.
public enum SuccessReportSQL {
    public static func listing(
        from: LocalDate, to: LocalDate, calendar: LocalCalendar, zone: String,
        metrics: [SuccessMetric] = SuccessMetrics.all
    ) -> String {
        let (start, end) = SuccessReport.bounds(from: from, to: to, calendar: calendar)
        let formatter = ISO8601DateFormatter()
        return metrics.map { metric in
            "-- \(metric.id): \(metric.title) (\(metric.seed)); target \(metric.target?.text ?? "none")\n-- \(metric.measures)\n"
                + substitute(
                    metric.sql, from: "'\(formatter.string(from: start))'::timestamptz",
                    to: "'\(formatter.string(from: end))'::timestamptz", zone: "'\(zone)'") + ";\n"
        }.joined(separator: "\n")
    }

    /// The query with `$1`, `$2` and `$3` replaced (by literals here, by Grafana's macros in the dashboard).
    public static func substitute(_ sql: String, from: String, to: String, zone: String) -> String {
        sql.replacingOccurrences(of: "$1", with: from).replacingOccurrences(of: "$2", with: to).replacingOccurrences(of: "$3", with: zone)
    }
}
