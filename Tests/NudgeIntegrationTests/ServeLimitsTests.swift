import Foundation
import NudgeStandIns
import Synchronization
import Testing

@testable import NudgeCore

/// `nudge serve` as it runs on a server: the binary, on a port of its own.
///
/// Holds one of the test process's slots for a `nudge` (`ProcessSlots`) until `stop`, which each
/// test defers: a test that throws half-way leaves neither the process nor its slot behind.
final class ServeProcess: Sendable {
    let process: RunningProcess
    let port: Int
    /// The health listener's port (`NUDGE_HEALTH_PORT`, on 127.0.0.1), 0 when none.
    let healthPort: Int
    private let stderr: StreamedOutput
    private let slot: ProcessSlots.Slot
    private let stopped = Mutex(false)

    private init(process: RunningProcess, port: Int, healthPort: Int = 0, stderr: StreamedOutput, slot: ProcessSlots.Slot) {
        self.process = process
        self.port = port
        self.healthPort = healthPort
        self.stderr = stderr
        self.slot = slot
    }

    static func start(_ database: TestDatabase, environment extra: [String: String] = [:]) async throws -> ServeProcess {
        let slot = await ProcessSlots.shared.acquire("nudge serve")
        let stderr: StreamedOutput
        do {
            stderr = try StreamedOutput(in: FileManager.default.temporaryDirectory)
        } catch {
            await ProcessSlots.shared.release(slot)
            throw error
        }
        let environment = database.nudgeEnvironment(
            [
                "NUDGE_HTTP_PORT": "0", "NUDGE_HEALTH_PORT": "0", "NUDGE_PUBLIC_URL": "http://127.0.0.1:1", "NUDGE_UNSUBSCRIBE_SECRET": digestSecret,
                "NUDGE_LOG_FORMAT": "text", "NUDGE_LOG_LEVEL": "warning",
            ].merging(extra) { $1 })
        // Its standard error to a pipe of ours, to read the port it listens on as it says it.
        let process: RunningProcess
        do {
            process = try RunningProcess(
                "/bin/sh", ["-c", "exec \"$0\" serve 2>\"$1\"", NudgeBinary.path, stderr.path],
                environment: environment)
        } catch {
            stderr.abandon()
            await ProcessSlots.shared.release(slot)
            throw error
        }
        var port = 0
        var healthPort = 0
        func portAfter(_ marker: String, in text: String) -> Int {
            guard let range = text.range(of: marker) else { return 0 }
            return Int(text[range.upperBound...].prefix { $0.isNumber }) ?? 0
        }
        do {
            try await until("nudge serve to say where it listens", on: stderr.changes) {
                let text = stderr.text
                guard let range = text.range(of: "listening on http://") else {
                    if stderr.ended { throw TestFailure("nudge serve ended before it listened: \(text)") }
                    return false
                }
                let address = text[range.upperBound...].prefix { !$0.isWhitespace }
                port = address.split(separator: ":").last.flatMap { Int($0) } ?? 0
                healthPort = portAfter("health check on http://127.0.0.1:", in: text)
                return port > 0 && (environment["NUDGE_HEALTH_PORT"] == nil || healthPort > 0)
            }
        } catch {
            let said = await ServeProcess(process: process, port: 0, stderr: stderr, slot: slot).stop()
            throw TestFailure("\(error); it said: \(said)")
        }
        let serve = ServeProcess(process: process, port: port, healthPort: healthPort, stderr: stderr, slot: slot)
        return serve
    }

    /// Kills the server and gives its slot back; what it logged. Once: a second call returns "".
    @discardableResult
    func stop() async -> String {
        guard
            !stopped.withLock({ stopped in
                defer { stopped = true }
                return stopped
            })
        else { return "" }
        process.signal(SIGKILL)
        _ = await process.finished()
        Task { [slot] in await ProcessSlots.shared.release(slot) }
        // Its end of the pipe closed with it: everything it wrote is read once the end is seen.
        let stderr = self.stderr
        try? await until("the end of nudge serve's output", on: stderr.changes) { stderr.ended }
        return stderr.text
    }

