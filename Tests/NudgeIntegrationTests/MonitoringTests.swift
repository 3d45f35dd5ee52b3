import Foundation
import NudgeCore
import NudgeStandIns
import Testing

@Suite(.dropsItsDatabases) struct MonitoringTests {
    /// A loopback HTTP server that answers 200 and writes each request line to a file.
    private func healthcheckServer() async throws -> (RunningProcess, port: Int, log: URL) {
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("pings-\(UUID()).log")
        let portFile = try ReadyPipe(in: FileManager.default.temporaryDirectory)
        let script = """
            import http.server, sys
            class Handler(http.server.BaseHTTPRequestHandler):
                def do_POST(self):
                    self.rfile.read(int(self.headers.get('Content-Length', 0)))
                    open(sys.argv[1], 'a').write(self.command + ' ' + self.path + '\\n')
                    if self.path.startswith('/moved'):
                        self.send_response(307); self.send_header('Location', '/elsewhere' + self.path); self.end_headers()
                    else:
                        self.send_response(200); self.end_headers()
                def log_message(self, *args): pass
            server = http.server.HTTPServer(('127.0.0.1', 0), Handler)
            open(sys.argv[2], 'w').write(str(server.server_port) + '\\n')
            server.serve_forever()
            """
        let server = try RunningProcess(
            "/usr/bin/env", ["python3", "-c", script, log.path, portFile.path],
            environment: ProcessInfo.processInfo.environment)
        let port = try #require(Int(try await portFile.message("the health-check server's port", from: server)))
        return (server, port, log)
    }

    /// Twelve users to settle, and an empty folder for the metrics.
    private func usersAndAMetricsFolder() async throws -> (TestDatabase, URL) {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 12, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        let metrics = FileManager.default.temporaryDirectory.appendingPathComponent("metrics-\(UUID())")
        try FileManager.default.createDirectory(at: metrics, withIntermediateDirectories: true)
        return (database, metrics)
    }

    @Test func aRunWritesPrometheusMetricsAndPingsTheHealthcheck() async throws {
        let (database, metrics) = try await usersAndAMetricsFolder()
        let (server, port, log) = try await healthcheckServer()
        defer {
            server.signal(SIGKILL)
            Task { _ = await server.finished() }
        }

        let environment = ["NUDGE_METRICS_DIR": metrics.path, "NUDGE_HEALTHCHECK_URL": "http://127.0.0.1:\(port)/ping/abc123"]
        let result = try await database.nudge(["run", "validate-streaks", "--now", "2026-03-20T12:00:00Z"], environment: environment)
        #expect(result.status == 0, "\(result.stderr)")
        let text = try String(contentsOf: metrics.appendingPathComponent("nudge_validate_streaks.prom"), encoding: .utf8)
        #expect(text.contains("nudge_run_users{job=\"validate-streaks\",outcome=\"processed\"} 12"))
        #expect(text.contains("nudge_run_exit_code{job=\"validate-streaks\"} 0"))
        #expect(text.contains("# TYPE nudge_run_seconds gauge"))
        #expect(try String(contentsOf: log, encoding: .utf8) == "POST /ping/abc123/start\nPOST /ping/abc123\n")

        // An aborted run pings /fail.
        let down = try await database.nudge(
            ["run", "validate-streaks"],
            environment: environment.merging(
                ["DATABASE_URL": "postgres://nudge@localhost/nudge?host=/nonexistent&port=5999"]) { _, new in new })
        #expect(down.status == 1)
        #expect(try String(contentsOf: log, encoding: .utf8).hasSuffix("POST /ping/abc123/start\nPOST /ping/abc123/fail\n"))
        #expect(!down.stderr.contains("abc123"))
    }

    /// The healthcheck URL carries its check's token: a redirect is not followed (the token would
    /// go where it points), and a plain http URL to another machine is refused before the run.
    @Test func aHealthcheckIsNeverRedirectedNorSentInClear() async throws {
        let (database, metrics) = try await usersAndAMetricsFolder()
        let (server, port, log) = try await healthcheckServer()
        defer {
            server.signal(SIGKILL)
            Task { _ = await server.finished() }
        }
        let moved = try await database.nudge(
            ["run", "validate-streaks", "--now", "2026-03-20T12:00:00Z"],
            environment: [
                "NUDGE_METRICS_DIR": metrics.path,
                "NUDGE_HEALTHCHECK_URL": "http://127.0.0.1:\(port)/moved/t0k3n",
            ])
        #expect(moved.status == 0, "\(moved.stderr)")
        #expect(try String(contentsOf: log, encoding: .utf8) == "POST /moved/t0k3n/start\nPOST /moved/t0k3n\n")
        let clear = try await database.nudge(
            ["run", "validate-streaks", "--now", "2026-03-20T12:00:00Z"],
            environment: ["NUDGE_HEALTHCHECK_URL": "http://hc-ping.example.com/t0k3n"])
        #expect(clear.status == 1)
        #expect(clear.stderr.contains("NUDGE_HEALTHCHECK_URL must be an https URL"), "\(clear.stderr)")
        #expect(!clear.stderr.contains("t0k3n"))
    }

