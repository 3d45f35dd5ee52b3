import Foundation

/// `nudge.json`: a Grafana dashboard for the teams that run Grafana, written by `nudge grafana`
/// (docs/report.md, "Grafana"; a test runs each of its queries). Its PostgreSQL panels run the
/// same queries as `nudge report` (`SuccessMetrics`), with Grafana's time range for the period
/// and the dashboard's `zone` for the days: a stat per metric (the period's value) and its daily
/// series against its target. Its Prometheus panels read the run metrics the jobs write
/// (`NUDGE_METRICS_DIR`, node-exporter's textfile collector): runs, failures, deliveries by
/// provider and outcome, and each delivery provider's state, time down and parked notifications
/// (dispatch's `ProviderMetrics`); the providers down also come from `provider_health`.
public enum GrafanaDashboard {
    /// The query of a metric's panel: `$1`, `$2` and `$3` as Grafana's macros and variable.
    public static func panelSQL(_ metric: SuccessMetric, daily: Bool) -> String {
        let query = SuccessReportSQL.substitute(
            metric.sql, from: "$__timeFrom()::timestamptz", to: "$__timeTo()::timestamptz",
            zone: "'$zone'")
        let value = "round(100.0 * m.numerator / nullif(m.denominator, 0), 1)"
        if daily {
            let target = metric.target.map { ", \(String(format: "%.1f", $0.bound * 100)) as \"target\"" } ?? ""
            return "select m.day::timestamp as \"time\", \(value) as \"\(metric.id)\"\(target)\n  from (\(query)) m\n where m.grain = 'day'\n order by 1"
        }
        return "select \(value) as \"\(metric.id)\", m.numerator, m.denominator\n  from (\(query)) m\n where m.grain = 'period'"
    }

