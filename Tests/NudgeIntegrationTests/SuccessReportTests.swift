import Foundation
import Testing

@testable import NudgeCore

/// A seeded month: `nudge seed`'s history (two weeks of notifications with the apps' receipts,
/// the calls of the last two weeks and their previews), plus what Resend tells back (emails
/// with their bounces and opens) and users who turned every notification off.
private func seededMonth() async throws -> TestDatabase {
    try await SeededMonth.shared.copy()
}

/// The seeded month is made once per test process; each test works on a copy (the copy is the
/// test's, dropped after it; the month is no test's, and stays).
private actor SeededMonth {
    static let shared = SeededMonth()
    private var creation: Task<TestDatabase, any Error>?

    func copy() async throws -> TestDatabase {
        let creation = self.creation ?? Task { try await MadeDatabases.$current.withValue(nil) { try await makeSeededMonth() } }
        self.creation = creation
        return try await creation.value.clone()
    }
}

private func makeSeededMonth() async throws -> TestDatabase {
    let database = try await TestDatabase.fresh()
    let seeded = try await database.nudge(["seed", "--users", "300", "--seed", "27", "--now", "2026-03-18T12:00:00Z"])
    #expect(seeded.status == 0, "\(seeded.stderr)")
    try await database.psql(
        """
        -- Emails of the last two weeks as dispatch logs them, some bounced, some opened.
        insert into notification_logs (user_id, notification_type, type, channel, status, provider_id, sent_at, delivered, delivered_at,
                                       opened, opened_at, bounced_at, bounce_type, created_at)
        select u.id, t.type, t.type, 'email',
               case when b then 'failed' when o then 'opened' else 'delivered' end,
               'em-' || md5(u.id::text || t.type || d), s, not b, case when not b then s + interval '5 seconds' end,
               o, case when o then s + interval '2 hours' end, case when b then s + interval '1 minute' end,
               case when b then 'Permanent/General' end, s
          from users u
         cross join (values ('weekly_digest'), ('streak_at_risk')) t(type)
         cross join generate_series(0, 13) d
         cross join lateral (select timestamptz '2026-03-04T18:00:00Z' + d * interval '1 day'
                                    + (abs(hashtext(u.id::text || d)) % 300) * interval '1 minute' as s,
                                    abs(hashtext(u.id::text || t.type || d)) % 100 < 2 as b,
                                    abs(hashtext(u.id::text || t.type || d || 'o')) % 100 < 35 as o) x
         where abs(hashtext(u.id::text || t.type || d || 'e')) % 7 = 0;
        -- Calls whose preview did not go, for the baseline.
        update scheduled_calls set preview_sent = false where status in ('completed', 'missed') and abs(hashtext(id::text)) % 4 = 0;
        -- Users who signed up in the period turned everything off, some within 30 days.
        insert into notification_preferences (user_id, push_enabled, email_enabled, inapp_enabled)
        select id, false, false, false from users where abs(hashtext(id::text || 'off')) % 12 = 0
        on conflict (user_id) do update set push_enabled = false, email_enabled = false, inapp_enabled = false;
        update notification_preferences p set all_off_since = u.created_at + (abs(hashtext(u.id::text)) % 50) * interval '1 day'
          from users u where u.id = p.user_id and p.all_off_since is not null;
        """)
    return database
}

@Suite(.serialized, .dropsItsDatabases) struct SuccessReportTests {
    static let period = ["--from", "2026-03-04", "--to", "2026-03-17"]

