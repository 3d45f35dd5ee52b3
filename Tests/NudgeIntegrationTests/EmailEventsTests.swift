import Foundation
import NudgeStandIns
import Synchronization
import Testing

@testable import NudgeCore

private func at(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }

/// A webhook secret as Resend shows one (`whsec_` and a base64 key); made up for the tests.
private let webhookSecretText = "whsec_" + Data((0..<32).map { UInt8($0 * 7 % 251) }).base64EncodedString()

/// `nudge serve` on a free port with Resend's webhook secret, and a way to post to it.
private struct WebhookServer {
    let base: String
    /// The health listener's address (`/health?db=1`).
    let health: String
    let server: Task<Void, any Error>

    static func start(_ database: TestDatabase) async throws -> WebhookServer {
        let port = Latch<Int>()
        let healthPort = Latch<Int>()
        let secret = try ResendWebhookSecret(webhookSecretText)
        let server = Task {
            try await database.withDatabase { db in
                try await NudgeServer.run(
                    database: db, links: try UnsubscribeLinks(secret: digestSecret, publicURL: "https://unused.test"),
                    twilioAuthToken: nil, resendWebhookSecret: secret, host: "127.0.0.1", port: 0, healthPort: 0,
                    logger: db.logger, onRunning: { bound in port.set(bound) },
                    onHealthRunning: { bound in healthPort.set(bound) })
            }
        }
        let base = "http://127.0.0.1:\(try await port.value("nudge serve's port"))"
        let health = "http://127.0.0.1:\(try await healthPort.value("nudge serve's health port"))"
        return WebhookServer(base: base, health: health, server: server)
    }

