import Foundation
import NudgeStandIns
import Synchronization
import Testing

@testable import NudgeCore

private func at(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }

@Suite(.serialized, .dropsItsDatabases) struct DigestDeliveryTests {
    /// The week of 16–22 March 2026, digested at Sunday 20:00 in London (20:00 UTC) and in Paris
    /// (19:00 UTC), then sent by dispatch to a loopback Resend.
    static let londonSunday = "2026-03-22T20:00:00Z"

    /// Resend receives each email with the fields and headers of its API, a valid RFC 8058 pair,
    /// HTML and text parts that say the same, the numbers of an independent SQL sum over the
    /// user's week in their zone; the French user's is in French.
    @Test func resendReceivesEachDigestWithItsFieldsHeadersAndTheWeeksNumbers() async throws {
        let database = try await TestDatabase.fresh()
        let stand = try await ResendStandIn.start()
        defer { Task { await stand.resend.shutdown() } }
        try await DigestFixture.user(database, 1, zone: "Europe/London", name: "Sam <Admin>")
        try await DigestFixture.user(database, 2, zone: "Europe/Paris", locale: "fr", name: "Léa")
        for n in 1...2 { try await DigestFixture.activity(database, n, from: "2026-02-01", to: "2026-03-22") }
        try await database.psql(
            """
            insert into fitcircles (id, name, challenge_type, timezone, starts_on, ends_on, challenge_step_goal)
            values ('00000000-0000-0000-0000-0000000000c1', 'Work Warriors', 'steps', 'Europe/London', '2026-03-01', '2026-04-30', 50000);
            insert into fitcircle_leaderboard_entries (fitcircle_id, user_id, period, period_start, metric_type, metric_value, rank)
            values ('00000000-0000-0000-0000-0000000000c1', '\(Fixture.userID(1))', 'weekly', '2026-03-16', 'steps', 1, 2);
            """)
        let queued = try await weeklyDigest(database, at: at(Self.londonSunday))
        #expect(queued.counts.succeeded == 2, "\(queued.failures)")

        let result = try await database.nudge(
            ["run", "dispatch", "--now", "2026-03-22T20:01:00Z"],
            environment: stand.environment)
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        let emails = stand.resend.sent
        #expect(emails.count == 2)
        // Both in one batch request, under the key its rows determine.
        #expect(stand.resend.requestCount == 1)
        // The batch's key, on its rows.
        let key = try await database.value("select distinct request_key from notification_outbox where channel = 'email'")
        #expect(key.hasPrefix("nudge-batch-"))
        let links = try UnsubscribeLinks(secret: digestSecret, publicURL: "https://nudge.example.test")
        for n in 1...2 {
            let id = Fixture.userID(n)
            let email = try #require(emails.first { $0.to == ["user\(n)@example.test"] })
            #expect(email.from == "FitCircle <coach@fitcircle.example>")
            #expect(email.userAgent?.hasPrefix("nudge/") == true)
            #expect(email.idempotencyKey == key)
            #expect(email.tags == ["email_type": "weekly_digest", "week_start": "2026-03-16"])
            // RFC 8058: an https URI in angle brackets, and the one-click pair.
            let header = try #require(email.headers["List-Unsubscribe"])
            #expect(header.hasPrefix("<https://nudge.example.test/unsubscribe?token=") && header.hasSuffix(">"))
            let token = String(header.dropFirst("<https://nudge.example.test/unsubscribe?token=".count).dropLast())
            #expect(links.verify(token)?.user.uuidString.lowercased() == id)
            #expect(links.verify(token)?.type == .weeklyDigest)
            #expect(email.headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click")

            // The week's numbers, summed independently over the user's local Monday to Sunday.
            let steps = try await database.count("select sum(steps) from daily_tracking where user_id = '\(id)' and date between '2026-03-16' and '2026-03-22'")
            let met = try await database.count(
                """
                select count(*) from daily_tracking t join daily_goals g on g.user_id = t.user_id and g.date = t.date and g.goal_type = 'steps'
                 where t.user_id = '\(id)' and t.date between '2026-03-16' and '2026-03-22' and t.steps >= g.target_value
                """)
            let copy = DigestCopy(locale: n == 2 ? "fr" : "en")
            let formatted = copy.number(steps)
            let percent = copy.number(steps * 100 / 50000) + (n == 2 ? "\u{00A0}%" : "%")
            let html = try #require(email.html)
            let text = try #require(email.text)
            for part in [html, text] {
                #expect(part.contains(formatted), "\(part)")
                #expect(part.contains(percent), "\(part)")
                #expect(part.contains(n == 2 ? "atteint \(met) jours sur 7" : "met \(met) of 7 days"), "\(part)")
                #expect(
                    part.contains(header.dropFirst().dropLast().replacingOccurrences(of: "&", with: "&amp;"))
                        || part.contains(header.dropFirst().dropLast()))
            }
            #expect(
                email.subject == (n == 2 ? "Ta semaine en bref : \(formatted) pas" : "Your Week in Review: \(formatted) steps")
                    || email.subject?.hasPrefix(n == 2 ? "Ta semaine en bref : \(formatted) pas, série de" : "Your Week in Review: \(formatted) steps, ")
                        == true,
                "\(email.subject ?? "")")
            if n == 1 {
                #expect(html.contains("Hi Sam &lt;Admin&gt;,"))   // the name is escaped in HTML…
                #expect(text.contains("Hi Sam <Admin>,"))   // …and plain in text
                #expect(html.contains("#2 in “Work Warriors”") && text.contains("#2 in \"Work Warriors\""))
            } else {
                #expect(html.contains("lang=\"fr\"") && text.contains("Voici comment s’est passée ta semaine"))
                #expect(formatted.contains("\u{202F}"))
            }
            #expect(!html.contains("<img"))
        }
        // Every email sent is in email_logs and notification_logs (channel email) with Resend's id.
        #expect(try await database.psql("select email_type, count(*) from email_logs group by 1") == "weekly_digest|2")
        #expect(
            try await database.psql(
                """
                select count(*) from notification_logs l join email_logs e on e.provider_id = l.provider_id
                 where l.channel = 'email' and l.status = 'sent' and l.provider = 'resend'
                """) == "2")
        #expect(Set(emails.map(\.id)) == Set(try await database.psql("select provider_id from email_logs").split(separator: "\n").map(String.init)))
        // The logs keep no copy of the parts or of the user's link.
        #expect(
            try await database.count("select count(*) from notification_logs where channel = 'email' and (body is not null or payload::text like '%token%')")
                == 0)
    }

    /// Four digests, through Resend's bad answers: a 429 with retry-after waits that long
    /// without spending an attempt and is no logged failure, and the batch is forgotten (nothing
    /// was sent); in a new batch, a 500 for the four of them (one request: not an outage) makes
    /// them wait, together, keeping that batch's key; half a minute later that batch goes as it
    /// was, under that key, and meets a 429, which proves nothing of the first request: the batch
    /// keeps its key; sent as it was once more, Resend refuses one email (422) and takes the
    /// others: the refused one fails alone, with Resend's words.
    @Test func a429A500AndA422EachEndAsDescribed() async throws {
        let database = try await TestDatabase.fresh()
        // Each batch by the order its key first came in.
        let keys = Mutex<[String]>([])
        let stand = try await ResendStandIn.start { email in
            let batch = keys.withLock { keys -> Int in
                let key = email.idempotencyKey ?? ""
                if let known = keys.firstIndex(of: key) { return known }
                keys.append(key)
                return keys.count - 1
            }
            switch (batch, email.attempt) {
            case (0, _):
                return .reject(
                    status: 429, name: "rate_limit_exceeded", message: "Too many requests.",
                    headers: [("retry-after", "7"), ("ratelimit-reset", "30")])
            case (_, 1): return .reject(status: 500, name: "internal_server_error", message: "An unexpected error occurred.")
            case (_, 2):
                return .reject(
                    status: 429, name: "rate_limit_exceeded", message: "Too many requests.",
                    headers: [("retry-after", "5")])
            default:
                return email.to == ["user3@example.test"] ? .reject(status: 422, name: "validation_error", message: "Invalid `to` field.") : .accept
            }
        }
        defer { Task { await stand.resend.shutdown() } }
        for n in 1...4 {
            try await DigestFixture.user(database, n, zone: "Europe/London")
            try await DigestFixture.activity(database, n, from: "2026-03-01", to: "2026-03-22")
        }
        _ = try await weeklyDigest(database, at: at(Self.londonSunday))
        try await database.psql("delete from notification_outbox where channel = 'push'")
        func run(at now: String) async throws -> String {
            let result = try await database.nudge(["run", "dispatch", "--now", now], environment: stand.environment)
            #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
            return try await database.psql(
                """
                select distinct status || ' ' || attempts || ' ' || coalesce(waiting_for, '-') || ' '
                       || case when next_attempt_at = 'infinity' then '-'
                               else extract(epoch from next_attempt_at - '\(now)')::int::text end
                       || ' ' || coalesce(split_part(last_error, ':', 1), '') from notification_outbox
                """)
        }
        #expect(try await run(at: "2026-03-22T20:00:30Z") == "pending 0 - 7 Resend 429 rate_limit_exceeded")
        #expect(try await database.count("select count(*) from notification_logs where status = 'failed'") == 0)
        #expect(try await database.count("select count(*) from notification_outbox where request_key is not null or request_left_at is not null") == 0)
        // A minute on, the four get a 500 in one request: one answer, not an outage of Resend's,
        // so they wait together (one jitter for their request) between 15 and 30 seconds, no
        // attempt spent, the key kept.
        let down = try await run(at: "2026-03-22T20:01:31Z")
        let wait = down.split(separator: " ").dropFirst(3).first.flatMap { Int($0) }
        #expect(
            down.hasPrefix("pending 0 - ") && down.hasSuffix(" Resend 500 internal_server_error") && (15...30).contains(wait ?? 0),
            "\(down)")
        #expect(try await database.count("select count(distinct request_key) from notification_outbox where request_left_at is not null") == 1)
        let key = try await database.value("select distinct request_key from notification_outbox")
        _ = try await run(at: "2026-03-22T20:02:05Z")
        #expect(try await database.psql("select distinct request_key from notification_outbox") == key)
        for now in ["2026-03-22T20:02:40Z", "2026-03-22T20:03:40Z", "2026-03-22T20:04:40Z"]
        where try await database.count("select count(*) from notification_outbox where status = 'pending'") > 0 {
            _ = try await run(at: now)
        }
        #expect(try await database.psql("select status, count(*) from notification_outbox group by 1 order by 1") == "failed|1\nsent|3")
        #expect(try await database.psql("select distinct request_key from notification_outbox") == key)
        #expect(
            try await database.value("select last_error from notification_outbox where status = 'failed'")
                == "Resend refused it in its batch: Invalid `to` field.")
        // Two keys: the batch Resend refused whole, and the one that left after it, which every
        // later request sent as it was (the probe's, its retry, the fourth row's once woken), and
        // Resend answered from the key without sending anything twice.
        #expect(Set(stand.resend.requests.compactMap(\.idempotencyKey)).count == 2)
        #expect(stand.resend.sent.count == 3)
        #expect(try await database.count("select count(*) from email_logs") == 3)
        #expect(try await database.psql("select provider, state from provider_health where provider = 'resend'") == "resend|up")
    }

    /// The digest emails alone, through a dispatcher (as cron starts it, at 20:00:30) killed (-9)
    /// once Resend's stand-in took `count` emails and before it answered them.
    static func killDispatchOnceResendTook(_ count: Int, _ database: TestDatabase, _ stand: ResendStandIn) async throws {
        try await database.psql("delete from notification_outbox where channel = 'push'")
        var environment = stand.environment
        environment["NUDGE_PUSH_TIMEOUT_SECONDS"] = "60"
        let dispatcher = try database.startNudge(["run", "dispatch", "--now", "2026-03-22T20:00:30Z"], environment: environment)
        try await dispatcher.reaches("\(count) emails at Resend", on: stand.resend.changes) { stand.resend.sent.count == count }
        dispatcher.signal(SIGKILL)
        _ = await dispatcher.finished()
    }

    /// dispatch killed (-9) after Resend took the email and before it recorded it: the next
    /// dispatcher, once the claim's lease has run out, asks again with the same idempotency key,
    /// and Resend sends nothing twice.
    @Test func aKillBetweenSendingAndRecordingSendsNoSecondEmail() async throws {
        let database = try await TestDatabase.fresh()
        let stand = try await ResendStandIn.start { email in email.attempt == 1 ? .acceptSilently : .accept }
        defer { Task { await stand.resend.shutdown() } }
        try await DigestFixture.user(database, 1, zone: "Europe/London")
        try await DigestFixture.activity(database, 1, from: "2026-03-01", to: "2026-03-22")
        _ = try await weeklyDigest(database, at: at(Self.londonSunday))
        try await Self.killDispatchOnceResendTook(1, database, stand)
        #expect(try await database.value("select status from notification_outbox") == "sending")
        // The lease runs out (as it would after its minutes).
        try await database.psql(
            """
            update notification_outbox set lease_until = now() - interval '1 second';
            update dispatch_leases set leased_until = now() - interval '1 second';
            """)
        let rerun = try await database.nudge(["run", "dispatch", "--now", "2026-03-22T20:05:00Z"], environment: stand.environment)
        #expect(rerun.status == 0, "\(rerun.stdout)\n\(rerun.stderr)")
        #expect(stand.resend.sent.count == 1)
        #expect(stand.resend.requests.count == 2)
        #expect(Set(stand.resend.requests.compactMap(\.idempotencyKey)).count == 1)
        #expect(try await database.value("select status || ' ' || attempts from notification_outbox") == "sent 2")
        #expect(try await database.value("select provider_id from email_logs") == stand.resend.sent[0].id)
    }

    /// A batch whose answer was lost (the dispatcher killed) goes again only as it was, even
    /// when its rows are claimed apart: each claim sends the whole batch under its key, Resend
    /// answers it again, and every email is sent once, its log naming the id Resend gave it.
    @Test func aBatchClaimedApartGoesAgainAsItWas() async throws {
        let database = try await TestDatabase.fresh()
        let stand = try await ResendStandIn.start { email in email.attempt == 1 ? .acceptSilently : .accept }
        defer { Task { await stand.resend.shutdown() } }
        for n in 1...3 {
            try await DigestFixture.user(database, n, zone: "Europe/London")
            try await DigestFixture.activity(database, n, from: "2026-03-01", to: "2026-03-22")
        }
        _ = try await weeklyDigest(database, at: at(Self.londonSunday))
        try await Self.killDispatchOnceResendTook(3, database, stand)
        #expect(stand.resend.requestCount == 1)
        #expect(try await database.count("select count(distinct request_key) from notification_outbox where request_to like 'user%'") == 1)
        // The leases run out; the third user's row is due only later, so the first claim holds two.
        try await database.psql(
            """
            update notification_outbox set lease_until = now() - interval '1 second';
            update dispatch_leases set leased_until = now() - interval '1 second';
            update notification_outbox set status = 'pending', claimed_by = null, lease_until = null,
                   next_attempt_at = '2026-03-22T21:00:00Z'
             where user_id = '\(Fixture.userID(3))';
            """)
        for now in ["2026-03-22T20:05:00Z", "2026-03-22T21:00:30Z"] {
            let rerun = try await database.nudge(["run", "dispatch", "--now", now], environment: stand.environment)
            #expect(rerun.status == 0, "\(rerun.stdout)\n\(rerun.stderr)")
        }
        #expect(try await database.psql("select status, count(*) from notification_outbox group by 1") == "sent|3")
        #expect(stand.resend.sent.count == 3)
        #expect(stand.resend.requestCount == 3)
        #expect(Set(stand.resend.requests.compactMap(\.idempotencyKey)).count == 1)
        let logged = try await database.psql("select provider_id from email_logs order by provider_id")
        #expect(logged == stand.resend.sent.map(\.id).sorted().joined(separator: "\n"))
    }

    /// POSTing the List-Unsubscribe URL as a mail client does turns the digest email off (200,
    /// twice); a forged token gets 400 and changes nothing; the page asks before it acts. The
    /// next Sunday queues the push and no email.
    @Test func oneClickUnsubscribeStopsNextSundaysEmailAndKeepsThePush() async throws {
        let database = try await TestDatabase.fresh()
        let stand = try await ResendStandIn.start()
        defer { Task { await stand.resend.shutdown() } }
        try await DigestFixture.user(database, 1, zone: "Europe/London")
        try await DigestFixture.user(database, 2, zone: "Europe/London")
        for n in 1...2 { try await DigestFixture.activity(database, n, from: "2026-03-01", to: "2026-03-29") }

        let port = Latch<Int>()
        let server = Task {
            try await database.withDatabase { db in
                try await NudgeServer.run(
                    database: db, links: try UnsubscribeLinks(secret: digestSecret, publicURL: "https://unused.test"), twilioAuthToken: nil,
                    host: "127.0.0.1", port: 0, logger: db.logger
                ) { bound in port.set(bound) }
            }
        }
        defer { server.cancel() }
        let base = "http://127.0.0.1:\(try await port.value("nudge serve's port"))"

        _ = try await weeklyDigest(database, at: at(Self.londonSunday), publicURL: base)
        let sent = try await database.nudge(["run", "dispatch", "--now", "2026-03-22T20:01:00Z"], environment: stand.environment)
        #expect(sent.status == 0, "\(sent.stderr)")
        let email = try #require(stand.resend.sent.first { $0.to == ["user1@example.test"] })
        let url = String(try #require(email.headers["List-Unsubscribe"]).dropFirst().dropLast())
        #expect(url.hasPrefix(base + "/unsubscribe?token="))

        func curl(_ arguments: [String]) async throws -> (status: String, body: String) {
            let result = try await runProcessOffThePool("/usr/bin/curl", ["-s", "-w", "\n%{http_code}", "--max-time", "10"] + arguments)
            let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
            return (String(lines.last ?? ""), lines.dropLast().joined(separator: "\n"))
        }
        let before = try await database.dump()
        let forged = url.dropLast(3) + (url.hasSuffix("AAA") ? "BBB" : "AAA")
        #expect(try await curl(["-X", "POST", "-d", "List-Unsubscribe=One-Click", String(forged)]).status == "400")
        #expect(try await curl(["-X", "POST", "-d", "List-Unsubscribe=One-Click", base + "/unsubscribe?token=nonsense"]).status == "400")
        #expect(try await curl([url]).status == "200")   // the page: nothing changes until its button is pressed
        #expect(try await curl([url]).body.contains("<form method=\"post\""))
        #expect(try await database.dump() == before)

        let oneClick = try await curl(["-X", "POST", "-H", "Content-Type: application/x-www-form-urlencoded", "-d", "List-Unsubscribe=One-Click", url])
        #expect(oneClick.status == "200", "\(oneClick.body)")
        #expect(try await curl(["-X", "POST", "-d", "List-Unsubscribe=One-Click", url]).status == "200")   // idempotent
        #expect(try await database.psql("select weekly_digest from email_preferences where user_id = '\(Fixture.userID(1))'") == "f")
        #expect(
            try await database.psql("select email_weekly_digest, push_weekly_digest from notification_preferences where user_id = '\(Fixture.userID(1))'")
                == "f|t")
        #expect(try await curl([base + "/health"]).status == "200")

        _ = try await weeklyDigest(database, at: at("2026-03-29T19:00:00Z"), publicURL: base)
        #expect(
            try await database.psql(
                """
                select user_id = '\(Fixture.userID(1))', channel from notification_outbox where local_day = '2026-03-29' order by 1, 2
                """) == "f|email\nf|push\nt|push")
        #expect(
            try await database.value("select detail from job_work where user_id = '\(Fixture.userID(1))' and local_day = '2026-03-29'")
                == "push, email: unsubscribed")
        let next = try await database.nudge(["run", "dispatch", "--now", "2026-03-29T19:01:00Z"], environment: stand.environment)
        #expect(next.status == 0)
        #expect(stand.resend.sent.filter { $0.to == ["user1@example.test"] }.count == 1)
        #expect(stand.resend.sent.filter { $0.to == ["user2@example.test"] }.count == 2)
    }

    /// The unsubscribe page in a real browser (Debian's headless Chromium): it renders its
    /// heading, its words and its blue button, and the button's form posts to the link itself.
    @Test func theUnsubscribePageWorksInAHeadlessBrowser() async throws {
        let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let chromium else {
            Issue.record("chromium is missing: scripts/test installs Debian's chromium package")
            return
        }
        let database = try await TestDatabase.fresh()
        try await DigestFixture.user(database, 1, zone: "Europe/London")
        // The page's button posts to NUDGE_PUBLIC_URL: here, the server itself, on a port picked first.
        let free = try await runProcessOffThePool(
            "/usr/bin/python3", ["-c", "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"])
        let chosen = try #require(Int(free.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
        let port = Latch<Int>()
        let server = Task {
            try await database.withDatabase { db in
                let links = try UnsubscribeLinks(secret: digestSecret, publicURL: "http://127.0.0.1:\(chosen)")
                try await NudgeServer.run(database: db, links: links, twilioAuthToken: nil, host: "127.0.0.1", port: chosen, logger: db.logger) { bound in
                    port.set(bound)
                }
            }
        }
        defer { server.cancel() }
        let base = "http://127.0.0.1:\(try await port.value("nudge serve's port"))"
        let link = try UnsubscribeLinks(secret: digestSecret, publicURL: base).url(user: UUID(uuidString: Fixture.userID(1))!, type: .weeklyDigest)
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nudge-browser-\(UUID())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let screenshot = folder.appendingPathComponent("unsubscribe.png").path
        let flags = ["--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=\(folder.path)/profile", "--window-size=600,500"]
        let shot = try await runProcessOffThePool("/usr/bin/timeout", ["60", chromium] + flags + ["--screenshot=\(screenshot)", link])
        #expect(FileManager.default.fileExists(atPath: screenshot), "\(shot.stderr)")
        // Width, height, then pixels of the button's blue, the text's ink, the card's white.
        let colours = try await runProcessOffThePool(
            "/usr/bin/python3",
            [
                packageRoot.appendingPathComponent("Tests/Fixtures/png-colours.py").path, screenshot,
                "2563eb", "1f2933", "ffffff",
            ])
        let numbers = colours.stdout.split(separator: " ").compactMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        #expect(numbers.count == 5, "\(colours.stdout)\(colours.stderr)")
        if numbers.count == 5 {
            #expect(numbers[0] == 600 && numbers[1] == 500)
            #expect(numbers[2] > 2_000, "the button")
            #expect(numbers[3] > 300, "the words")
            #expect(numbers[4] > 100_000, "the card")
        }
        let dom = try await runProcessOffThePool("/usr/bin/timeout", ["60", chromium] + flags + ["--dump-dom", link])
        #expect(dom.stdout.contains("<form method=\"post\" action=\"\(link.replacingOccurrences(of: "&", with: "&amp;"))\">"), "\(dom.stdout)")
        #expect(dom.stdout.contains("weekly digest emails"))
        // Looking changed nothing.
        #expect(try await database.count("select count(*) from email_preferences") == 0)
    }

    /// A dry run renders every email and push (with --json, per user) and queues or sends nothing.
    @Test func aDryRunRendersEveryDigestAndChangesNothing() async throws {
        let database = try await TestDatabase.fresh()
        try await DigestFixture.user(database, 1, zone: "Europe/London")
        try await DigestFixture.user(database, 2, zone: "Europe/Paris", locale: "fr")
        for n in 1...2 { try await DigestFixture.activity(database, n, from: "2026-03-01", to: "2026-03-22") }
        let before = try await database.dump(excluding: ["job_runs", "job_run_failures"])
        let dry = try await database.nudge(
            ["run", "weekly-digest", "--dry-run", "--json", "--now", Self.londonSunday],
            environment: digestEnvironment())
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(try await database.dump(excluding: ["job_runs", "job_run_failures"]) == before)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(dry.stdout.utf8)) as? [String: Any], "\(dry.stdout)")
        let decisions = try #require(object["decisions"] as? [[String: Any]])
        let lines = decisions.flatMap { ($0["notifications"] as? [String]) ?? [] }
        #expect(lines.contains { $0.hasPrefix("weekly_digest (email) after") && $0.contains("Your Week in Review") })
        #expect(lines.contains { $0.hasPrefix("weekly_digest (email) after") && $0.contains("Ta semaine en bref") })
        #expect(lines.filter { $0.hasPrefix("weekly_digest after") && $0.contains("📅") }.count == 2)
        let tally = try #require((object["summary"] as? [String: Any])?["tally"] as? [String: Int], "\(object.keys)")
        #expect(tally["queued:email"] == 2 && tally["queued:push"] == 2)
        // Without its secret the job refuses to start: no email goes out without a working link.
        let unconfigured = try await database.nudge(["run", "weekly-digest", "--dry-run", "--now", Self.londonSunday])
        #expect(unconfigured.status == 1)
        #expect(unconfigured.stderr.contains("NUDGE_UNSUBSCRIBE_SECRET"))
    }
}