    public static func json(metrics: [SuccessMetric] = SuccessMetrics.all) throws -> String {
        var panels: [[String: Any]] = []
        var id = 0
        var y = 0
        func nextID() -> Int {
            id += 1
            return id
        }
        let postgres: [String: Any] = ["type": "grafana-postgresql-datasource", "uid": "${postgres}"]
        let prometheus: [String: Any] = ["type": "prometheus", "uid": "${prometheus}"]
        func row(_ title: String) {
            panels.append([
                "type": "row", "id": nextID(), "title": title, "collapsed": false,
                "gridPos": ["h": 1, "w": 24, "x": 0, "y": y],
            ])
            y += 1
        }
        func sqlTarget(_ sql: String, format: String) -> [String: Any] {
            ["refId": "A", "datasource": postgres, "editorMode": "code", "format": format, "rawQuery": true, "rawSql": sql]
        }
        row("The seeds' success metrics (PostgreSQL, the queries of nudge report)")
        for metric in metrics {
            var thresholds: [[String: Any]] = [["color": "text", "value": NSNull()]]
            if let target = metric.target {
                switch target {
                case .atLeast(let bound):
                    thresholds = [["color": "red", "value": NSNull()], ["color": "green", "value": bound * 100]]
                case .atMost(let bound), .below(let bound):
                    thresholds = [["color": "green", "value": NSNull()], ["color": "red", "value": bound * 100]]
                }
            }
            let description =
                "\(metric.measures). Target: \(metric.target?.text ?? "none")"
                + (metric.baseline.map { "; baseline: \($0)" } ?? "") + ". \(metric.seed)."
            panels.append([
                "type": "stat", "id": nextID(), "title": metric.title, "description": description, "datasource": postgres,
                "gridPos": ["h": 6, "w": 6, "x": 0, "y": y],
                "fieldConfig": [
                    "defaults": [
                        "unit": "percent", "decimals": 1, "min": 0, "max": 100,
                        "thresholds": ["mode": "absolute", "steps": thresholds],
                    ], "overrides": [],
                ],
                "options": [
                    "reduceOptions": ["calcs": ["lastNotNull"], "fields": "/^\(metric.id)$/", "values": false],
                    "colorMode": "value", "graphMode": "none",
                ],
                "targets": [sqlTarget(panelSQL(metric, daily: false), format: "table")],
            ])
            panels.append([
                "type": "timeseries", "id": nextID(), "title": "\(metric.title), by day", "description": description,
                "datasource": postgres, "gridPos": ["h": 6, "w": 18, "x": 6, "y": y],
                "fieldConfig": [
                    "defaults": [
                        "unit": "percent", "decimals": 1, "min": 0, "max": 100,
                        "custom": ["drawStyle": "line", "showPoints": "always", "spanNulls": false],
                    ],
                    "overrides": [
                        [
                            "matcher": ["id": "byName", "options": "target"],
                            "properties": [
                                ["id": "custom.lineStyle", "value": ["fill": "dash", "dash": [6, 4]]],
                                ["id": "color", "value": ["mode": "fixed", "fixedColor": "red"]],
                            ],
                        ]
                    ],
                ],
                "targets": [sqlTarget(panelSQL(metric, daily: true), format: "time_series")],
            ])
            y += 6
        }
        row("Runs and deliveries (Prometheus: the jobs' textfiles in NUDGE_METRICS_DIR)")
        func promPanel(_ title: String, _ expression: String, legend: String, unit: String = "short", width: Int = 12, x: Int) {
            panels.append([
                "type": "timeseries", "id": nextID(), "title": title, "datasource": prometheus,
                "gridPos": ["h": 8, "w": width, "x": x, "y": y],
                "fieldConfig": ["defaults": ["unit": unit], "overrides": []],
                "targets": [["refId": "A", "datasource": prometheus, "expr": expression, "legendFormat": legend]],
            ])
        }
        promPanel(
            "Exit status of each job's last run (0 ok, 3 users failed, 1 aborted, 75 locked)",
            "max by (job) (nudge_run_exit_code)", legend: "{{job}}", x: 0)
        promPanel(
            "Minutes since each job's last run ended", "(time() - max by (job) (nudge_run_last_end_timestamp_seconds)) / 60",
            legend: "{{job}}", x: 12)
        y += 8
        promPanel(
            "Users that failed in each job's last run", "sum by (job) (nudge_run_users{outcome=\"failed\"})",
            legend: "{{job}}", x: 0)
        promPanel(
            "Dispatch's last run: deliveries by provider and outcome",
            "sum by (outcome) (nudge_run_outcomes{job=\"dispatch\", outcome=~\"pushes_sent:.*|emails_sent|sms_sent|failed|retrying|waiting|tokens_deactivated|suppressed:.*\"})",
            legend: "{{outcome}}", x: 12)
        y += 8
        row("Delivery providers (Prometheus: dispatch's textfile; the alert NudgeProviderDown pages at 15 minutes)")
        // Every dispatcher writes the shared state: the highest of their readings is the provider's.
        panels.append([
            "type": "stat", "id": nextID(), "title": "Each provider's state", "datasource": prometheus,
            "description": "From provider_health, as the last dispatch run read it: up, down (no answer) or paused (Nudge's configuration refused).",
            "gridPos": ["h": 8, "w": 6, "x": 0, "y": y],
            "fieldConfig": [
                "defaults": [
                    "mappings": [
                        [
                            "type": "value",
                            "options": [
                                "0": ["text": "up", "color": "green", "index": 0],
                                "1": ["text": "down", "color": "red", "index": 1],
                                "2": ["text": "paused", "color": "orange", "index": 2],
                            ],
                        ]
                    ],
                    "thresholds": ["mode": "absolute", "steps": [["color": "green", "value": NSNull()]]],
                ], "overrides": [],
            ],
            "options": [
                "reduceOptions": ["calcs": ["lastNotNull"], "fields": "", "values": false],
                "colorMode": "background", "graphMode": "none", "textMode": "value_and_name",
            ],
            "targets": [
                [
                    "refId": "A", "datasource": prometheus, "legendFormat": "{{provider}}",
                    "expr": "max by (provider) (nudge_provider_state{state=\"down\"}) + 2 * max by (provider) (nudge_provider_state{state=\"paused\"})",
                ]
            ],
        ])
        promPanel(
            "Time each provider has been down or paused", "max by (provider) (nudge_provider_down_seconds)",
            legend: "{{provider}}", unit: "s", width: 9, x: 6)
        promPanel(
            "Notifications parked for each provider (counted up to \(ProviderMetrics.parkedCountLimit))",
            "max by (provider) (nudge_provider_parked)", legend: "{{provider}}", width: 9, x: 15)
        y += 8
        panels.append([
            "type": "table", "id": nextID(), "title": "Providers down or paused (provider_health)", "datasource": postgres,
            "gridPos": ["h": 6, "w": 24, "x": 0, "y": y],
            "targets": [
                sqlTarget(
                    "select provider, state, since, reason from provider_health where state <> 'up' order by provider",
                    format: "table")
            ],
        ])
        let dashboard: [String: Any] = [
            "uid": "nudge", "title": "Nudge", "tags": ["nudge"], "schemaVersion": 39, "version": 1, "editable": true,
            "timezone": "utc", "refresh": "1h",
            "time": ["from": "now-7d/d", "to": "now-1d/d"],
            "description": "Written by `nudge grafana`; the success metrics are `nudge report`'s queries.",
            "templating": [
                "list": [
                    ["name": "postgres", "label": "PostgreSQL", "type": "datasource", "query": "grafana-postgresql-datasource"],
                    ["name": "prometheus", "label": "Prometheus", "type": "datasource", "query": "prometheus"],
                    [
                        "name": "zone", "label": "Days in", "type": "textbox", "query": "UTC",
                        "current": ["text": "UTC", "value": "UTC"],
                    ],
                ]
            ],
            "panels": panels,
        ]
        let data = try JSONSerialization.data(withJSONObject: dashboard, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
        return String(decoding: data, as: UTF8.self) + "\n"
    }
}