    /// Posts `body` as Resend's webhook delivery `id` would come, signed `timestamp` seconds from
    /// now (or with `signature`); the HTTP status.
    func post(_ body: String, id: String, age: TimeInterval = 0, timestamp given: String? = nil, signature: String? = nil) async throws -> String {
        let timestamp = given ?? String(Int(Date().timeIntervalSince1970 - age))
        let secret = try ResendWebhookSecret(webhookSecretText)
        let signed = signature ?? ResendWebhook.signature(id: id, timestamp: timestamp, body: Array(body.utf8), secret: secret)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("nudge-event-\(UUID()).json")
        try Data(body.utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let result = try await runProcessOffThePool(
            "/usr/bin/curl",
            [
                "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "\(Int(TestBudget.seconds))", "-X", "POST",
                "-H", "Content-Type: application/json", "-H", "svix-id: \(id)", "-H", "svix-timestamp: \(timestamp)",
                "-H", "svix-signature: \(signed)", "--data-binary", "@\(file.path)", base + ResendWebhook.path,
            ])
        return result.stdout
    }
}

/// An event as Resend sends it.
private func event(
    _ type: String, email: String, to address: String, at time: String = "2026-03-22T20:05:00.123456+00:00",
    bounce: String? = nil
) -> String {
    let bounced =
        bounce.map { #", "bounce": {"message": "The email account that you tried to reach does not exist.", "subType": "General", "type": "\#($0)"}"# } ?? ""
    return
        #"{"type": "\#(type)", "created_at": "\#(time)", "data": {"created_at": "2026-03-22T20:01:00.000000+00:00", "email_id": "\#(email)", "from": "FitCircle <coach@fitcircle.example>", "to": ["\#(address)"], "subject": "Your week"\#(bounced), "tags": {"email_type": "weekly_digest"}}}"#
}

@Suite(.serialized, .dropsItsDatabases) struct EmailEventsTests {
    /// A correctly signed event is recorded on its email's log; a wrong signature, a stale
    /// timestamp, a missing header, a replayed delivery are refused (401) and write nothing;
    /// Resend's retry of an event (the same svix-id, a newer timestamp) is answered 200 and
    /// applied once.
    @Test func signedEventsAreRecordedAndForgedStaleOrReplayedOnesChangeNothing() async throws {
        let database = try await TestDatabase.fresh()
        try await DigestFixture.user(database, 1, zone: "Europe/London")
        try await database.psql(
            """
            insert into notification_logs (user_id, notification_type, channel, status, provider_id, sent_at)
            values ('\(Fixture.userID(1))', 'weekly_digest', 'email', 'sent', 'em-1', '2026-03-22T20:01:00Z');
            insert into email_logs (user_id, email_type, sent_at, provider_id) values ('\(Fixture.userID(1))', 'weekly_digest', '2026-03-22T20:01:00Z', 'em-1')
            """)
        let web = try await WebhookServer.start(database)
        defer { web.server.cancel() }

        let first = String(Int(Date().timeIntervalSince1970))
        let delivered = event("email.delivered", email: "em-1", to: "user1@example.test")
        #expect(try await web.post(delivered, id: "msg_1", timestamp: first) == "200")
        #expect(
            try await database.psql("select status, delivered, to_char(delivered_at at time zone 'UTC', 'HH24:MI:SS.US') from notification_logs")
                == "delivered|t|20:05:00.123456")
        let before = try await database.dump()
        let opened = event("email.opened", email: "em-1", to: "user1@example.test", at: "2026-03-22T21:00:00Z")
        #expect(try await web.post(opened, id: "msg_2", signature: "v1," + Data(repeating: 7, count: 32).base64EncodedString()) == "401")
        #expect(try await web.post(opened, id: "msg_2", age: 301) == "401")
        // (Well past the 5 minutes: the server reads its clock a little later than the test.)
        #expect(try await web.post(opened, id: "msg_2", age: -400) == "401")
        #expect(try await web.post(opened, id: "", signature: "") == "401")
        // Signed for another body: the signature covers the body.
        let other = ResendWebhook.signature(
            id: "msg_2", timestamp: String(Int(Date().timeIntervalSince1970)),
            body: Array(event("email.clicked", email: "em-1", to: "user1@example.test").utf8),
            secret: try ResendWebhookSecret(webhookSecretText))
        #expect(try await web.post(opened, id: "msg_2", signature: other) == "401")
        #expect(try await database.dump() == before)

        // The first delivery sent again as it was (a captured request): refused, nothing written.
        #expect(try await web.post(delivered, id: "msg_1", timestamp: first) == "401")
        #expect(try await database.dump() == before)
        // Resend's retry of that event (the same svix-id, a newer timestamp), whatever it carries:
        // answered, and not applied again.
        let retried = event("email.bounced", email: "em-1", to: "user1@example.test", bounce: "Permanent")
        #expect(try await web.post(retried, id: "msg_1", timestamp: String(Int(first)! + 5)) == "200")
        #expect(try await web.post(retried, id: "msg_1", timestamp: String(Int(first)! + 5)) == "401")
        #expect(try await database.psql("select status, bounced_at is null from notification_logs") == "delivered|t")
        #expect(try await database.count("select count(*) from email_suppressions") == 0)
        #expect(try await database.count("select count(*) from email_events") == 1)

        // Opened then clicked, in either order, sets the same row.
        #expect(try await web.post(event("email.clicked", email: "em-1", to: "user1@example.test", at: "2026-03-22T21:10:00Z"), id: "msg_3") == "200")
        #expect(try await web.post(opened, id: "msg_2") == "200")
        #expect(
            try await database.psql(
                """
                select status, opened, to_char(opened_at at time zone 'UTC', 'HH24:MI'), to_char(clicked_at at time zone 'UTC', 'HH24:MI')
                  from notification_logs
                """) == "opened|t|21:00|21:10")
        #expect(try await database.psql("select opened, clicked from email_logs") == "t|t")
        #expect(try await database.count("select count(*) from email_events") == 3)
    }