    /// Whether its database answers it, asked now on the health listener (`/health?db=1`), which
    /// also makes the main listener's `/health` fresh. A 503 (the server's own bound on the
    /// database's answer, which a busy machine can outlast) is asked again as soon as it comes,
    /// up to ten times.
    func databaseAnswers() async throws -> Bool {
        for _ in 1...10 {
            let asked = try await runProcessOffThePool(
                "/usr/bin/curl",
                ["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "\(Int(TestBudget.seconds))", "http://127.0.0.1:\(healthPort)/health?db=1"])
            if asked.stdout == "200" { return true }
            guard asked.stdout == "503" else { return false }
        }
        return false
    }

    func pressure(_ arguments: [String]) async throws -> [String: Any] {
        let script = packageRoot.appendingPathComponent("scripts/bench/http-pressure.py").path
        let result = try await runProcessOffThePool("/usr/bin/python3", [script, arguments[0], "127.0.0.1", "\(port)"] + arguments.dropFirst())
        #expect(result.status == 0, "\(result.stderr)")
        return try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], "\(result.stdout)")
    }
}

/// curl, off Swift's threads, and never longer than 10 s: a server that accepts and never answers
/// fails the test instead of holding it.
private func curl(_ arguments: [String]) async throws -> ProcessResult {
    try await runProcessOffThePool("/usr/bin/curl", ["--max-time", "10"] + arguments)
}

@Suite(.serialized, .dropsItsDatabases) struct ServeLimitsTests {
    /// 1,500 connections held idle, half-sent or with a body that never comes, past the cap of
    /// 1,000: real requests (one asking the database) are answered throughout, none waiting on a
    /// held connection, the longest-idle connections make room, and every held one is closed
    /// within two minutes.
    ///
    /// A request kept waiting by a held connection would wait at least for its time-out (10 s for a
    /// body, 30 s idle) or be refused; so here the slowest must stay under 5 s and the typical one
    /// under a second, which tells that apart from the other tests loading the machine. The
    /// second for every request is the benchmark's (`scripts/bench/serve`), on a quiet machine.
    @Test func heldConnectionsNeverKeepARealRequestWaiting() async throws {
        let database = try await TestDatabase.fresh()
        let user = UUID()
        try await database.psql("insert into users (id, timezone, locale, email) values ('\(user)', 'UTC', 'en', 'held@example.test')")
        let serve = try await ServeProcess.start(database)
        defer { Task { await serve.stop() } }
        let base = "http://127.0.0.1:\(serve.port)"
        #expect(try await serve.databaseAnswers())
        // A page that asks the database, besides /health and a refused token, which do not.
        let page = try UnsubscribeLinks(secret: digestSecret, publicURL: base).url(user: user, type: .weeklyDigest)
        let report = try await serve.pressure(["connections", "1500", "120", String(page.dropFirst(base.count))])
        let log = await serve.stop()
        #expect((report["median"] as? Double ?? 99) < 1.0, "\(report)")
        #expect((report["slowest"] as? Double ?? 99) < 5.0, "\(report)")
        #expect(report["statuses"] as? [Int] == [200, 400], "\(report)")
        #expect(report["floor_statuses"] as? [Int] == [200, 400], "\(report)")
        #expect((report["closed_at_once"] as? Int ?? 0) >= 500, "\(report)")
        #expect((report["all_closed_after"] as? Double ?? 999) < 120, "\(report)")
        #expect(report["still_open"] as? Int == 0, "\(report)")
        #expect(!log.contains("error"), "\(log)")
    }