    /// The contract for the apps: a push's delivery and open recorded on its rows by the
    /// notification id its payload carries; an open is a delivery; an unknown event is refused.
    @Test func theAppRecordsAPushsDeliveryAndOpen() async throws {
        let database = try await TestDatabase.fresh()
        try await Outbox.user(database, 1, zone: "UTC", locale: "en", ios: 2, signup: "2026-01-01T00:00:00Z")
        try await database.psql(
            """
            insert into notification_outbox (dedupe_key, job, user_id, local_day, notification_type, deliver_after, status, channel, sent_at,
                                             next_attempt_at)
            values ('a', 'dispatch', '\(Fixture.userID(1))', '2026-03-10', 'streak_risk', '2026-03-10T09:00:00Z', 'sent', 'push', '2026-03-10T09:00:00Z',
                    'infinity'),
                   ('b', 'dispatch', '\(Fixture.userID(1))', '2026-03-10', 'daily_checkin', '2026-03-10T09:00:00Z', 'sent', 'push', '2026-03-10T09:00:00Z',
                    'infinity');
            update notification_outbox set delivery_id = (select id from notification_outbox where dedupe_key = 'a');
            insert into notification_logs (user_id, notification_type, channel, status, sent_at, outbox_id, device_token_id)
            select o.user_id, o.notification_type, 'push', 'sent', o.sent_at, o.id, t.id
              from notification_outbox o cross join user_push_tokens t where t.user_id = o.user_id
            """)
        let lead = try await database.value("select id from notification_outbox where dedupe_key = 'a'")
        let token = try await database.value("select device_token from user_push_tokens order by created_at, id limit 1")
        let user = "'\(Fixture.userID(1))'"
        // Another user's receipt for this push (an app forwarding its clients' receipts), or one
        // dated before the push was sent: the first marks nothing, the second marks it as sent.
        try await Outbox.user(database, 2, zone: "UTC", locale: "en", ios: 1, signup: "2026-01-01T00:00:00Z")
        #expect(try await database.value("select nudge_push_receipt('\(Fixture.userID(2))', \(lead), 'opened', '2026-03-10T09:00:05Z')") == "0")
        #expect(try await database.count("select count(*) from notification_logs where delivered or opened") == 0)
        #expect(try await database.value("select nudge_push_receipt(\(user), \(lead), 'delivered', '2026-03-01T00:00:00Z', '\(token)')") == "2")
        #expect(
            try await database.psql("select distinct to_char(delivered_at at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS') from notification_logs where delivered")
                == "2026-03-10 09:00:00")
        try await database.psql("update notification_logs set delivered = false, delivered_at = null, status = 'sent'")
        #expect(try await database.value("select nudge_push_receipt(\(user), \(lead), 'delivered', '2026-03-10T09:00:02Z', '\(token)')") == "2")
        #expect(try await database.value("select nudge_push_receipt(\(user), \(lead), 'opened', '2026-03-10T09:20:00Z')") == "4")
        #expect(
            try await database.psql(
                """
                select status, delivered, to_char(delivered_at at time zone 'UTC', 'HH24:MI:SS'), to_char(opened_at at time zone 'UTC', 'HH24:MI')
                  from notification_logs order by 3
                """) == "opened|t|09:00:02|09:20\nopened|t|09:00:02|09:20\nopened|t|09:20:00|09:20\nopened|t|09:20:00|09:20")
        #expect(try await database.value("select nudge_push_receipt(\(user), \(lead), 'delivered', '2026-03-10T10:00:00Z')") == "4")
        #expect(try await database.value("select count(*) from notification_logs where status = 'opened'") == "4")
        #expect(try await database.value("select nudge_push_receipt(\(user), 999999, 'opened')") == "0")
        await #expect(throws: (any Error).self) { try await database.psql("select nudge_push_receipt(\(user), \(lead), 'clicked')") }
    }

    /// Every metric of `nudge report --json`, for the period, each day and each type and channel,
    /// equals the same figure computed here from the rows themselves; with days in UTC, in a zone
    /// whose clocks change inside the period (New York, on 8 March), and in one half an hour off
    /// the hour whose midnight falls among the emails' sending times (Kolkata, 18:30 UTC).
    @Test(arguments: ["UTC", "America/New_York", "Asia/Kolkata"])
    func everyMetricEqualsItsFigureFromTheRows(_ zone: String) async throws {
        let database = try await seededMonth()
        let report = try await database.nudge(["report", "--json", "--timezone", zone] + Self.period)
        #expect(report.status == 0, "\(report.stderr)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(report.stdout.utf8)) as? [String: Any])
        let metrics = try #require(json["metrics"] as? [[String: Any]])
        #expect(metrics.map { $0["id"] as? String } == SuccessMetrics.all.map(\.id))
        #expect(json["zone"] as? String == zone)
        let expected = try await Expected(database, zone: zone)
        for metric in metrics {
            let id = metric["id"] as! String
            let figures = try #require(expected.figures[id], "\(id)")
            func pair(_ object: [String: Any]) -> Pair { Pair(object["numerator"] as! Int, object["denominator"] as! Int) }
            #expect(pair(metric) == figures.period, "\(id): the period")
            #expect(figures.period.denominator > 0, "\(id) has no data")
            var days: [String: Pair] = [:]
            for day in metric["days"] as! [[String: Any]] where (day["denominator"] as! Int) > 0 { days[day["day"] as! String] = pair(day) }
            #expect(days == figures.days, "\(id): the days")
            var segments: [String: Pair] = [:]
            for segment in metric["segments"] as! [[String: Any]] {
                segments["\(segment["type"] as? String ?? "-")|\(segment["channel"] as? String ?? "-")"] = pair(segment)
            }
            #expect(segments == figures.segments, "\(id): the types and channels")
        }
        // The targets and whether they hold, as docs/report.md gives them.
        let openRate = try #require(metrics.first { $0["id"] as? String == "email_open_rate" })
        let streak = try #require((openRate["segments"] as! [[String: Any]]).first { $0["type"] as? String == "streak_at_risk" })
        #expect(streak["target"] as? String == "≥ 40 %")
        #expect(streak["holds"] as? Bool == ((streak["value"] as! Double) >= 0.40))
        guard zone == "UTC" else { return }

        let table = try await database.nudge(["report"] + Self.period)
        #expect(table.status == 0 && table.stdout.contains("Push delivery rate") && table.stdout.contains("≥ 95 %"), "\(table.stdout)")
        let listing = try await database.nudge(["report", "--sql"] + Self.period)
        #expect(listing.stdout.contains("'2026-03-04T00:00:00Z'::timestamptz") && listing.stdout.contains("-- opt_out_rate"))
    }

    @Test func badPeriodsAreUsageErrors() async throws {
        let database = try await TestDatabase.fresh()
        for (arguments, says) in [
            (["--from", "2026-03-10", "--to", "2026-03-01"], "is after --to"),
            (["--from", "2026-03-32"], "a real day"),
            (["--timezone", "Mars/Olympus"], "IANA zone"),
            (["--from", "2024-01-01", "--to", "2026-01-01"], "at most 366 days"),
        ] {
            let result = try await database.nudge(["report"] + arguments)
            #expect(result.status == 64 && result.stderr.contains(says), "\(arguments): \(result.status) \(result.stderr)")
        }
    }
    /// `--html` writes a page that opens in a browser (Debian's headless Chromium, the page served
    /// from loopback) with one chart per metric, and that makes no request: Chromium's network
    /// log has no request the page started (its icon is inline). (The same check sees a control
    /// page's image.)
    @Test func thePageHasAChartPerMetricAndFetchesNothing() async throws {
        let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let chromium else {
            Issue.record("chromium is missing: scripts/test installs Debian's chromium package")
            return
        }
        let database = try await seededMonth()
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nudge-report-\(UUID())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let written = try await database.nudge(
            [
                "report", "--html", folder.appendingPathComponent("report.html").path,
                "--now", "2026-03-18T12:00:00Z",
            ] + Self.period)
        #expect(written.status == 0, "\(written.stderr)")
        try Data(#"<!DOCTYPE html><html><body><img src="/pixel.png" alt=""></body></html>"#.utf8)
            .write(to: folder.appendingPathComponent("control.html"))
        // A file server on a port of its choosing, which it tells once it listens.
        let ready = try ReadyPipe(in: folder)
        let server = try RunningProcess(
            "/usr/bin/python3",
            [
                "-c",
                """
                import functools, http.server, sys
                files = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
                server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), files)
                with open(sys.argv[2], 'w') as ready: ready.write(str(server.server_address[1]) + '\\n')
                server.serve_forever()
                """,
                folder.path, ready.path,
            ],
            environment: ProcessInfo.processInfo.environment)
        // SIGKILL: the test process ignores SIGTERM, and a child inherits that.
        defer { server.signal(SIGKILL) }
        let origin = "http://127.0.0.1:\(try await ready.message("the page server's port", from: server))"

        /// The page's DOM, and the requests the page itself started (URL, as Chromium logged them).
        func open(_ page: String) async throws -> (dom: String, fromPage: [String]) {
            let netLog = folder.appendingPathComponent("\(page).net.json").path
            let flags = [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
                "--user-data-dir=\(folder.path)/profile-\(page)", "--log-net-log=\(netLog)", "--net-log-capture-mode=Everything",
            ]
            let dom = try await runProcessOffThePool("/usr/bin/timeout", ["60", chromium] + flags + ["--dump-dom", "\(origin)/\(page)"])
            #expect(dom.status == 0, "\(dom.stderr)")
            let log = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: netLog))) as? [String: Any])
            let types = ((log["constants"] as? [String: Any])?["logEventTypes"] as? [String: Int]) ?? [:]
            let start = try #require(types["URL_REQUEST_START_JOB"])
            let requests = (log["events"] as? [[String: Any]] ?? []).filter { $0["type"] as? Int == start }
                .compactMap { $0["params"] as? [String: Any] }
            return (dom.stdout, requests.filter { $0["initiator"] as? String == origin }.compactMap { $0["url"] as? String })
        }
        let control = try await open("control.html")
        #expect(control.fromPage.contains(origin + "/pixel.png"), "the network log does not show a page's requests: \(control.fromPage)")
        let report = try await open("report.html")
        #expect(report.fromPage == [], "\(report.fromPage)")
        #expect(report.dom.components(separatedBy: "<svg class=\"chart\"").count - 1 == SuccessMetrics.all.count)
        #expect(report.dom.components(separatedBy: "<polyline class=\"series\"").count - 1 >= 5)
        #expect(report.dom.contains("Push delivery rate"))
    }

    /// Each PostgreSQL panel of the dashboard `nudge grafana` writes, with Grafana's macros given
    /// the report's period and zone, returns the report's numbers: in UTC, and in New York
    /// across its clock change.
    @Test(arguments: [
        ("UTC", "2026-03-04T00:00:00Z", "2026-03-18T00:00:00Z"),
        // The same local days in New York: 05:00 UTC before its clocks change on 8 March, 04:00 after.
        ("America/New_York", "2026-03-04T05:00:00Z", "2026-03-18T04:00:00Z"),
    ])
    func eachGrafanaPanelReturnsTheReportsNumbers(_ zone: String, _ from: String, _ to: String) async throws {
        let database = try await seededMonth()
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nudge-grafana-\(UUID())")
        defer { try? FileManager.default.removeItem(at: folder) }
        let wrote = try await database.nudge(["grafana", "--output", folder.path])
        #expect(wrote.status == 0, "\(wrote.stderr)")
        let written = try String(contentsOfFile: folder.appendingPathComponent("nudge.json").path, encoding: .utf8)
        let report = try await database.nudge(["report", "--json", "--timezone", zone] + Self.period)
        let metrics = try #require(
            (try JSONSerialization.jsonObject(with: Data(report.stdout.utf8)) as? [String: Any])?["metrics"]
                as? [[String: Any]])
        let byID = Dictionary(uniqueKeysWithValues: metrics.map { ($0["id"] as! String, $0) })
        func percent(_ value: Any?) -> String {
            guard let value = value as? Double else { return "" }
            return String(format: "%.1f", (value * 1000).rounded() / 10)
        }
        let dashboard = try #require(try JSONSerialization.jsonObject(with: Data(written.utf8)) as? [String: Any])
        var checked = (stats: 0, series: 0, tables: 0)
        for panel in dashboard["panels"] as! [[String: Any]] {
            for target in panel["targets"] as? [[String: Any]] ?? [] {
                guard let sql = target["rawSql"] as? String else { continue }
                let query = sql.replacingOccurrences(of: "$__timeFrom()", with: "'\(from)'")
                    .replacingOccurrences(of: "$__timeTo()", with: "'\(to)'").replacingOccurrences(of: "$zone", with: zone)
                let rows = try await database.psql(query).split(separator: "\n").map {
                    $0.split(separator: "|", omittingEmptySubsequences: false).map(String.init)
                }
                guard let id = sql.matches(of: /as "([a-z_]+)"/).map({ String($0.1) }).first(where: { byID[$0] != nil }),
                    let metric = byID[id]
                else {
                    checked.tables += 1
                    continue
                }
                if panel["type"] as? String == "stat" {
                    #expect(
                        rows.count == 1 && rows[0] == [percent(metric["value"]), "\(metric["numerator"]!)", "\(metric["denominator"]!)"],
                        "\(id): \(rows)")
                    checked.stats += 1
                } else {
                    let days = (metric["days"] as! [[String: Any]]).filter { ($0["denominator"] as! Int) > 0 }
                    #expect(rows.map { String($0[0].prefix(10)) } == days.map { $0["day"] as! String }, "\(id)")
                    #expect(rows.map { $0[1] } == days.map { percent($0["value"]) }, "\(id)")
                    if let target = metric["target_value"] as? Double { #expect(rows.allSatisfy { $0[2] == String(format: "%.1f", target * 100) }) }
                    checked.series += 1
                }
            }
        }
        #expect(checked.stats == SuccessMetrics.all.count && checked.series == SuccessMetrics.all.count && checked.tables == 1, "\(checked)")
    }

}