    /// Last Sunday's digest to user 1 bounced hard, and Resend says so during this Sunday: this
    /// Sunday's digest email to that address is suppressed with the reason (the push still goes),
    /// user 2's goes. A soft bounce suppresses nothing; a complaint suppresses the address and
    /// turns the user's optional emails off.
    @Test func aHardBounceStopsThatAddressAndTheNextUsersEmailGoes() async throws {
        let database = try await TestDatabase.fresh()
        let stand = try await ResendStandIn.start()
        defer { Task { await stand.resend.shutdown() } }
        for n in 1...3 {
            try await DigestFixture.user(database, n, zone: "Europe/London")
            try await DigestFixture.activity(database, n, from: "2026-03-01", to: "2026-03-29")
        }
        let web = try await WebhookServer.start(database)
        defer { web.server.cancel() }

        _ = try await weeklyDigest(database, at: at("2026-03-22T20:00:00Z"))
        let first = try await database.nudge(["run", "dispatch", "--now", "2026-03-22T20:01:00Z"], environment: stand.environment)
        #expect(first.status == 0, "\(first.stderr)")
        func emailTo(_ n: Int) throws -> String {
            try #require(stand.resend.sent.last { $0.to == ["user\(n)@example.test"] }).id
        }
        #expect(
            try await web.post(
                event("email.bounced", email: try emailTo(1), to: "User1@Example.test", bounce: "Permanent"),
                id: "msg_hard") == "200")
        #expect(
            try await web.post(
                event("email.bounced", email: try emailTo(2), to: "user2@example.test", bounce: "Transient"),
                id: "msg_soft") == "200")
        #expect(try await web.post(event("email.complained", email: try emailTo(3), to: "user3@example.test"), id: "msg_spam") == "200")
        #expect(
            try await database.psql(
                "select status, bounce_type, error_msg like 'bounced (Permanent/General): The email account%' from notification_logs where provider_id = '\(try emailTo(1))'"
            )
                == "failed|Permanent/General|t")
        #expect(
            try await database.psql("select address, reason from email_suppressions order by 1")
                == "user1@example.test|hard_bounce\nuser3@example.test|complaint")
        #expect(
            try await database.psql(
                """
                select weekly_digest, streak_at_risk, fitcircle_invites from email_preferences where user_id = '\(Fixture.userID(3))'
                """) == "f|f|t")

        _ = try await weeklyDigest(database, at: at("2026-03-29T19:00:00Z"))
        let next = try await database.nudge(["run", "dispatch", "--now", "2026-03-29T19:01:00Z"], environment: stand.environment)
        #expect(next.status == 0, "\(next.stderr)")
        #expect(stand.resend.sent.filter { $0.to == ["user1@example.test"] }.count == 1)
        #expect(stand.resend.sent.filter { $0.to == ["user2@example.test"] }.count == 2)
        #expect(
            try await database.psql(
                """
                select error_msg from notification_logs where user_id = '\(Fixture.userID(1))' and channel = 'email' and status = 'suppressed'
                """
            ).hasPrefix("suppression: the address bounced hard on 2026-03-22 (General: The email account"))
        #expect(
            try await database.psql(
                """
                select status from notification_outbox where user_id = '\(Fixture.userID(1))' and channel = 'email' order by deliver_after
                """) == "sent\nsuppressed")
    }

    /// An event that comes before its email's log is written is applied as the log is; one for
    /// an email Nudge never sent is answered 200, kept once, and changes nothing else.
    @Test func anEarlyEventWaitsForItsLogAndAnUnknownEmailChangesNothing() async throws {
        let database = try await TestDatabase.fresh()
        try await DigestFixture.user(database, 1, zone: "Europe/London")
        let web = try await WebhookServer.start(database)
        defer { web.server.cancel() }
        #expect(try await web.post(event("email.delivered", email: "em-early", to: "user1@example.test"), id: "msg_early") == "200")
        let now = Int(Date().timeIntervalSince1970)
        let stranger = event("email.opened", email: "em-stranger", to: "someone@else.test")
        #expect(try await web.post(stranger, id: "msg_unknown", timestamp: String(now)) == "200")
        // Resend's retry of it (answered 200 anyway), kept once.
        #expect(try await web.post(stranger, id: "msg_unknown", timestamp: String(now + 3)) == "200")
        #expect(try await database.count("select count(*) from email_events where email_id = 'em-stranger'") == 1)
        #expect(try await database.psql("select count(*) from notification_logs") == "0")
        try await database.psql(
            """
            insert into notification_logs (user_id, notification_type, channel, status, provider_id, sent_at)
            values ('\(Fixture.userID(1))', 'weekly_digest', 'email', 'sent', 'em-early', '2026-03-22T20:01:00Z')
            """)
        #expect(try await database.psql("select status, delivered from notification_logs") == "delivered|t")
        // A contact event is not an email's: answered, not kept.
        #expect(try await web.post(#"{"type": "contact.created", "created_at": "2026-03-22T20:00:00Z", "data": {"id": "c1"}}"#, id: "msg_contact") == "200")
        #expect(try await database.count("select count(*) from email_events") == 2)
    }

    /// An event that came while its email's log was being written (the log's trigger saw no
    /// event, the webhook no log) is applied by the dispatcher right after its batch.
    @Test func anEventThatCameWhileItsLogWasWrittenIsAppliedAfterTheBatch() async throws {
        let database = try await TestDatabase.fresh()
        try await DigestFixture.user(database, 1, zone: "Europe/London")
        // As that race leaves them: the log written without the event, the event kept.
        try await database.psql(
            """
            alter table notification_logs disable trigger email_log_receipts;
            insert into notification_logs (user_id, notification_type, channel, status, provider_id, sent_at, run_id)
            values ('\(Fixture.userID(1))', 'weekly_digest', 'email', 'sent', 'em-race', now(), 77),
                   ('\(Fixture.userID(1))', 'weekly_digest', 'email', 'sent', 'em-other-run', now(), 78);
            alter table notification_logs enable trigger email_log_receipts;
            insert into email_events (svix_id, svix_timestamp, email_id, type, occurred_at, received_at)
            values ('msg_race', 1, 'em-race', 'email.delivered', now(), now()), ('msg_other', 1, 'em-other-run', 'email.delivered', now(), now())
            """)
        let applied = try await database.withDatabase { db in
            try await db.withConnection { connection in try await EmailEvents.applyWhileWritten(run: 77, on: connection, logger: db.logger) }
        }
        #expect(applied == 1)
        #expect(
            try await database.psql("select provider_id, status, delivered from notification_logs order by 1")
                == "em-other-run|sent|f\nem-race|delivered|t")
    }

    /// 500 opens of one email arrive, 48 at a time (under the server's cap of requests in flight,
    /// which sheds the rest by itself): each is answered at once, 200 or 503 (another event of that email being recorded: Resend
    /// sends it again later), only the first open is kept, and the server's other requests, a
    /// database health check among them, keep answering meanwhile.
    @Test func aBurstOfOneEmailsEventsHoldsNothingElse() async throws {
        let database = try await TestDatabase.fresh()
        try await DigestFixture.user(database, 1, zone: "Europe/London")
        try await database.psql(
            """
            insert into notification_logs (user_id, notification_type, channel, status, provider_id, sent_at)
            values ('\(Fixture.userID(1))', 'weekly_digest', 'email', 'sent', 'em-burst', '2026-03-22T20:01:00Z');
            """)
        let web = try await WebhookServer.start(database)
        defer { web.server.cancel() }
        let secret = try ResendWebhookSecret(webhookSecretText)
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nudge-burst-\(UUID())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let body = event("email.opened", email: "em-burst", to: "user1@example.test")
        try Data(body.utf8).write(to: folder.appendingPathComponent("event.json"))
        let timestamp = String(Int(Date().timeIntervalSince1970))
        var config = ""
        for n in 1...500 {
            let id = "msg_burst_\(n)"
            let signature = ResendWebhook.signature(id: id, timestamp: timestamp, body: Array(body.utf8), secret: secret)
            config += """
                url = "\(web.base + ResendWebhook.path)"
                request = "POST"
                header = "Content-Type: application/json"
                header = "svix-id: \(id)"
                header = "svix-timestamp: \(timestamp)"
                header = "svix-signature: \(signature)"
                data-binary = "@\(folder.appendingPathComponent("event.json").path)"
                output = "/dev/null"
                write-out = "%{http_code} %{errormsg}\\n"
                max-time = 30
                \(n < 500 ? "next" : "")

                """
        }
        try Data(config.utf8).write(to: folder.appendingPathComponent("burst.curl"))
        async let burst = runProcessOffThePool(
            "/usr/bin/curl",
            [
                "-s", "-Z", "--parallel-max", "48", "-K",
                folder.appendingPathComponent("burst.curl").path,
            ])
        // Meanwhile, the server's other requests answer: its database's health among them.
        var others: [String] = []
        for _ in 0..<5 {
            let health = try await runProcessOffThePool(
                "/usr/bin/curl",
                [
                    "-s", "-o", "/dev/null", "-w", "%{http_code}",
                    "--max-time", "10", web.health + "/health?db=1",
                ])
            others.append(health.stdout)
        }
        let lines = try await burst.stdout.split(separator: "\n").map(String.init)
        let answers = lines.map { String($0.prefix(3)) }
        let failures = Set(lines.filter { !$0.hasPrefix("200") && !$0.hasPrefix("503") })
        #expect(answers.count == 500)
        #expect(answers.allSatisfy { $0 == "200" || $0 == "503" }, "\(Dictionary(grouping: answers, by: { $0 }).mapValues(\.count)) \(failures)")
        #expect(others.allSatisfy { $0 == "200" }, "\(others)")
        #expect(try await database.count("select count(*) from email_events where email_id = 'em-burst'") == 1)
        #expect(try await database.value("select status from notification_logs where provider_id = 'em-burst'") == "opened")
    }

}
