import Foundation
import Testing

@Suite struct MonitoringTests {
    /// A loopback HTTP server that answers 200 and writes each request line to a file.
    private func healthcheckServer() async throws -> (RunningProcess, port: Int, log: URL) {
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("pings-\(UUID()).log")
        let portFile = FileManager.default.temporaryDirectory.appendingPathComponent("port-\(UUID())")
        let script = """
            import http.server, sys
            class Handler(http.server.BaseHTTPRequestHandler):
                def do_POST(self):
                    self.rfile.read(int(self.headers.get('Content-Length', 0)))
                    open(sys.argv[1], 'a').write(self.command + ' ' + self.path + '\\n')
                    self.send_response(200); self.end_headers()
                def log_message(self, *args): pass
            server = http.server.HTTPServer(('127.0.0.1', 0), Handler)
            open(sys.argv[2], 'w').write(str(server.server_port))
            server.serve_forever()
            """
        let server = try RunningProcess("/usr/bin/env", ["python3", "-c", script, log.path, portFile.path],
                                        environment: ProcessInfo.processInfo.environment)
        _ = try await eventuallyHere(seconds: 10) { FileManager.default.fileExists(atPath: portFile.path) && ((try? String(contentsOf: portFile, encoding: .utf8)) ?? "") != "" }
        let port = Int(try String(contentsOf: portFile, encoding: .utf8))!
        return (server, port, log)
    }

    /// Twelve users to settle, and an empty folder for the metrics.
    private func usersAndAMetricsFolder() async throws -> (TestDatabase, URL) {
        let database = try await TestDatabase.fresh()
        try Fixture.population(database, count: 12, signup: "2026-03-01T00:00:00Z", from: "2026-02-28", to: "2026-03-20")
        let metrics = FileManager.default.temporaryDirectory.appendingPathComponent("metrics-\(UUID())")
        try FileManager.default.createDirectory(at: metrics, withIntermediateDirectories: true)
        return (database, metrics)
    }

    @Test func aRunWritesPrometheusMetricsAndPingsTheHealthcheck() async throws {
        let (database, metrics) = try await usersAndAMetricsFolder()
        let (server, port, log) = try await healthcheckServer()
        defer { server.signal(SIGKILL); _ = server.wait() }

        let environment = ["NUDGE_METRICS_DIR": metrics.path, "NUDGE_HEALTHCHECK_URL": "http://127.0.0.1:\(port)/ping/abc123"]
        let result = try await database.nudge(["run", "validate-streaks", "--now", "2026-03-20T12:00:00Z"], environment: environment)
        #expect(result.status == 0, "\(result.stderr)")
        let text = try String(contentsOf: metrics.appendingPathComponent("nudge_validate_streaks.prom"), encoding: .utf8)
        #expect(text.contains("nudge_run_users{job=\"validate-streaks\",outcome=\"processed\"} 12"))
        #expect(text.contains("nudge_run_exit_code{job=\"validate-streaks\"} 0"))
        #expect(text.contains("# TYPE nudge_run_seconds gauge"))
        #expect(try String(contentsOf: log, encoding: .utf8) == "POST /ping/abc123/start\nPOST /ping/abc123\n")

        // An aborted run pings /fail.
        let down = try await database.nudge(["run", "validate-streaks"], environment: environment.merging(
            ["DATABASE_URL": "postgres://nudge@localhost/nudge?host=/nonexistent&port=5999"]) { _, new in new })
        #expect(down.status == 1)
        #expect(try String(contentsOf: log, encoding: .utf8).hasSuffix("POST /ping/abc123/start\nPOST /ping/abc123/fail\n"))
        #expect(!down.stderr.contains("abc123"))
    }

    /// Each job (and each shard) has its own healthcheck and metrics file; a dry run tells
    /// monitoring nothing.
    @Test func eachJobAndShardReportsOnItsOwn() async throws {
        let (database, metrics) = try await usersAndAMetricsFolder()
        let (server, port, log) = try await healthcheckServer()
        defer { server.signal(SIGKILL); _ = server.wait() }
        let environment = ["NUDGE_METRICS_DIR": metrics.path,
                           "NUDGE_HEALTHCHECK_URL": "http://127.0.0.1:\(port)/every-job",
                           "NUDGE_HEALTHCHECK_URL_VALIDATE_STREAKS": "http://127.0.0.1:\(port)/streaks"]
        for shard in ["0/2", "1/2"] {
            let result = try await database.nudge(["run", "validate-streaks", "--now", "2026-03-20T12:00:00Z", "--shard", shard],
                                                  environment: environment)
            #expect(result.status == 0, "\(result.stderr)")
        }
        let goals = try await database.nudge(["run", "generate-daily-goals", "--now", "2026-03-20T12:00:00Z"], environment: environment)
        #expect(goals.status == 0, "\(goals.stderr)")
        let dry = try await database.nudge(["run", "validate-streaks", "--now", "2026-03-20T12:00:00Z", "--dry-run"], environment: environment)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(try String(contentsOf: log, encoding: .utf8) == """
            POST /streaks/start\nPOST /streaks\nPOST /streaks/start\nPOST /streaks\nPOST /every-job/start\nPOST /every-job\n
            """)
        let files = try FileManager.default.contentsOfDirectory(atPath: metrics.path).sorted()
        #expect(files == ["nudge_generate_daily_goals.prom", "nudge_validate_streaks_shard_0_of_2.prom",
                          "nudge_validate_streaks_shard_1_of_2.prom"])
        let shard = try String(contentsOf: metrics.appendingPathComponent("nudge_validate_streaks_shard_1_of_2.prom"), encoding: .utf8)
        #expect(shard.contains(#"nudge_run_exit_code{job="validate-streaks",shard="1/2"} 0"#), "\(shard)")
    }
}
