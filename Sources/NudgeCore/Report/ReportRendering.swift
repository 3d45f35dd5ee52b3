import Foundation

/// How `nudge report` shows a report: a table at a terminal, JSON for machines, and a page that
/// opens anywhere with no network (inline styles and SVG, a Content-Security-Policy that lets
/// nothing be fetched), one chart per metric: its daily values against its target line.
public enum ReportRendering {
    /// The report as JSON, keys sorted (stable across runs).
    public static func json(_ report: SuccessReport) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(report), as: UTF8.self) + "\n"
    }

    static func percent(_ value: Double?) -> String {
        guard let value else { return "—" }
        return String(format: "%.1f %%", value * 100)
    }

    static func verdict(_ holds: Bool?) -> String {
        switch holds {
        case true?: "holds"
        case false?: "MISSED"
        case nil: ""
        }
    }

    /// A plain table: each metric's period value beside its target, then its notification types
    /// and channels, then its days.
    public static func table(_ report: SuccessReport) -> String {
        var lines = ["Nudge: the seeds' success metrics, \(report.from) to \(report.to) (\(report.zone))", ""]
        func row(_ name: String, _ figure: SuccessReport.Figure, _ target: String?, _ holds: Bool?) -> String {
            let counts = "\(figure.numerator) / \(figure.denominator)"
            return name.padding(toLength: 44, withPad: " ", startingAt: 0) + percent(figure.value).leftPadded(9)
                + "  " + (target ?? "").padding(toLength: 8, withPad: " ", startingAt: 0) + verdict(holds).padding(toLength: 8, withPad: " ", startingAt: 0)
                + counts.leftPadded(17)
        }
        lines.append("metric".padding(toLength: 44, withPad: " ", startingAt: 0) + "value".leftPadded(9) + "  target  holds   " + "of".leftPadded(16))
        for metric in report.metrics {
            lines.append(row(metric.title, metric.period, metric.target ?? "—", metric.holds))
            for segment in metric.segments {
                let name = "  " + [segment.type, segment.channel].compactMap { $0 }.joined(separator: ", ")
                lines.append(row(name, segment.figure, segment.target, segment.holds))
            }
            let days = metric.days.map { "\($0.day.suffix(5)) \(percent($0.figure?.value))" }
            if !days.isEmpty { lines.append("  by day: " + days.joined(separator: " · ")) }
            lines.append("")
        }
        lines.append("Each figure is one SQL query over the tables: `nudge report --sql` prints them.")
        return lines.joined(separator: "\n") + "\n"
    }

    /// The self-contained page: a chart per metric (inline SVG), its types and channels below.
    public static func html(_ report: SuccessReport, generatedAt: Date) -> String {
        var sections: [String] = []
        for metric in report.metrics {
            let segments = metric.segments.map { segment in
                """
                <tr><td>\(escape([segment.type, segment.channel].compactMap { $0 }.joined(separator: ", ")))</td>\
                <td class="n">\(percent(segment.figure.value))</td><td>\(escape(segment.target ?? ""))</td>\
                <td class="\(segment.holds == false ? "miss" : "ok")">\(verdict(segment.holds))</td>\
                <td class="n">\(segment.figure.numerator) / \(segment.figure.denominator)</td></tr>
                """
            }.joined(separator: "\n")
            let table =
                segments.isEmpty
                ? ""
                : """
                <table><thead><tr><th>type, channel</th><th>value</th><th>target</th><th></th><th>of</th></tr></thead>
                <tbody>
                \(segments)
                </tbody></table>
                """
            sections.append(
                """
                <section class="metric" id="\(escape(metric.id))">
                <h2>\(escape(metric.title)) <span class="value">\(percent(metric.period.value))</span> \
                <span class="\(metric.holds == false ? "miss" : "ok")">\(verdict(metric.holds))</span></h2>
                <p class="how">\(escape(metric.measures)). Target: \(escape(metric.target ?? "none")).\
                \(metric.baseline.map { " Baseline: \(escape($0))." } ?? "") \(escape(metric.seed)). \
                \(metric.period.numerator) / \(metric.period.denominator).</p>
                \(chart(metric))
                \(table)
                </section>
                """)
        }
        let stamp = ISO8601DateFormatter().string(from: generatedAt)
        return """
            <!DOCTYPE html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <link rel="icon" href="data:,">
            <title>Nudge report \(escape(report.from)) to \(escape(report.to))</title>
            <style>
            body { font-family: Helvetica, Arial, sans-serif; color: #1f2933; background: #f4f5f7; margin: 0; padding: 24px; }
            h1 { font-size: 22px; margin: 0 0 4px 0; }
            .metric { background: #ffffff; border-radius: 8px; padding: 16px 20px; margin: 16px 0; max-width: 760px; }
            h2 { font-size: 17px; margin: 0 0 6px 0; }
            .value { font-weight: normal; }
            .ok { color: #15803d; font-size: 14px; }
            .miss { color: #b91c1c; font-size: 14px; font-weight: bold; }
            .how { color: #52606d; font-size: 13px; margin: 0 0 8px 0; }
            table { border-collapse: collapse; font-size: 13px; margin-top: 8px; }
            th, td { text-align: left; padding: 3px 10px 3px 0; }
            td.n { text-align: right; font-variant-numeric: tabular-nums; }
            svg text { font-size: 11px; fill: #52606d; }
            </style>
            </head>
            <body>
            <h1>The seeds' success metrics</h1>
            <p class="how">\(escape(report.from)) to \(escape(report.to)), days in \(escape(report.zone)); \
            made \(escape(stamp)) by <code>nudge report</code>. Each figure is one SQL query over the tables \
            (<code>nudge report --sql</code>).</p>
            \(sections.joined(separator: "\n"))
            </body>
            </html>

            """
    }

    /// A metric's daily values as a line against its target (dashed), 0-100 %, inline SVG.
    static func chart(_ metric: SuccessReport.Metric) -> String {
        let width = 720.0
        let height = 180.0
        let left = 44.0
        let right = 24.0
        let top = 10.0
        let bottom = 24.0
        let plotWidth = width - left - right
        let plotHeight = height - top - bottom
        let count = metric.days.count
        func x(_ index: Int) -> Double { count > 1 ? left + plotWidth * Double(index) / Double(count - 1) : left + plotWidth / 2 }
        func y(_ value: Double) -> Double { top + plotHeight * (1 - min(max(value, 0), 1)) }
        var parts: [String] = []
        for tick in [0.0, 0.25, 0.5, 0.75, 1.0] {
            parts.append(##"<line x1="\##(left)" y1="\##(y(tick))" x2="\##(width - right)" y2="\##(y(tick))" stroke="#e4e7eb"/>"##)
            parts.append(##"<text x="4" y="\##(y(tick) + 4)">\##(Int(tick * 100)) %</text>"##)
        }
        if let target = metric.targetValue {
            parts.append(
                ##"<line class="target" x1="\##(left)" y1="\##(y(target))" x2="\##(width - right)" y2="\##(y(target))" stroke="#b91c1c" stroke-dasharray="6 4"/>"##
            )
        }
        // The line breaks where a day had nothing to measure.
        var runs: [[String]] = [[]]
        for (index, day) in metric.days.enumerated() {
            if let value = day.figure?.value {
                runs[runs.count - 1].append("\(x(index)),\(y(value))")
                parts.append(
                    ##"<circle cx="\##(x(index))" cy="\##(y(value))" r="2.5" fill="#2563eb"><title>\##(escape(day.day)): \##(percent(value))</title></circle>"##
                )
            } else if !runs[runs.count - 1].isEmpty {
                runs.append([])
            }
        }
        for run in runs where run.count > 1 {
            parts.append(##"<polyline class="series" points="\##(run.joined(separator: " "))" fill="none" stroke="#2563eb" stroke-width="2"/>"##)
        }
        let labelEvery = max(1, count / 8)
        for (index, day) in metric.days.enumerated() where index % labelEvery == 0 || index == count - 1 {
            parts.append(##"<text x="\##(x(index))" y="\##(height - 6)" text-anchor="middle">\##(escape(String(day.day.suffix(5))))</text>"##)
        }
        return """
            <svg class="chart" xmlns="http://www.w3.org/2000/svg" width="\(Int(width))" height="\(Int(height))" \
            viewBox="0 0 \(Int(width)) \(Int(height))" role="img" aria-label="\(escape(metric.title)), by day">
            \(parts.joined(separator: "\n"))
            </svg>
            """
    }

    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }
}

extension String {
    fileprivate func leftPadded(_ width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }
}