    /// A 10 MB body is refused (413) before it has ended, announced or chunked, on a route that
    /// reads a body and on one that does not.
    @Test(arguments: [
        ("/webhooks/resend", "length"), ("/webhooks/resend", "chunked"), ("/unsubscribe?token=x", "length"),
        ("/webhooks/twilio", "chunked"),
    ])
    func aHugeBodyIsRefusedUnread(_ path: String, _ how: String) async throws {
        let database = try await TestDatabase.fresh()
        let serve = try await ServeProcess.start(database)
        defer { Task { await serve.stop() } }
        let report = try await serve.pressure(["body", path, how])
        await serve.stop()
        // Only the body's first megabyte ever comes: a server that read bodies to their end would
        // still be waiting for the rest (or answer its time-out, 408). The answer, unless the
        // close overtook it (the client then sees the connection reset).
        let sent = try #require(report["sent"] as? Int)
        let size = try #require(report["size"] as? Int)
        #expect(sent < size, "\(report)")
        let status = report["status"] as? Int
        let reset = report["reset"] as? Bool
        #expect(status == 413 || (status == 0 && reset == true), "\(report)")
        if how == "length" { #expect(status == 413, "\(report)") }
    }

    /// Pages say what they allow; `/health` answers from memory, `?db=1` asks the database.
    @Test func pagesCarrySecurityHeadersAndHealthAnswersFromMemory() async throws {
        let database = try await TestDatabase.fresh()
        let serve = try await ServeProcess.start(database, environment: ["NUDGE_HTTP_HOST": "0.0.0.0"])
        defer { Task { await serve.stop() } }
        let base = "http://127.0.0.1:\(serve.port)"
        let page = try await curl(["-s", "-D", "-", "-o", "/dev/null", base + "/unsubscribe?token=x"])
        let headers = page.stdout.lowercased()
        #expect(
            headers.contains(
                "content-security-policy: default-src 'none'; style-src 'unsafe-inline'; form-action 'self' http://127.0.0.1:1; frame-ancestors 'none'"),
            "\(headers)")
        #expect(headers.contains("x-content-type-options: nosniff"))
        #expect(headers.contains("referrer-policy: no-referrer"))
        #expect(headers.contains("x-frame-options: deny"))
        #expect(try await serve.databaseAnswers())
        // The database is asked now only on the health listener (127.0.0.1, NUDGE_HEALTH_PORT), never
        // on the one the internet reaches, whoever seems to ask: a proxy on this machine makes
        // every request local.
        let live = try await curl(["-s", "-w", "%{http_code}", "-o", "/dev/null", "http://127.0.0.1:\(serve.healthPort)/health?db=1"])
        #expect(live.stdout == "200")
        let local = try await curl(["-s", "-w", "%{http_code}", "-o", "/dev/null", base + "/health?db=1"])
        #expect(local.stdout == "404")
        // From another machine (here: this one's address that is not loopback), only from memory.
        let outside = try await outsideAddress()
        let remote = try await curl([
            "-s", "-w", "%{http_code}", "-o", "/dev/null",
            "http://\(outside):\(serve.port)/health?db=1",
        ])
        #expect(remote.stdout == "404")
        let healthFromOutside = try await curl([
            "-s", "-w", "%{http_code}", "-o", "/dev/null",
            "http://\(outside):\(serve.healthPort)/health?db=1",
        ])
        #expect(healthFromOutside.stdout == "000", "the health listener answered another machine")
        let remoteMemory = try await curl([
            "-s", "-w", "%{http_code}", "-o", "/dev/null",
            "http://\(outside):\(serve.port)/health",
        ])
        #expect(remoteMemory.stdout == "200")
    }
}

@Suite(.dropsItsDatabases) struct ServeFailureTests {
    /// A health listener that cannot bind (its port taken, here by another serve's) ends serve
    /// with an error, instead of serving without the database's health check.
    @Test func aHealthListenerThatCannotBindEndsServe() async throws {
        let database = try await TestDatabase.fresh()
        let first = try await ServeProcess.start(database)
        defer { Task { await first.stop() } }
        let second = try database.startNudge(
            ["serve"],
            environment: [
                "NUDGE_HTTP_PORT": "0", "NUDGE_HEALTH_PORT": String(first.healthPort), "NUDGE_PUBLIC_URL": "http://127.0.0.1:1",
                "NUDGE_UNSUBSCRIBE_SECRET": digestSecret, "NUDGE_LOG_FORMAT": "text",
            ])
        let ended = try await ending(within: 60) { await second.finished() }
        if ended == nil { second.signal(SIGKILL) }
        let result = try #require(ended, "nudge serve kept running without its health listener")
        #expect(result.status != 0, "\(result.stderr)")
        #expect(result.stderr.contains("Address already in use") || result.stderr.contains("address already in use"), "\(result.stderr)")
    }