    /// Each job (and each shard) has its own healthcheck and metrics file; a dry run tells
    /// monitoring nothing.
    @Test func eachJobAndShardReportsOnItsOwn() async throws {
        let (database, metrics) = try await usersAndAMetricsFolder()
        let (server, port, log) = try await healthcheckServer()
        defer {
            server.signal(SIGKILL)
            Task { _ = await server.finished() }
        }
        let environment = [
            "NUDGE_METRICS_DIR": metrics.path,
            "NUDGE_HEALTHCHECK_URL": "http://127.0.0.1:\(port)/every-job",
            "NUDGE_HEALTHCHECK_URL_VALIDATE_STREAKS": "http://127.0.0.1:\(port)/streaks",
        ]
        for shard in ["0/2", "1/2"] {
            let result = try await database.nudge(
                ["run", "validate-streaks", "--now", "2026-03-20T12:00:00Z", "--shard", shard],
                environment: environment)
            #expect(result.status == 0, "\(result.stderr)")
        }
        let goals = try await database.nudge(["run", "generate-daily-goals", "--now", "2026-03-20T12:00:00Z"], environment: environment)
        #expect(goals.status == 0, "\(goals.stderr)")
        let dry = try await database.nudge(["run", "validate-streaks", "--now", "2026-03-20T12:00:00Z", "--dry-run"], environment: environment)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(
            try String(contentsOf: log, encoding: .utf8) == """
                POST /streaks/start\nPOST /streaks\nPOST /streaks/start\nPOST /streaks\nPOST /every-job/start\nPOST /every-job\n
                """)
        let files = try FileManager.default.contentsOfDirectory(atPath: metrics.path).sorted()
        #expect(
            files == [
                "nudge_generate_daily_goals.prom", "nudge_validate_streaks_shard_0_of_2.prom",
                "nudge_validate_streaks_shard_1_of_2.prom",
            ])
        let shard = try String(contentsOf: metrics.appendingPathComponent("nudge_validate_streaks_shard_1_of_2.prom"), encoding: .utf8)
        #expect(shard.contains(#"nudge_run_exit_code{job="validate-streaks",shard="1/2"} 0"#), "\(shard)")
    }

    /// APNs down for 20 minutes in `provider_health`, three notifications parked for it (and one
    /// it no longer holds), one parked for Twilio, which this dispatcher has no credentials for:
    /// the run exits 0, as it does for an outage, and its textfile says each provider's state, time
    /// down and parked notifications, in a format Prometheus's own checker accepts.
    @Test func aDispatchRunWritesEachProvidersStateTimeDownAndParkedNotifications() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start()
        defer { Task { await push.shutdown() } }
        let metrics = FileManager.default.temporaryDirectory.appendingPathComponent("metrics-\(UUID())")
        try FileManager.default.createDirectory(at: metrics, withIntermediateDirectories: true)
        let now = "2026-03-29T18:22:11Z"
        var parked: [Int64] = []
        for n in 1...5 {
            try await Outbox.user(database, n)
            await parked.append(try Outbox.queue(database, n, type: "streak_at_risk", at: "2026-03-29T18:05:00Z"))
        }
        // Parked as dispatch parks them: pending, due again when their shelf life ends.
        try await database.psql(
            """
            update notification_outbox set waiting_for = 'apns', next_attempt_at = '2026-03-29T23:59:59Z'
             where id = any('{\(parked[0]),\(parked[1]),\(parked[2])}');
            update notification_outbox set waiting_for = 'twilio', next_attempt_at = '2026-03-29T23:59:59Z' where id = \(parked[3]);
            update notification_outbox set waiting_for = 'apns', status = 'suppressed', next_attempt_at = 'infinity',
                   last_error = 'expired: test' where id = \(parked[4]);
            update provider_health set state = 'down', since = '2026-03-29T18:02:11Z', probe_at = '2026-03-29T18:32:11Z',
                   reason = '5 of its last 5 requests got no answer' where provider = 'apns';
            """)

        let result = try await database.nudge(
            ["run", "dispatch", "--now", now],
            environment: push.environment.merging(
                ["NUDGE_METRICS_DIR": metrics.path]) { _, new in new })
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("APNs is down since 2026-03-29T18:02:11Z"), "\(result.stdout)")
        let file = metrics.appendingPathComponent("nudge_dispatch.prom")
        let text = try String(contentsOf: file, encoding: .utf8)
        for line in [
            #"nudge_provider_state{job="dispatch",provider="apns",state="down"} 1"#,
            #"nudge_provider_state{job="dispatch",provider="apns",state="up"} 0"#,
            #"nudge_provider_state{job="dispatch",provider="fcm",state="up"} 1"#,
            #"nudge_provider_down_seconds{job="dispatch",provider="apns"} 1200"#,
            #"nudge_provider_down_seconds{job="dispatch",provider="fcm"} 0"#,
            #"nudge_provider_parked{job="dispatch",provider="apns"} 3"#,
            #"nudge_provider_parked{job="dispatch",provider="fcm"} 0"#,
            #"nudge_provider_parked{job="dispatch",provider="twilio"} 1"#,
            #"nudge_provider_configured{job="dispatch",provider="apns"} 1"#,
            #"nudge_provider_configured{job="dispatch",provider="twilio"} 0"#,
            #"nudge_run_exit_code{job="dispatch"} 0"#,
        ] {
            #expect(text.contains(line + "\n"), "\(line) missing from:\n\(text)")
        }
        // Nothing was sent to APNs while it is down, and its rows still wait.
        #expect(push.apns.requestCount == 0)
        #expect(try await database.count("select count(*) from notification_outbox where waiting_for = 'apns' and status = 'pending'") == 3)
        let lint = try await runProcessOffThePool("/bin/sh", ["-c", "promtool check metrics < \"$1\"", "sh", file.path])
        #expect(lint.status == 0, "promtool check metrics: \(lint.stdout)\(lint.stderr) (scripts/test installs Debian's prometheus)")
    }

    /// deploy/prometheus/nudge-alerts.yml passes Prometheus's own checker, and its unit tests
    /// (nudge-alerts.test.yml) hold: a provider down or paused pages after 15 minutes and not
    /// before, one back sooner never does, a stale dispatch textfile pages. Every Prometheus
    /// query of the Grafana dashboard parses too.
    @Test func theAlertRulesAndTheDashboardsQueriesPassPromtool() async throws {
        let folder = packageRoot.appendingPathComponent("deploy/prometheus")
        let check = try await runProcessOffThePool(
            "/usr/bin/env",
            [
                "promtool", "check", "rules",
                folder.appendingPathComponent("nudge-alerts.yml").path,
            ])
        #expect(check.status == 0, "promtool check rules: \(check.stdout)\(check.stderr) (scripts/test installs Debian's prometheus)")
        let test = try await runProcessOffThePool(
            "/usr/bin/env",
            [
                "promtool", "test", "rules",
                folder.appendingPathComponent("nudge-alerts.test.yml").path,
            ])
        #expect(test.status == 0, "promtool test rules: \(test.stdout)\(test.stderr)")

        let dashboard = try JSONSerialization.jsonObject(with: Data(try GrafanaDashboard.json().utf8)) as? [String: Any]
        let expressions = (dashboard?["panels"] as? [[String: Any]] ?? []).flatMap { panel in
            (panel["targets"] as? [[String: Any]] ?? []).compactMap { $0["expr"] as? String }
        }
        #expect(expressions.contains { $0.contains("nudge_provider_down_seconds") })
        #expect(expressions.contains { $0.contains("nudge_provider_parked") })
        #expect(expressions.contains { $0.contains("nudge_provider_state") })
        // A JSON string (its slashes unescaped) is a YAML one: each query as a recording rule, for promtool to parse.
        let rules =
            "groups:\n  - name: dashboard\n    rules:\n"
            + (try expressions.enumerated().map { index, expression in
                let quoted = String(
                    decoding: try JSONSerialization.data(withJSONObject: expression, options: [.fragmentsAllowed, .withoutEscapingSlashes]), as: UTF8.self)
                return "      - record: dashboard_query_\(index)\n        expr: \(quoted)\n"
            }.joined())
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("dashboard-\(UUID()).yml")
        try Data(rules.utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let parsed = try await runProcessOffThePool("/usr/bin/env", ["promtool", "check", "rules", file.path])
        #expect(parsed.status == 0, "the dashboard's Prometheus queries: \(parsed.stdout)\(parsed.stderr)")
    }
}