private struct Pair: Equatable, CustomStringConvertible {
    let numerator: Int
    let denominator: Int
    init(_ numerator: Int, _ denominator: Int) {
        self.numerator = numerator
        self.denominator = denominator
    }
    var description: String { "\(numerator)/\(denominator)" }
}

/// Each metric's figures from the rows, counted here one by one (days in `zone`, PostgreSQL's
/// own conversion of each instant, the period 2026-03-04 through 2026-03-17).
private struct Expected {
    struct Figures {
        var period = Pair(0, 0)
        var days: [String: Pair] = [:]
        var segments: [String: Pair] = [:]
    }
    var figures: [String: Figures] = [:]

    init(_ database: TestDatabase, zone: String) async throws {
        func rows(_ sql: String) async throws -> [[String]] {
            try await database.psql(sql).split(separator: "\n")
                .map { $0.split(separator: "|", omittingEmptySubsequences: false).map(String.init) }
        }
        let inPeriod = { (day: String) in day >= "2026-03-04" && day <= "2026-03-17" }
        // One count per row: (day, segment, counts?) for each metric over those rows.
        func tally(_ id: String, _ items: [(day: String, segment: String?, counts: Bool)], users: [String]? = nil) {
            var figures = Figures()
            func add(_ pair: inout Pair, _ counts: Bool) { pair = Pair(pair.numerator + (counts ? 1 : 0), pair.denominator + 1) }
            if let users {
                // Distinct users: a user counts once per group, in the numerator if any row counts.
                func distinct(_ indices: [Int]) -> Pair {
                    var seen: [String: Bool] = [:]
                    for index in indices { seen[users[index], default: false] = seen[users[index], default: false] || items[index].counts }
                    return Pair(seen.values.filter { $0 }.count, seen.count)
                }
                figures.period = distinct(Array(items.indices))
                for day in Set(items.map(\.day)) { figures.days[day] = distinct(items.indices.filter { items[$0].day == day }) }
                for segment in Set(items.compactMap(\.segment)) {
                    figures.segments[segment] = distinct(items.indices.filter { items[$0].segment == segment })
                }
            } else {
                for item in items {
                    add(&figures.period, item.counts)
                    add(&figures.days[item.day, default: Pair(0, 0)], item.counts)
                    if let segment = item.segment { add(&figures.segments[segment, default: Pair(0, 0)], item.counts) }
                }
            }
            self.figures[id] = figures
        }
        // Calls: day, status, preview sent.
        let calls = try await rows("select to_char(scheduled_at at time zone '\(zone)', 'YYYY-MM-DD'), status, preview_sent from scheduled_calls")
            .filter { inPeriod($0[0]) && ["completed", "missed"].contains($0[1]) }
        tally("call_answer_rate", calls.filter { $0[2] == "t" }.map { ($0[0], nil, $0[1] == "completed") })
        tally("call_answer_rate_without_preview", calls.filter { $0[2] == "f" }.map { ($0[0], nil, $0[1] == "completed") })
        // Attempts sent: day, type, channel, user, delivered, opened, seconds to open, bounced.
        let logs = try await rows(
            """
            select to_char(sent_at at time zone '\(zone)', 'YYYY-MM-DD'), coalesce(notification_type, type), channel, user_id, delivered, opened,
                   coalesce(extract(epoch from opened_at - sent_at)::text, ''), bounced_at is not null, coalesce(call_id::text, ''),
                   to_char(sent_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US')
              from notification_logs where sent_at is not null
            """)
        let sent = logs.filter { inPeriod($0[0]) }
        func segment(_ row: [String]) -> String { "\(row[1])|\(row[2])" }
        tally("notification_open_rate", sent.filter { $0[4] == "t" && $0[2] != "sms" }.map { ($0[0], segment($0), $0[5] == "t") })
        let pushes = sent.filter { $0[2] == "push" }
        tally("push_delivery_rate", pushes.map { ($0[0], segment($0), $0[4] == "t") })
        tally("push_open_rate", pushes.map { ($0[0], segment($0), !$0[6].isEmpty && Double($0[6])! <= 3600) })
        let emails = sent.filter { $0[2] == "email" }
        tally("email_deliverability", emails.map { ($0[0], segment($0), $0[7] == "f") })
        tally("email_open_rate", emails.filter { $0[4] == "t" }.map { ($0[0], segment($0), $0[5] == "t") })
        tally("notification_driven_return", sent.map { ($0[0], segment($0), $0[5] == "t") }, users: sent.map { $0[3] })
        // Calls' previews: the first send of each call's preview rows, and whether a fallback SMS went.
        var firstSend: [String: (at: String, day: String)] = [:]
        var fellBack: Set<String> = []
        for row in logs where !row[8].isEmpty && ["preview_push", "preview_sms", "fallback_sms"].contains(row[1]) {
            if firstSend[row[8]].map({ row[9] < $0.at }) ?? true { firstSend[row[8]] = (row[9], row[0]) }
            if row[1] == "fallback_sms" { fellBack.insert(row[8]) }
        }
        tally("sms_fallback_rate", firstSend.filter { inPeriod($0.value.day) }.map { ($0.value.day, nil, fellBack.contains($0.key)) })
        // Sign-ups: day, push on with a device, everything off within 30 days.
        let users = try await rows(
            """
            select to_char(u.created_at at time zone '\(zone)', 'YYYY-MM-DD'),
                   coalesce(np.push_enabled, true) and exists (select 1 from push_tokens t where t.user_id = u.id),
                   coalesce(np.all_off_since < u.created_at + interval '30 days', false)
              from users u left join notification_preferences np on np.user_id = u.id
            """
        ).filter { inPeriod($0[0]) }
        tally("push_opt_in_rate", users.map { ($0[0], nil, $0[1] == "t") })
        tally("opt_out_rate", users.map { ($0[0], nil, $0[2] == "t") })
    }
}