    /// A request the database fails is answered 503 (retry later) and logged at warning with its
    /// route, never with its query, which carries the unsubscribe token.
    @Test func aFailureIsAnswered503AndLoggedWithItsRouteNotItsToken() async throws {
        let database = try await TestDatabase.fresh()
        let serve = try await ServeProcess.start(database)
        defer { Task { await serve.stop() } }
        let link = try UnsubscribeLinks(secret: digestSecret, publicURL: "http://127.0.0.1:\(serve.port)")
            .url(user: UUID(), type: .weeklyDigest)
        try await database.psql("alter table users rename to users_away")
        let answer = try await curl([
            "-s", "-D", "-", "-o", "/dev/null", "-X", "POST",
            "-d", "List-Unsubscribe=One-Click", link,
        ])
        let log = await serve.stop()
        #expect(answer.stdout.hasPrefix("HTTP/1.1 503"), "\(answer.stdout)")
        #expect(answer.stdout.lowercased().contains("retry-after: 5"))
        #expect(log.contains("request failed; answered 503"), "\(log)")
        #expect(log.contains("POST /unsubscribe"), "\(log)")
        let token = try #require(URLComponents(string: link)?.queryItems?.first { $0.name == "token" }?.value)
        #expect(!log.contains(token))
    }
}

