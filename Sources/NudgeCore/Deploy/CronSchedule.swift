/// A job's `schedule`, the five fields of a crontab line, as Nudge uses them: minutes and hours
/// (`*`, `*/15`, `5,20,35,50`, `0-30/10`), every day, or on some weekdays (0 or 7 Sunday, 1
/// Monday…: the weekly sweeps). The same schedule becomes the crontab's line, a systemd timer's
/// `OnCalendar` and the Kubernetes CronJob's `schedule`.
public struct CronSchedule: Sendable, Equatable {
    public let text: String
    /// The minutes of the hour it starts at, ascending.
    public let minutes: [Int]
    /// The hours of the day it starts in, ascending.
    public let hours: [Int]
    /// The weekdays it starts on (0 Sunday … 6 Saturday), ascending: all seven for every day.
    public let weekdays: [Int]

    public init(_ text: String) throws(NudgeError) {
        let fields = text.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        guard fields.count == 5 else { throw NudgeError(.configuration, "schedule '\(text)' must have 5 cron fields") }
        guard fields[2] == "*", fields[3] == "*" else {
            throw NudgeError(.configuration, "schedule '\(text)': Nudge's jobs run every day or on weekdays; day of month and month must be *")
        }
        self.text = fields.joined(separator: " ")
        minutes = try Self.values(fields[0], in: 0...59, field: "minute", schedule: text)
        hours = try Self.values(fields[1], in: 0...23, field: "hour", schedule: text)
        weekdays = Array(Set(try Self.values(fields[4], in: 0...7, field: "weekday", schedule: text).map { $0 % 7 })).sorted()
    }

    /// The same starts as a systemd `OnCalendar` expression, in UTC like the Kubernetes CronJobs.
    public var onCalendar: String {
        func list(_ values: [Int], of all: Int) -> String {
            values.count == all ? "*" : values.map { $0 < 10 ? "0\($0)" : "\($0)" }.joined(separator: ",")
        }
        let names = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let days = weekdays.count == 7 ? "" : weekdays.map { names[$0] }.joined(separator: ",") + " "
        return "\(days)*-*-* \(list(hours, of: 24)):\(list(minutes, of: 60)):00 UTC"
    }

    private static func values(
        _ field: String, in range: ClosedRange<Int>, field name: String,
        schedule: String
    ) throws(NudgeError) -> [Int] {
        func fail() -> NudgeError {
            NudgeError(.configuration, "schedule '\(schedule)': the \(name) field '\(field)' is not *, a number, a range, a step or a list of them")
        }
        var values = Set<Int>()
        for part in field.split(separator: ",", omittingEmptySubsequences: false) {
            let pieces = part.split(separator: "/", omittingEmptySubsequences: false)
            guard (1...2).contains(pieces.count) else { throw fail() }
            let step = pieces.count == 2 ? Int(pieces[1]) : 1
            guard let step, step >= 1 else { throw fail() }
            let span: ClosedRange<Int>
            if pieces[0] == "*" {
                span = range
            } else if let dash = pieces[0].firstIndex(of: "-") {
                guard let low = Int(pieces[0][..<dash]), let high = Int(pieces[0][pieces[0].index(after: dash)...]),
                    range.contains(low), range.contains(high), low <= high
                else { throw fail() }
                span = low...high
            } else {
                guard let single = Int(pieces[0]), range.contains(single) else { throw fail() }
                span = pieces.count == 2 ? single...range.upperBound : single...single
            }
            values.formUnion(stride(from: span.lowerBound, through: span.upperBound, by: step))
        }
        return values.sorted()
    }
}