@Suite(.dropsItsDatabases) struct UnsubscribeRotationTests {
    /// An email sent under the old secret unsubscribes after the new one is set, the old one kept
    /// as `NUDGE_UNSUBSCRIBE_SECRET_PREVIOUS`; once that is dropped, its link is refused.
    @Test func anEmailSentBeforeARotationStillUnsubscribes() async throws {
        let database = try await TestDatabase.fresh()
        let stand = try await ResendStandIn.start()
        defer { Task { await stand.resend.shutdown() } }
        try await DigestFixture.user(database, 1, zone: "Europe/London")
        try await DigestFixture.activity(database, 1, from: "2026-03-01", to: "2026-03-29")
        _ = try await weeklyDigest(database, at: ISO8601DateFormatter().date(from: "2026-03-22T20:00:00Z")!, publicURL: "http://127.0.0.1:1")
        let sent = try await database.nudge(["run", "dispatch", "--now", "2026-03-22T20:01:00Z"], environment: stand.environment)
        #expect(sent.status == 0, "\(sent.stderr)")
        let email = try #require(stand.resend.sent.first { $0.to == ["user1@example.test"] })
        let link = String(try #require(email.headers["List-Unsubscribe"]).dropFirst().dropLast())
        let path = String(link[try #require(link.range(of: "/unsubscribe?token=")).lowerBound...])

        let newSecret = "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b"
        func post(_ environment: [String: String]) async throws -> String {
            let serve = try await ServeProcess.start(database, environment: environment)
            let result: ProcessResult
            do {
                result = try await curl([
                    "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
                    "-d", "List-Unsubscribe=One-Click", "http://127.0.0.1:\(serve.port)\(path)",
                ])
            } catch {
                await serve.stop()
                throw error
            }
            await serve.stop()   // before the next server starts, its process slot given back
            return result.stdout
        }
        #expect(try await post(["NUDGE_UNSUBSCRIBE_SECRET": newSecret]) == "400")
        #expect(try await database.psql("select weekly_digest from email_preferences where user_id = '\(Fixture.userID(1))'") != "f")
        #expect(try await post(["NUDGE_UNSUBSCRIBE_SECRET": newSecret, "NUDGE_UNSUBSCRIBE_SECRET_PREVIOUS": digestSecret]) == "200")
        #expect(try await database.psql("select weekly_digest from email_preferences where user_id = '\(Fixture.userID(1))'") == "f")
    }
}

@Suite(.dropsItsDatabases) struct ServeRoleTests {
    /// `nudge serve` as the `nudge_serve` role of deploy/sql/roles.sql does its work (an
    /// unsubscribe, a Twilio callback) and nothing more: the outbox is not its to read, nor a
    /// user's address to change.
    @Test func theServeRoleDoesItsWorkAndNothingMore() async throws {
        let database = try await TestDatabase.fresh()
        let roles = try await database.applyRoles()
        #expect(roles.status == 0, "\(roles.stderr)")
        let user = UUID()
        try await database.psql(
            """
            insert into users (id, timezone, locale, email) values ('\(user)', 'Europe/Paris', 'fr', 'someone@example.test');
            insert into notification_logs (user_id, notification_type, channel, status, provider_id, sent_at)
            values ('\(user)', 'streak_at_risk', 'sms', 'sent', 'SM0123456789abcdef0123456789abcdef', now());
            insert into notification_logs (user_id, notification_type, channel, status, provider_id, sent_at)
            values ('\(user)', 'weekly_digest', 'email', 'sent', 'e-role-test-0001', now());
            insert into notification_outbox (dedupe_key, job, user_id, local_day, notification_type, deliver_after)
            values ('role-test', 'test', '\(user)', '2026-03-22', 'streak_at_risk', now())
            """)
        let serveURL = database.url(as: "nudge_serve")
        #expect(serveURL != database.url)
        let token = "twilio-auth-token-for-the-role-test"
        let webhookSecret = "whsec_" + Data((0..<32).map { UInt8($0 * 5 % 251) }).base64EncodedString()
        let serve = try await ServeProcess.start(
            database,
            environment: [
                "DATABASE_URL": serveURL, "TWILIO_AUTH_TOKEN": token,
                "RESEND_WEBHOOK_SECRET": webhookSecret,
            ])
        defer { Task { await serve.stop() } }
        let base = "http://127.0.0.1:\(serve.port)"

        let link = try UnsubscribeLinks(secret: digestSecret, publicURL: base).url(user: user, type: .weeklyDigest)
        let unsubscribed = try await curl([
            "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
            "-d", "List-Unsubscribe=One-Click", link,
        ])
        let fields = [("MessageSid", "SM0123456789abcdef0123456789abcdef"), ("MessageStatus", "delivered")]
        let signature = TwilioWebhook.signature(url: "http://127.0.0.1:1/webhooks/twilio?outbox=1", fields: fields, authToken: token)
        let callback = try await curl([
            "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
            "-H", "X-Twilio-Signature: \(signature)",
            "-d", "MessageSid=\(fields[0].1)", "-d", "MessageStatus=delivered",
            base + "/webhooks/twilio?outbox=1",
        ])
        let page = try await curl(["-s", "-o", "/dev/null", "-w", "%{http_code}", link])
        // A reply of STOP from the user's number: SMS to it stops.
        let stop = [
            ("MessageSid", "SM00000000000000000000000000000007"), ("From", "+15551230000"), ("Body", "STOP"),
            ("SmsStatus", "received"),
        ]
        let stopSignature = TwilioWebhook.signature(url: "http://127.0.0.1:1/webhooks/twilio", fields: stop, authToken: token)
        let stopped = try await curl([
            "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
            "-H", "X-Twilio-Signature: \(stopSignature)",
            "-d", "MessageSid=SM00000000000000000000000000000007",
            "--data-urlencode", "From=+15551230000", "-d", "Body=STOP",
            "-d", "SmsStatus=received", base + "/webhooks/twilio",
        ])
        // Resend's hard bounce: the email's log is set, its address suppressed.
        let bounce =
            #"{"type": "email.bounced", "created_at": "2026-03-22T20:05:00.000000+00:00", "data": {"email_id": "e-role-test-0001", "to": ["someone@example.test"], "bounce": {"message": "no such mailbox", "subType": "General", "type": "Permanent"}}}"#
        let timestamp = String(Int(Date().timeIntervalSince1970))
        let svix = try ResendWebhook.signature(
            id: "msg_role_test", timestamp: timestamp, body: Array(bounce.utf8),
            secret: ResendWebhookSecret(webhookSecret))
        let bounced = try await curl([
            "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
            "-H", "Content-Type: application/json", "-H", "svix-id: msg_role_test",
            "-H", "svix-timestamp: \(timestamp)", "-H", "svix-signature: \(svix)",
            "--data-binary", bounce, base + ResendWebhook.path,
        ])
        let log = await serve.stop()
        #expect(bounced.stdout == "200", "\(log)")
        #expect(
            try await database.psql("select status, bounce_type from notification_logs where provider_id = 'e-role-test-0001'")
                == "failed|Permanent/General")
        #expect(try await database.psql("select reason from email_suppressions where address = 'someone@example.test'") == "hard_bounce")
        #expect(page.stdout == "200", "\(log)")
        #expect(stopped.stdout == "200", "\(log)")
        #expect(try await database.psql("select count(*) from sms_opt_outs where phone_number = '+15551230000'") == "1")
        #expect(unsubscribed.stdout == "200", "\(log)")
        #expect(try await database.psql("select weekly_digest from email_preferences where user_id = '\(user)'") == "f")
        #expect(callback.stdout == "200", "\(log)")
        #expect(try await database.psql("select status, delivered from notification_logs where user_id = '\(user)' and channel = 'sms'") == "delivered|t")

        func asServe(_ sql: String) async throws -> ProcessResult { await database.attempt(sql, as: "nudge_serve") }
        for refused in [
            "select count(*) from notification_outbox", "update users set email = 'x@example.test'",
            "select display_name from users", "select count(*) from job_runs", "delete from email_preferences",
            "select body from notification_logs", "select title from notification_logs",
            "update job_due set due_at = 'infinity'", "select count(*) from email_logs",
            "select count(*) from email_preferences", "update email_preferences set weekly_digest = true",
            "delete from sms_opt_outs", "select email from users",
        ] {
            let result = try await asServe(refused)
            #expect(result.status != 0 && result.stderr.contains("permission denied"), "\(refused): \(result.stderr)")
        }
        // What it reads of a user, it reads through the owner's function: the switch and the locale.
        await #expect(
            try asServe("select subscribed from nudge_unsubscribe_state('\(user)', 'weekly_digest')").stdout
                .trimmingCharacters(in: .whitespacesAndNewlines) == "f")
    }
}

/// `nudge serve` asks its database every few seconds on the clock it is given: the checks'
/// interval is seen on a clock the test moves, without waiting for it. (Whether a check's answer
/// keeps `/health` fresh is `HealthCheckTests`'.)
@Suite(.dropsItsDatabases) struct ServeHealthClockTests {
    @Test func theChecksComeAtEachIntervalOfTheServersClock() async throws {
        let database = try await TestDatabase.fresh()
        let clock = ManualWaitClock()
        let server = Task {
            try await database.withDatabase { db in
                try await NudgeServer.run(
                    database: db, links: try UnsubscribeLinks(secret: digestSecret, publicURL: "https://unused.test"),
                    twilioAuthToken: nil, waitClock: clock, host: "127.0.0.1", port: 0, logger: db.logger)
            }
        }
        defer { server.cancel() }
        // Each check, once answered, sleeps for the interval: at 5 s, then (the clock moved there)
        // at 10 s.
        let deadlines = try await ending { () async -> [Duration] in
            var seen: [Duration] = []
            for await deadline in clock.sleepers {
                seen.append(deadline)
                if seen.count == 2 { break }
                clock.advance(by: deadline - clock.now())
            }
            return seen
        }
        #expect(deadlines == [NudgeServer.healthEvery, NudgeServer.healthEvery * 2])
    }
}
