import Foundation
import Logging
import NudgeStandIns
import Synchronization
import Testing

@testable import NudgeCore

/// Runs preview-notifications in this process at `now`, as cron would start it that minute.
func previews(_ database: TestDatabase, at now: Date) async throws -> RunSummary {
    try await database.withDatabase { db in
        let job = PreviewNotificationsJob(definition: jobDefinition("preview-notifications"))
        let options = RunOptions(now: now, nowIsExplicit: true, batchSize: 50, concurrency: 1)
        return try await JobRunner(job: job, options: options, database: db, observer: SilentObserver()).run()
    }
}

/// Runs preview-notifications in this process at `now`, writing nothing.
func previewsDryRun(_ database: TestDatabase, at now: Date) async throws -> RunSummary {
    try await database.withDatabase { db in
        let job = PreviewNotificationsJob(definition: jobDefinition("preview-notifications"))
        let options = RunOptions(now: now, nowIsExplicit: true, batchSize: 50, concurrency: 1, dryRun: true)
        return try await JobRunner(job: job, options: options, database: db, observer: SilentObserver()).run()
    }
}

/// Coaches, users with their channels and streaks, and their calls, inserted with SQL.
enum Calls {
    static let coaches = ["Coach Max", "Dr. Luna", "Mama Rosa"]

    static func coachID(_ name: String) -> String {
        Fixture.userID(1_000 + coaches.firstIndex(of: name)!)
    }

    static func coaches(_ database: TestDatabase) async throws {
        try await database.psql(coaches.map { "insert into coach_personas (id, name) values ('\(coachID($0))', '\($0)');" }.joined())
    }

    static func phone(_ n: Int) -> String { "+1555010\(String(format: "%04d", n))" }

    /// User n: `ios` iPhones, `android` Android phones, a `legacy` users.fcm_token, a phone number
    /// unless `phone` is false; on day `streak` of their streak (the app's row: the days before).
    static func user(
        _ database: TestDatabase, _ n: Int, locale: String = "en", coach: String? = "Coach Max",
        preference: String = "push_only", lead: Int = 5, ios: Int = 1, android: Int = 0, legacy: Bool = false,
        phone: Bool = true, streak: Int = 0
    ) async throws {
        try await Outbox.user(database, n, zone: "Europe/Paris", locale: locale, ios: ios, android: android)
        let id = Fixture.userID(n)
        try await database.psql(
            """
            update users set coach_persona_id = \(coach.map { "'\(coachID($0))'" } ?? "null"),
                   phone_number = \(phone ? "'\(Self.phone(n))'" : "null"), notification_pref = '\(preference)',
                   notification_lead_min = \(lead), fcm_token = \(legacy ? "'\(legacyToken(n))'" : "null")
             where id = '\(id)';
            insert into user_streaks (user_id, current_streak, longest_streak) values ('\(id)', \(max(0, streak - 1)), \(max(0, streak - 1)));
            """)
    }

    static func legacyToken(_ n: Int) -> String { "legacy-\(n):APA91b" + String(repeating: "y", count: 40) }

    /// A call for user n at `at`; its id.
    @discardableResult
    static func call(
        _ database: TestDatabase, _ n: Int, at: String, topic: String? = "fitness_checkin",
        status: String = "pending"
    ) async throws -> String {
        try await database.value(
            """
            insert into scheduled_calls (user_id, scheduled_at, status, topic)
            values ('\(Fixture.userID(n))', '\(at)', '\(status)', \(topic.map { "'\($0)'" } ?? "null")) returning id
            """)
    }
}

/// Loopback APNs, FCM and Twilio, and the environment that points dispatch at them.
struct PreviewWorld: Sendable {
    let database: TestDatabase
    let push: PushStandIns
    let twilio: StandInTwilio
    /// Users whose app reports each push delivered two seconds after it was sent.
    let confirming: Set<Int>

    static func start(
        confirming: Set<Int> = [], apns: @escaping StandInAPNs.Script = { _ in .accept },
        fcm: @escaping StandInFCM.Script = { _ in .accept }, twilioLatency: Duration = .zero,
        twilioListing: @escaping @Sendable () -> StandInTwilio.Answer = { .accept },
        twilioAccount: @escaping @Sendable () -> StandInTwilio.Answer = { .accept },
        twilio script: @escaping StandInTwilio.Script = { _ in .accept }
    ) async throws -> PreviewWorld {
        let database = try await TestDatabase.fresh()
        try await Calls.coaches(database)
        return PreviewWorld(
            database: database, push: try await PushStandIns.start(apns: apns, fcm: fcm),
            twilio: try await StandInTwilio.start(
                latency: twilioLatency, listing: twilioListing,
                account: twilioAccount, script: script),
            confirming: confirming)
    }

    var environment: [String: String] {
        push.environment.merging([
            // The jobs send with an API key: the auth token is serve's alone, for signatures.
            "TWILIO_ACCOUNT_SID": twilio.accountSID, "TWILIO_API_KEY_SID": twilio.apiKeySID, "TWILIO_API_KEY_SECRET": twilio.apiKeySecret,
            "TWILIO_FROM": "+15005550006",
            "TWILIO_BASE_URL": twilio.baseURL, "NUDGE_PUBLIC_URL": "http://127.0.0.1:9",
        ]) { _, new in new }
    }

    func shutdown() async {
        await push.shutdown()
        await twilio.shutdown()
    }

    /// Cron's minutes from `start`: preview-notifications a second into each, and dispatch as its
    /// draining loop runs: two seconds into the minute, then whenever something falls due within
    /// it (half a second after, for the time a wake-up takes), until 55 seconds in.
    func simulate(
        from start: Date, minutes: Int, environment extra: [String: String] = [:],
        between: (Date) async throws -> Void = { _ in }
    ) async throws {
        let environment = self.environment.merging(extra) { _, new in new }
        for minute in 0..<minutes {
            let top = start.addingTimeInterval(Double(minute) * 60)
            try await between(top)
            _ = try await previews(database, at: top.addingTimeInterval(1))
            var now = top.addingTimeInterval(2)
            while now < top.addingTimeInterval(55) {
                _ = try await dispatch(database, environment: environment, at: now)
                if ProcessInfo.processInfo.environment["NUDGE_DEBUG_SIM"] != nil {
                    print(
                        "DEBUG \(now): "
                            + (try await database.psql(
                                "select notification_type, status, deliver_after, next_attempt_at, last_error from notification_outbox order by id")))
                }
                try await confirm()
                // (What a run moved to its own instant, a fallback after a failed push, is due at once.)
                let next = try await database.value(
                    """
                    select coalesce(min(coalesce(next_attempt_at, deliver_after)), 'infinity')::text from notification_outbox
                     where status = 'pending'
                    """)
                guard
                    let due = try? Date(
                        next.replacingOccurrences(of: " ", with: "T") + (next.contains("+") ? "" : "Z"),
                        strategy: .iso8601)
                else { break }
                now = max(now.addingTimeInterval(0.5), due.addingTimeInterval(0.5))
            }
        }
    }

    /// The app of each confirming user reports its pushes delivered, two seconds after they went.
    func confirm() async throws {
        guard !confirming.isEmpty else { return }
        let ids = confirming.map { "'\(Fixture.userID($0))'" }.joined(separator: ",")
        try await database.psql(
            """
            update notification_logs set delivered_at = sent_at + interval '2 seconds', delivered = true, status = 'delivered'
             where channel = 'push' and status = 'sent' and user_id in (\(ids))
            """)
    }

    /// Per call: each preview sent, `type channel seconds-after-due title|body`, in the order sent.
    func sent(_ call: String) async throws -> [String] {
        try await database.psql(
            """
            select l.type || ' ' || l.channel || ' ' || round(extract(epoch from l.sent_at - (c.scheduled_at - u.notification_lead_min * interval '1 minute'))::numeric, 1)
                   || ' ' || coalesce(l.title, '') || '|' || coalesce(l.body, '')
              from notification_logs l join scheduled_calls c on c.id = l.call_id join users u on u.id = c.user_id
             where l.call_id = '\(call)' and l.status in ('sent', 'delivered')
             order by l.sent_at, l.type
            """
        ).split(separator: "\n").map(String.init)
    }

    func seconds(_ line: String) -> Double { Double(line.split(separator: " ")[2]) ?? .infinity }

    /// `nudge serve` in this process on a free loopback port, checking Twilio's signatures: its
    /// address (NUDGE_PUBLIC_URL for the SMS), once it listens, and its task (cancel to stop it).
    /// The port is chosen before the server binds it (the address goes into what it signs), so
    /// another process may take it first: then another port is tried.
    func serve() async throws -> (base: String, server: Task<Void, any Error>) {
        var failures: [String] = []
        for _ in 1...3 {
            let free = try await runProcessOffThePool(
                "/usr/bin/python3", ["-c", "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"])
            let chosen = try #require(Int(free.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
            let base = "http://127.0.0.1:\(chosen)"
            let token = twilio.authToken
            let database = self.database
            // The port it listens on, or why it stopped.
            let state = Latch<Result<Int, TestFailure>>()
            let server = Task {
                do {
                    try await database.withDatabase { db in
                        try await NudgeServer.run(
                            database: db, links: try UnsubscribeLinks(secret: digestSecret, publicURL: base),
                            twilioAuthToken: token, host: "127.0.0.1", port: chosen, logger: db.logger
                        ) { bound in
                            state.set(.success(bound))
                        }
                    }
                } catch {
                    state.set(.failure(TestFailure("\(error)")))
                    throw error
                }
            }
            switch try await state.value("nudge serve to listen on \(chosen), or to stop") {
            case .success: return (base, server)
            case .failure(let failure):
                server.cancel()
                failures.append(failure.description)
            }
        }
        throw TestFailure("nudge serve did not start listening: \(failures.joined(separator: "; "))")
    }
}

private func at(_ text: String) -> Date { try! Date(text, strategy: .iso8601) }

@Suite(.serialized, .dropsItsDatabases) struct PreviewNotificationTests {
    /// Calls over the next hour, on every path, in both languages, with the job and dispatch
    /// every simulated minute: each preview queued once, sent within 30 s of scheduled_at − lead,
    /// on its path, with the coach's name, the streak day and the topic in the user's language.
    @Test func eachCallOfTheHourGetsOnePreviewOnTimeOnItsPath() async throws {
        let world = try await PreviewWorld.start(confirming: [5])
        defer { Task { await world.shutdown() } }
        let database = world.database
        try await Calls.user(database, 1, coach: "Coach Max", streak: 12)
        try await Calls.user(database, 2, locale: "fr", coach: "Mama Rosa", lead: 10, ios: 0, android: 1, streak: 7)
        try await Calls.user(database, 3, coach: "Dr. Luna", preference: "sms_only", streak: 21)
        try await Calls.user(database, 4, locale: "fr", coach: "Coach Max", preference: "push_and_sms", lead: 15, streak: 3)
        try await Calls.user(database, 5, coach: "Dr. Luna", preference: "push_and_sms", streak: 0)
        try await Calls.user(database, 6, coach: nil, ios: 0, streak: 40)
        try await Calls.user(database, 7, locale: "fr", coach: "Mama Rosa", lead: 2, ios: 0, legacy: true, streak: 14)
        let calls = await [
            1: try Calls.call(database, 1, at: "2026-03-29T06:20:00Z", topic: "fitness_checkin"),
            2: try Calls.call(database, 2, at: "2026-03-29T06:33:30Z", topic: "weekly_weighin"),
            3: try Calls.call(database, 3, at: "2026-03-29T06:41:00Z", topic: "mood_check"),
            4: try Calls.call(database, 4, at: "2026-03-29T06:50:00Z", topic: "meal_review"),
            5: try Calls.call(database, 5, at: "2026-03-29T06:12:00Z", topic: "exercise_plan"),
            6: try Calls.call(database, 6, at: "2026-03-29T06:55:00Z", topic: "knee_rehab"),
            7: try Calls.call(database, 7, at: "2026-03-29T07:00:00Z", topic: nil),
        ]
        try await world.simulate(from: at("2026-03-29T06:00:00Z"), minutes: 62)

        // Queued once per call: its push or SMS, and (A, C) its fallback.
        var queued: [String] = []
        for n in 1...7 {
            queued.append(
                "\(n) "
                    + (try await database.value(
                        """
                        select string_agg(notification_type, ',' order by notification_type) from notification_outbox
                         where user_id = '\(Fixture.userID(n))'
                        """)))
        }
        #expect(
            queued == [
                "1 fallback_sms,preview_push", "2 fallback_sms,preview_push", "3 preview_sms",
                "4 fallback_sms,preview_push", "5 fallback_sms,preview_push", "6 preview_sms",
                "7 fallback_sms,preview_push",
            ])
        let expected: [Int: (path: [String], words: [String])] = [
            1: (["preview_push push"], ["Coach Max is calling in 5 min! 🔥", "Day 12: your fitness goal check-in."]),
            2: (["preview_push push"], ["Mama Rosa t'appelle dans 10 min ! 🔥", "Jour 7 — une semaine complète ! On fête ça."]),
            3: (["preview_sms sms"], ["Dr. Luna is calling you in 5 min! Day 21 - mood & energy check. Answer!"]),
            4: (
                ["preview_push push", "fallback_sms sms"],
                [
                    "Coach Max t'appelle dans 15 min ! 💪", "Jour 3 : bilan repas d'hier.",
                    "Coach Max t'appelle dans 15 min ! Jour 3 - bilan repas d'hier. Décroche !",
                ]
            ),
            5: (["preview_push push"], ["Dr. Luna is calling in 5 min! 🌱", "Today: today's exercise plan."]),
            6: (["preview_sms sms"], ["Your coach is calling you in 5 min! Day 40 - today's check-in. Answer!"]),
            7: (["preview_push push"], ["Mama Rosa t'appelle dans 2 min ! ⭐", "Jour 14 : le point du jour."]),
        ]
        for (n, call) in calls.sorted(by: { $0.key < $1.key }) {
            let lines = try await world.sent(call)
            #expect(lines.map { $0.split(separator: " ").prefix(2).joined(separator: " ") } == expected[n]!.path, "user \(n): \(lines)")
            let text = lines.joined(separator: "\n")
            for words in expected[n]!.words { #expect(text.contains(words), "user \(n): \(text)") }
            // The preview within 30 s of its due time; path C's SMS 30 s after the push, unconfirmed.
            if let first = lines.first { #expect((0...30).contains(world.seconds(first)), "user \(n): \(first)") }
            if lines.count == 2 { #expect((30...60).contains(world.seconds(lines[1])), "user \(n): \(lines[1])") }
        }
        // The SMS went to each user's own number, from TWILIO_FROM, one segment each.
        #expect(Set(world.twilio.sent.compactMap(\.to)) == [Calls.phone(3), Calls.phone(4), Calls.phone(6)])
        #expect(world.twilio.sent.allSatisfy { SMSText($0.body ?? "").segments == 1 && $0.from == "+15005550006" })
        // Each call marked, for the time it is at.
        #expect(try await database.count("select count(*) from scheduled_calls where preview_sent and preview_for = scheduled_at") == 7)
        // The fallbacks of paths A whose push was delivered, and of C whose push was confirmed, stayed unsent.
        #expect(
            try await database.psql(
                """
                select step || ' ' || count(*) from (select split_part(last_error, ':', 1) as step from notification_outbox
                                                      where notification_type = 'fallback_sms' and status = 'suppressed') s
                 group by step
                """) == "fallback 4")
    }

    /// A call moved after its preview was queued, before it was sent: nothing at the old time,
    /// one preview at the new one.
    @Test func aRescheduledCallGetsItsPreviewAtTheNewTimeOnly() async throws {
        let world = try await PreviewWorld.start()
        defer { Task { await world.shutdown() } }
        try await Calls.user(world.database, 1)
        let call = try await Calls.call(world.database, 1, at: "2026-03-29T06:20:00Z")
        // 06:14: the preview for 06:15 is queued (two minutes ahead); at 06:14:30 the call moves to 06:40.
        try await world.simulate(from: at("2026-03-29T06:00:00Z"), minutes: 45) { top in
            if top == at("2026-03-29T06:15:00Z") {
                try await world.database.psql("update scheduled_calls set scheduled_at = '2026-03-29T06:40:00Z' where id = '\(call)'")
            }
        }
        let lines = try await world.sent(call)
        #expect(lines.count == 1, "\(lines)")
        #expect(lines.first.map { (0...30).contains(world.seconds($0)) } == true, "\(lines)")
        #expect(
            try await world.database.value(
                """
                select min(sent_at)::text from notification_logs where call_id = '\(call)' and status = 'sent'
                """
            ).hasPrefix("2026-03-29 06:35"))
        #expect(
            try await world.database.count(
                """
                select count(*) from notification_outbox where notification_type = 'preview_push' and status = 'suppressed'
                   and last_error like 'call: the call was moved%'
                """) == 1)
        #expect(try await world.database.value("select preview_for::text from scheduled_calls where id = '\(call)'").hasPrefix("2026-03-29 06:40"))
    }

    /// A call moved away after its preview was queued, its preview refused at its due time, then
    /// moved back: one preview, at once (the refused row is queued anew), none for the time it
    /// was away at.
    @Test func aCallMovedAwayAndBackGetsOnePreview() async throws {
        let world = try await PreviewWorld.start()
        defer { Task { await world.shutdown() } }
        try await Calls.user(world.database, 1)
        let call = try await Calls.call(world.database, 1, at: "2026-03-29T06:20:00Z")
        try await world.simulate(from: at("2026-03-29T06:10:00Z"), minutes: 30) { top in
            if top == at("2026-03-29T06:14:00Z") {
                try await world.database.psql("update scheduled_calls set scheduled_at = '2026-03-29T06:40:00Z' where id = '\(call)'")
            }
            if top == at("2026-03-29T06:16:00Z") {
                let refused = try await world.database.value(
                    """
                    select status from notification_outbox where notification_type = 'preview_push' and payload->>'scheduled_at' = '2026-03-29T06:20:00Z'
                    """)
                #expect(refused == "suppressed")
                // The call is told: not sent, and why.
                let told = try await world.database.value("select preview_sent::text || ' ' || preview_note from scheduled_calls where id = '\(call)'")
                #expect(told.hasPrefix("false not sent: the call was moved from 2026-03-29T06:20:00Z to 2026-03-29T06:40:00Z"), "\(told)")
                try await world.database.psql("update scheduled_calls set scheduled_at = '2026-03-29T06:20:00Z' where id = '\(call)'")
            }
        }
        let lines = try await world.sent(call)
        #expect(lines.count == 1, "\(lines)")
        #expect(lines.first?.contains("Coach Max is calling in 4 min") == true, "\(lines)")
        #expect(
            try await world.database.value("select min(sent_at)::text from notification_logs where call_id = '\(call)' and status = 'sent'")
                .hasPrefix("2026-03-29 06:16:0"))
        let rows = try await world.database.psql(
            """
            select payload->>'scheduled_at' || ' ' || status from notification_outbox where notification_type = 'preview_push' order by 1
            """)
        // (The 06:40 preview was never queued: the call was back before it fell due.)
        #expect(rows == "2026-03-29T06:20:00Z sent")
        let marked = try await world.database.value("select preview_sent::text || ' ' || coalesce(preview_note, '-') from scheduled_calls where id = '\(call)'")
        #expect(marked == "true -")
    }

    /// More calls due within a minute than a page holds, one of them unusable (its user's zone):
    /// pages by due time meet each once, on a dry run (which writes nothing, so only where each
    /// page starts moves it on) as on a real one.
    @Test func moreCallsThanAPageAreEachMetOnce() async throws {
        let database = try await TestDatabase.fresh()
        try await database.psql(
            """
            insert into users (id, timezone, locale, created_at)
            select md5('burst-' || n)::uuid, case when n = 60 then 'Mars/Olympus' else 'Europe/Paris' end, 'en', '2026-01-01'
              from generate_series(1, 130) n;
            insert into user_push_tokens (user_id, device_token, platform)
            select id, md5(id::text) || md5(id::text || ':device'), 'ios' from users;
            insert into scheduled_calls (user_id, scheduled_at, topic)
            select id, timestamptz '2026-03-29T06:20:00Z' + (abs(hashtext(id::text)) % 3) * interval '30 seconds', 'fitness_checkin'
              from users;
            """)
        let dry = try await previewsDryRun(database, at: at("2026-03-29T06:14:30Z"))
        // The Mars/Olympus user's zone is unknown: their preview needs none and goes too.
        #expect(dry.counts.processed == 130 && dry.counts.failed == 0, "\(dry.counts)")
        #expect(try await database.count("select count(*) from notification_outbox") == 0)
        let real = try await previews(database, at: at("2026-03-29T06:14:30Z"))
        #expect(real.counts.processed == 130 && real.counts.succeeded == 130 && real.counts.failed == 0, "\(real.counts)")
        #expect(try await database.count("select count(distinct payload->>'call_id') from notification_outbox where notification_type = 'preview_push'") == 130)
        // Decided; sent is dispatch's to say.
        #expect(try await database.count("select count(*) from scheduled_calls where not preview_sent and preview_for = scheduled_at") == 130)
        #expect(
            try await database.value(
                """
                select preview_note from scheduled_calls c join users u on u.id = c.user_id where u.timezone = 'Mars/Olympus'
                """
            ).contains("Mars/Olympus"))
    }

    /// Path A's push refused (the call away at its due time), the call back before its fallback's
    /// time: the fallback is refused with its push, not sent in its place; the job queues both
    /// again, and the push goes, alone.
    @Test func aFallbackIsNotSentInPlaceOfAPushRefusedForItsCall() async throws {
        let world = try await PreviewWorld.start()
        defer { Task { await world.shutdown() } }
        let db = world.database
        try await Calls.user(db, 1)
        let call = try await Calls.call(db, 1, at: "2026-03-29T06:20:00Z")
        _ = try await previews(db, at: at("2026-03-29T06:13:01Z"))
        try await db.psql("update scheduled_calls set scheduled_at = '2026-03-29T06:40:00Z' where id = '\(call)'")
        _ = try await dispatch(db, environment: world.environment, at: at("2026-03-29T06:15:02Z"))
        try await db.psql("update scheduled_calls set scheduled_at = '2026-03-29T06:20:00Z' where id = '\(call)'")
        _ = try await dispatch(db, environment: world.environment, at: at("2026-03-29T06:15:31Z"))
        #expect(world.twilio.requests.isEmpty)
        _ = try await previews(db, at: at("2026-03-29T06:16:01Z"))
        // Both queued again: the fallback 30 s after the push's new time, whatever it waited for.
        let queued = try await db.psql(
            """
            select notification_type || ' ' || status || ' ' || to_char(deliver_after at time zone 'UTC', 'HH24:MI:SS')
              from notification_outbox order by 1
            """)
        #expect(queued == "fallback_sms pending 06:16:31\npreview_push pending 06:16:01")
        for second in ["06:16:02", "06:16:32", "06:16:45"] {
            _ = try await dispatch(db, environment: world.environment, at: at("2026-03-29T\(second)Z"))
        }
        let lines = try await world.sent(call)
        #expect(lines.count == 1 && lines.first?.hasPrefix("preview_push push") == true, "\(lines)")
        #expect(world.twilio.requests.isEmpty)
    }

    /// An SMS whose request may have reached Twilio (its dispatcher died after marking it, three
    /// minutes before) is first asked about: Twilio's list has no such message, so the row goes
    /// again as new, and its call, moved meanwhile, refuses it; the call back at its time, the SMS
    /// goes, once.
    @Test func anSMSWhoseRequestLeftIsAskedAboutBeforeAnythingElse() async throws {
        let world = try await PreviewWorld.start()
        defer { Task { await world.shutdown() } }
        let db = world.database
        try await Calls.user(db, 1, preference: "sms_only")
        let call = try await Calls.call(db, 1, at: "2026-03-29T06:20:00Z")
        _ = try await previews(db, at: at("2026-03-29T06:13:01Z"))
        try await db.psql(
            """
            update notification_outbox set status = 'sending', claimed_by = 42, lease_until = '2026-03-29T06:15:30Z',
                   attempts = 1, request_left_at = '2026-03-29T06:13:01Z', request_to = '\(Calls.phone(1))', next_attempt_at = null
             where notification_type = 'preview_sms';
            update scheduled_calls set scheduled_at = '2026-03-29T06:40:00Z' where id = '\(call)';
            """)
        _ = try await dispatch(db, environment: world.environment, at: at("2026-03-29T06:16:02Z"))
        #expect(world.twilio.listings == 1)
        #expect(world.twilio.requests.isEmpty)
        let asked = try await db.value("select status || ' ' || last_error || ' ' || (request_left_at is null)::text from notification_outbox")
        #expect(asked.hasPrefix("pending Twilio has no message") && asked.hasSuffix("true"), "\(asked)")
        _ = try await dispatch(db, environment: world.environment, at: at("2026-03-29T06:16:03Z"))
        #expect(try await db.value("select status from notification_outbox") == "suppressed")
        #expect(world.twilio.requests.isEmpty)
        try await db.psql("update scheduled_calls set scheduled_at = '2026-03-29T06:20:00Z' where id = '\(call)'")
        _ = try await previews(db, at: at("2026-03-29T06:17:01Z"))
        _ = try await dispatch(db, environment: world.environment, at: at("2026-03-29T06:17:02Z"))
        #expect(world.twilio.requests.count == 1)
        #expect(try await db.value("select status from notification_outbox") == "sent")
        #expect(try await db.value("select provider_id from notification_logs where status = 'sent'") == world.twilio.sent.first?.sid)
    }

    /// A push that went, its call cancelled before the fallback's time: the fallback is refused,
    /// and the call still says its preview was sent. A call cancelled before its preview, then
    /// pending again at the same time, gets it.
    @Test func theCallSaysWhatReachedTheUser() async throws {
        let world = try await PreviewWorld.start()
        defer { Task { await world.shutdown() } }
        let db = world.database
        for n in 1...2 { try await Calls.user(db, n) }
        let sent = try await Calls.call(db, 1, at: "2026-03-29T06:20:00Z")
        let back = try await Calls.call(db, 2, at: "2026-03-29T06:20:00Z")
        _ = try await previews(db, at: at("2026-03-29T06:13:01Z"))
        try await db.psql("update scheduled_calls set status = 'cancelled' where id = '\(back)'")
        _ = try await dispatch(db, environment: world.environment, at: at("2026-03-29T06:15:02Z"))
        try await db.psql(
            """
            update scheduled_calls set status = 'cancelled' where id = '\(sent)';
            update scheduled_calls set status = 'pending' where id = '\(back)';
            """)
        _ = try await dispatch(db, environment: world.environment, at: at("2026-03-29T06:15:31Z"))
        await #expect(try world.sent(sent).count == 1)
        let marked = try await db.value("select preview_sent::text || ' ' || coalesce(preview_note, '-') from scheduled_calls where id = '\(sent)'")
        #expect(marked == "true -")
        #expect(world.twilio.requests.isEmpty)
        _ = try await previews(db, at: at("2026-03-29T06:16:01Z"))
        _ = try await dispatch(db, environment: world.environment, at: at("2026-03-29T06:16:02Z"))
        let lines = try await world.sent(back)
        #expect(lines.count == 1 && lines.first?.contains("calling in 4 min") == true, "\(lines)")
    }

    /// A page starts after the last call of the one before as that page read it: the call moved
    /// meanwhile (a day later) does not make the next page skip the calls between.
    @Test func aPageStartsWhereThePageBeforeEndedEvenIfItsLastCallMoved() async throws {
        let database = try await TestDatabase.fresh()
        try await database.psql(
            """
            insert into users (id, timezone, locale, created_at)
            select md5('burst-' || n)::uuid, 'Europe/Paris', 'en', '2026-01-01' from generate_series(1, 120) n;
            insert into scheduled_calls (user_id, scheduled_at, topic)
            select id, timestamptz '2026-03-29T06:20:00Z' + (abs(hashtext(id::text)) % 3) * interval '30 seconds', 'fitness_checkin'
              from users;
            """)
        let source = CallSource(lookAhead: PreviewNotificationsJob.lookAhead)
        let calendars = CalendarCache()
        @Sendable func request(after last: Paged<CallInTime>?) -> PageRequest {
            PageRequest(
                job: "preview-notifications", runID: 1, pageID: 1, now: at("2026-03-29T06:14:30Z"), after: last?.id,
                afterTime: last.flatMap(source.pagedAt), limit: 50, shard: .whole, users: [], window: nil, dryRun: true,
                logger: Logger(label: "test"))
        }
        let pages = try await database.withDatabase { db in
            try await db.withConnection { connection in
                let first = try await source.page(request(after: nil), calendars: calendars, on: connection)
                try await database.psql("update scheduled_calls set scheduled_at = scheduled_at + interval '1 day' where id = '\(first.last!.id)'")
                let second = try await source.page(request(after: first.last), calendars: calendars, on: connection)
                let third = try await source.page(request(after: second.last), calendars: calendars, on: connection)
                return [first, second, third].map { $0.map(\.id) }
            }
        }
        #expect(pages.map(\.count) == [50, 50, 20])
        #expect(Set(pages.flatMap { $0 }).count == 120)
    }

    /// A call moved away and back whose user changed path in between: the rows of the first
    /// decision that the second does not queue are withdrawn, and the user gets one preview.
    @Test func aCallDecidedAgainOnAnotherPathGetsOnePreview() async throws {
        let world = try await PreviewWorld.start()
        defer { Task { await world.shutdown() } }
        let db = world.database
        try await Calls.user(db, 1)
        let call = try await Calls.call(db, 1, at: "2026-03-29T06:30:00Z")
        _ = try await previews(db, at: at("2026-03-29T06:23:01Z"))
        // Moved earlier, decided for 06:20 at 06:13; the user asks for SMS only; back to 06:30.
        try await db.psql("update scheduled_calls set scheduled_at = '2026-03-29T06:20:00Z' where id = '\(call)'")
        _ = try await previews(db, at: at("2026-03-29T06:13:01Z"))
        try await db.psql(
            """
            update users set notification_pref = 'sms_only' where id = '\(Fixture.userID(1))';
            update scheduled_calls set scheduled_at = '2026-03-29T06:30:00Z' where id = '\(call)';
            """)
        try await world.simulate(from: at("2026-03-29T06:14:00Z"), minutes: 13)
        let lines = try await world.sent(call)
        #expect(lines.count == 1 && lines.first?.hasPrefix("preview_sms sms") == true, "\(lines)")
        #expect(world.push.apns.requests.isEmpty)
        let withdrawn = try await db.psql(
            """
            select notification_type || ' ' || status from notification_outbox
             where payload->>'scheduled_at' = '2026-03-29T06:30:00Z' and status = 'cancelled' order by 1
            """)
        #expect(withdrawn == "fallback_sms cancelled\npreview_push cancelled")
    }

    /// Decided on path A, then B, then A again for the same call time (moved away and back each
    /// time): the rows withdrawn by the B decision are queued again, and B's SMS withdrawn.
    @Test func rowsWithdrawnByAnotherPathComeBackWithIt() async throws {
        let database = try await TestDatabase.fresh()
        try await Calls.coaches(database)
        try await Calls.user(database, 1)
        let call = try await Calls.call(database, 1, at: "2026-03-29T06:30:00Z")
        func decide(at instant: String, preference: String, callAt: String) async throws {
            try await database.psql(
                """
                update users set notification_pref = '\(preference)' where id = '\(Fixture.userID(1))';
                update scheduled_calls set scheduled_at = '\(callAt)' where id = '\(call)';
                """)
            _ = try await previews(database, at: at(instant))
        }
        try await decide(at: "2026-03-29T06:23:01Z", preference: "push_only", callAt: "2026-03-29T06:30:00Z")
        try await decide(at: "2026-03-29T06:13:01Z", preference: "push_only", callAt: "2026-03-29T06:20:00Z")
        try await decide(at: "2026-03-29T06:23:10Z", preference: "sms_only", callAt: "2026-03-29T06:30:00Z")
        try await decide(at: "2026-03-29T06:13:10Z", preference: "sms_only", callAt: "2026-03-29T06:20:00Z")
        try await decide(at: "2026-03-29T06:23:20Z", preference: "push_only", callAt: "2026-03-29T06:30:00Z")
        let rows = try await database.psql(
            """
            select notification_type || ' ' || status from notification_outbox
             where payload->>'scheduled_at' = '2026-03-29T06:30:00Z' order by 1
            """)
        #expect(rows == "fallback_sms pending\npreview_push pending\npreview_sms cancelled")
    }

    /// The SMS went (path B); the call then moved away and back while the user switched to push:
    /// the push decided for the same call time does not go, one preview a call time.
    @Test func aPreviewThatReachedTheUserIsNotFollowedByAnotherPath() async throws {
        let world = try await PreviewWorld.start()
        defer { Task { await world.shutdown() } }
        let db = world.database
        try await Calls.user(db, 1, preference: "sms_only")
        let call = try await Calls.call(db, 1, at: "2026-03-29T06:20:00Z")
        try await world.simulate(from: at("2026-03-29T06:13:00Z"), minutes: 3)
        #expect(world.twilio.sent.count == 1)
        try await db.psql(
            """
            update users set notification_pref = 'push_only' where id = '\(Fixture.userID(1))';
            update scheduled_calls set scheduled_at = '2026-03-29T06:18:00Z' where id = '\(call)';
            """)
        _ = try await previews(db, at: at("2026-03-29T06:16:10Z"))
        try await db.psql("update scheduled_calls set scheduled_at = '2026-03-29T06:20:00Z' where id = '\(call)'")
        _ = try await previews(db, at: at("2026-03-29T06:16:20Z"))
        _ = try await dispatch(db, environment: world.environment, at: at("2026-03-29T06:16:21Z"))
        #expect(world.push.apns.requests.isEmpty)
        await #expect(try world.sent(call).count == 1)
        let once = try await db.value(
            """
            select status || ' ' || split_part(last_error, ':', 1) from notification_outbox
             where notification_type = 'preview_push' and payload->>'scheduled_at' = '2026-03-29T06:20:00Z'
            """)
        #expect(once == "suppressed once")
    }

    /// `preview_due_at`, what the job pages by, follows the call's time and its user's lead,
    /// whatever the app writes; the preview goes at the lead the user has when it is due.
    @Test func theDueTimeFollowsTheCallAndTheUsersLead() async throws {
        let world = try await PreviewWorld.start()
        defer { Task { await world.shutdown() } }
        let db = world.database
        try await Calls.user(db, 1)
        let call = try await Calls.call(db, 1, at: "2026-03-29T06:20:00Z")
        let done = try await Calls.call(db, 1, at: "2026-03-28T06:20:00Z", status: "completed")
        func due(_ id: String) async throws -> String {
            try await db.value("select to_char(preview_due_at at time zone 'UTC', 'MM-DD HH24:MI') from scheduled_calls where id = '\(id)'")
        }
        await #expect(try due(call) == "03-29 06:15")
        try await db.psql("update scheduled_calls set scheduled_at = '2026-03-29T07:00:00Z' where id = '\(call)'")
        await #expect(try due(call) == "03-29 06:55")
        try await db.psql("update users set notification_lead_min = 15 where id = '\(Fixture.userID(1))'")
        await #expect(try due(call) == "03-29 06:45")
        // Every call of the user's, whatever its status: a call done or cancelled may be pending again.
        await #expect(try due(done) == "03-28 06:05")
        let later = try await Calls.call(db, 1, at: "2026-03-29T09:00:00Z")
        await #expect(try due(later) == "03-29 08:45")
        // Nothing is due at 06:40; at 06:44 the preview for 06:45 is queued, "in 15 min".
        _ = try await previews(db, at: at("2026-03-29T06:40:00Z"))
        #expect(try await db.count("select count(*) from notification_outbox") == 0)
        _ = try await previews(db, at: at("2026-03-29T06:44:00Z"))
        let queued = try await db.psql(
            """
            select (deliver_after at time zone 'UTC') || ' ' || title from notification_outbox where notification_type = 'preview_push'
            """)
        #expect(queued == "2026-03-29 06:45:00 Coach Max is calling in 15 min! 🌱")
    }

    /// A call cancelled after its preview was queued gets none; nor does one done before it went
    /// (docs/jobs/preview-notifications.md, "Exactly one preview per call time"), nor one found
    /// only after it began.
    @Test func cancelledDoneOrBegunCallsGetNoPreview() async throws {
        let world = try await PreviewWorld.start()
        defer { Task { await world.shutdown() } }
        for n in 1...3 { try await Calls.user(world.database, n) }
        let cancelled = try await Calls.call(world.database, 1, at: "2026-03-29T06:20:00Z")
        let done = try await Calls.call(world.database, 2, at: "2026-03-29T06:20:00Z")
        let begun = try await Calls.call(world.database, 3, at: "2026-03-29T06:02:00Z")
        try await world.simulate(from: at("2026-03-29T06:05:00Z"), minutes: 20) { top in
            if top == at("2026-03-29T06:15:00Z") {
                try await world.database.psql(
                    """
                    update scheduled_calls set status = 'cancelled' where id = '\(cancelled)';
                    update scheduled_calls set status = 'completed' where id = '\(done)';
                    """)
            }
        }
        #expect(world.push.apns.requests.isEmpty)
        #expect(world.twilio.requests.isEmpty)
        #expect(
            try await world.database.psql(
                """
                select notification_type || ' ' || last_error from notification_outbox where status = 'suppressed' and channel = 'push' order by user_id
                """
            ).split(separator: "\n").sorted() == [
                "preview_push call: the call is cancelled, no longer pending", "preview_push call: the call is completed, no longer pending",
            ])
        #expect(
            try await world.database.value("select preview_sent::text || ' ' || preview_note from scheduled_calls where id = '\(begun)'")
                .hasPrefix("false the call began at 2026-03-29T06:02:00Z"))
        // Dispatch told the calls whose preview it refused.
        let told = try await world.database.psql(
            """
            select preview_sent::text || ' ' || coalesce(preview_for::text, 'undecided') || ' ' || preview_note from scheduled_calls
             where id in ('\(cancelled)', '\(done)') order by status
            """)
        // (Left undecided, as their time is still ahead: pending again, the job decides them anew.)
        #expect(
            told == "false undecided not sent: the call is cancelled, no longer pending\nfalse undecided not sent: the call is completed, no longer pending")
        #expect(try await world.database.count("select count(*) from notification_outbox where user_id = '\(Fixture.userID(3))'") == 0)
    }

    /// An expired token (docs/jobs/preview-notifications.md) fails the push, marks push_enabled
    /// false, and the SMS goes at once, not 30 seconds later.
    @Test func anExpiredTokenFallsBackToSMSAtOnce() async throws {
        let world = try await PreviewWorld.start(fcm: { _ in .reject(status: 404, code: "UNREGISTERED", message: "Requested entity was not found.") })
        defer { Task { await world.shutdown() } }
        try await Calls.user(world.database, 1, ios: 0, legacy: true, streak: 5)
        let call = try await Calls.call(world.database, 1, at: "2026-03-29T06:20:00Z")
        try await world.simulate(from: at("2026-03-29T06:13:00Z"), minutes: 4)
        #expect(world.push.fcm.requests.count == 1)
        #expect(try await world.database.value("select push_enabled::text from users where id = '\(Fixture.userID(1))'") == "false")
        let lines = try await world.sent(call)
        #expect(lines.count == 1, "\(lines)")
        #expect(lines.first?.hasPrefix("fallback_sms sms") == true)
        let rows = try await world.database.psql("select notification_type, status, deliver_after, next_attempt_at, last_error from notification_outbox")
        #expect(lines.first.map { world.seconds($0) < 5 } == true, "\(lines) \(rows)")
        #expect(world.twilio.sent.map(\.to) == [Calls.phone(1)])
    }

    /// No push token and no phone number (docs/jobs/preview-notifications.md): a warning, nothing
    /// queued, the call untouched.
    @Test func noChannelLogsTheWarningAndLeavesTheCallAlone() async throws {
        let world = try await PreviewWorld.start()
        defer { Task { await world.shutdown() } }
        try await Calls.user(world.database, 1, ios: 0, phone: false)
        let call = try await Calls.call(world.database, 1, at: "2026-03-29T06:20:00Z")
        let run = try await world.database.nudge(
            ["run", "preview-notifications", "--now", "2026-03-29T06:15:00Z"],
            environment: world.environment)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("no notification channel") || run.stderr.contains("no notification channel"))
        #expect(try await world.database.count("select count(*) from notification_outbox") == 0)
        #expect(
            try await world.database.value("select status || ' ' || preview_note from scheduled_calls where id = '\(call)'")
                == "pending no notification channel: no push token (or push off) and no phone number")
    }

    /// Path C: a push the device confirms within 30 s has no SMS; one it does not, has.
    @Test func aConfirmedPushHasNoSMSAndAnUnconfirmedOneHas() async throws {
        let world = try await PreviewWorld.start(confirming: [1])
        defer { Task { await world.shutdown() } }
        try await Calls.user(world.database, 1, preference: "push_and_sms")
        try await Calls.user(world.database, 2, preference: "push_and_sms")
        let confirmed = try await Calls.call(world.database, 1, at: "2026-03-29T06:20:00Z")
        let unconfirmed = try await Calls.call(world.database, 2, at: "2026-03-29T06:20:00Z")
        try await world.simulate(from: at("2026-03-29T06:13:00Z"), minutes: 4)
        await #expect(try world.sent(confirmed).map { String($0.prefix(17)) } == ["preview_push push"])
        let lines = try await world.sent(unconfirmed)
        #expect(lines.map { String($0.split(separator: " ")[0]) } == ["preview_push", "fallback_sms"], "\(lines)")
        #expect(lines.count == 2 && (30...35).contains(world.seconds(lines[1])), "\(lines)")
        #expect(world.twilio.sent.map(\.to) == [Calls.phone(2)])
    }
}

@Suite(.serialized, .dropsItsDatabases) struct TwilioDeliveryTests {
    /// A batch's bound that comes while an SMS is on the wire no longer cuts it: the request that
    /// left ends with Twilio's answer (its own time-out bounds it), not as "outcome unknown".
    @Test func aBatchsBoundNeverCutsAnSMSOnTheWire() async throws {
        // Cancelled once the stand-in has the request, while its answer is 2 seconds away.
        let (received, signal) = AsyncStream<Void>.makeStream()
        let twilio = try await StandInTwilio.start(onSent: { _ in signal.yield() }, latency: .seconds(2))
        defer { Task { await twilio.shutdown() } }
        let configuration = try #require(
            try TwilioConfiguration(
                environment: Environment([
                    "TWILIO_ACCOUNT_SID": twilio.accountSID, "TWILIO_AUTH_TOKEN": twilio.authToken, "TWILIO_FROM": "+15005550006",
                    "TWILIO_BASE_URL": twilio.baseURL,
                ])))
        let client = try TwilioClient(configuration: configuration, http: ProviderHTTP(extraTrustedRoots: nil, timeout: .seconds(30)))
        let sending = Task {
            await client.send(
                SMSRequest(
                    to: try! #require(PhoneNumber("+15551230001")), body: "Coach Max is calling you in 5 min!",
                    outboxID: 1))
        }
        for await _ in received { break }
        sending.cancel()
        let result = await sending.value
        await client.shutdown()
        guard case .delivered(let sid) = result else {
            Issue.record("an SMS on the wire was cut by its batch's bound: \(result)")
            return
        }
        #expect(twilio.sent.map(\.sid) == [sid])
    }

    /// What Twilio receives (the form, Basic authentication, the callback URL), and its status
    /// callbacks: genuine ones recorded on the SMS's log, unsigned or forged ones refused.
    @Test func twilioGetsItsFormAndItsCallbacksAreChecked() async throws {
        let world = try await PreviewWorld.start()
        defer { Task { await world.shutdown() } }
        try await Calls.user(world.database, 1, preference: "sms_only", streak: 4)
        try await Calls.user(world.database, 2, preference: "sms_only", streak: 4)
        let (base, server) = try await world.serve()
        defer { server.cancel() }
        for n in 1...2 { try await Calls.call(world.database, n, at: "2026-03-29T06:20:00Z", topic: "streak_celebrate") }
        try await world.simulate(from: at("2026-03-29T06:14:00Z"), minutes: 2, environment: ["NUDGE_PUBLIC_URL": base])

        #expect(world.twilio.sent.count == 2)
        let message = try #require(world.twilio.sent.first { $0.to == Calls.phone(1) })
        let outbox = try await world.database.value(
            """
            select id from notification_outbox where user_id = '\(Fixture.userID(1))' and channel = 'sms'
            """)
        #expect(message.from == "+15005550006")
        #expect(message.body == "Coach Max is calling you in 5 min! Day 4 - streak celebration! Answer!")
        #expect(message.statusCallback == "\(base)/webhooks/twilio?outbox=\(outbox)")
        #expect(try await world.database.value("select provider_id from notification_logs where outbox_id = \(outbox)") == message.sid)

        let before = try await world.database.dump()
        #expect(try await world.twilio.report(message, status: "delivered", signing: .unsigned) == 403)
        #expect(try await world.twilio.report(message, status: "delivered", signing: .forged) == 403)
        #expect(try await world.database.dump() == before)
        #expect(try await world.twilio.report(message, status: "sent") == 200)
        #expect(try await world.twilio.report(message, status: "delivered") == 200)
        #expect(
            try await world.database.value(
                """
                select status || ' ' || delivered::text || ' ' || (delivered_at is not null)::text from notification_logs where outbox_id = \(outbox)
                """) == "delivered true true")
        // A late "sent" after "delivered" changes nothing; the other SMS undelivered is a failure with its code.
        #expect(try await world.twilio.report(message, status: "sent") == 200)
        #expect(try await world.database.value("select status from notification_logs where outbox_id = \(outbox)") == "delivered")
        let other = try #require(world.twilio.sent.first { $0.to == Calls.phone(2) })
        #expect(try await world.twilio.report(other, status: "undelivered", errorCode: "30003") == 200)
        #expect(
            try await world.database.value(
                """
                select status || ' ' || error_msg from notification_logs where provider_id = '\(other.sid)'
                """) == "failed Twilio: undelivered (30003)")
        // No log or error ever holds a phone number whole.
        #expect(
            try await world.database.count(
                """
                select count(*) from notification_logs where coalesce(error_msg, '') || coalesce(body, '') || payload::text like '%5550100%'
                """) == 0)
    }

    /// A status callback that comes before its SMS's log is written is kept and applied by the
    /// write; a number Twilio refuses with 21610 (it replied STOP) and one whose STOP reply
    /// Twilio relays get no more SMS, and their next previews go by push; START lifts it.
    @Test func aCallbackBeforeItsLogIsKeptAndAStopMovesPreviewsToPush() async throws {
        let twilioBox = Mutex<StandInTwilio?>(nil)
        // The callbacks' answers: a busy machine may still be posting one when the run ends.
        let reports = Mutex<[Task<Int?, Never>]>([])
        let world = try await PreviewWorld.start(
            twilioLatency: .seconds(1),
            twilio: { message in
                if message.to == Calls.phone(2) {
                    return .reject(status: 400, code: 21610, message: "Attempt to send to unsubscribed recipient")
                }
                // Delivered at once, reported while Nudge still waits for the API's answer.
                if let twilio = twilioBox.withLock({ $0 }) {
                    reports.withLock { $0.append(Task { try? await twilio.report(message, status: "delivered") }) }
                }
                return .accept
            })
        twilioBox.withLock { $0 = world.twilio }
        defer { Task { await world.shutdown() } }
        let (base, server) = try await world.serve()
        defer { server.cancel() }
        for n in 1...3 { try await Calls.user(world.database, n, preference: "sms_only") }
        for n in 1...2 { try await Calls.call(world.database, n, at: "2026-03-29T06:20:00Z") }
        try await world.simulate(from: at("2026-03-29T06:14:00Z"), minutes: 2, environment: ["NUDGE_PUBLIC_URL": base])
        let answers = await withTaskGroup(of: Int?.self) { group in
            for report in reports.withLock({ $0 }) { group.addTask { await report.value } }
            return await group.reduce(into: [Int?]()) { $0.append($1) }
        }
        #expect(answers == [200])

        // User 1's delivery came before its log: kept, then written with the log.
        #expect(
            try await world.database.value(
                """
                select l.status || ' ' || l.delivered::text || ' ' || (l.delivered_at is not null)::text from notification_logs l
                 where l.user_id = '\(Fixture.userID(1))' and l.channel = 'sms'
                """) == "delivered true true")
        #expect(try await world.database.count("select count(*) from sms_status_early") == 0)
        // User 2's number replied STOP before: Twilio refused it (21610), and Nudge remembers.
        #expect(try await world.database.psql("select phone_number, source from sms_opt_outs") == "\(Calls.phone(2))|twilio 21610")

        // User 1 replies STOP (Advanced Opt-Out off: the reply's text); user 3 through OptOutType.
        let webhook = base + TwilioWebhook.path
        #expect(try await world.twilio.relay(reply: "Stop", from: Calls.phone(1), to: webhook) == 200)
        #expect(try await world.twilio.relay(reply: "please stop", from: Calls.phone(3), to: webhook) == 200)
        #expect(try await world.database.count("select count(*) from sms_opt_outs") == 2)
        #expect(try await world.twilio.relay(reply: "arret", from: Calls.phone(3), to: webhook, optOutType: "STOP") == 200)
        #expect(try await world.database.count("select count(*) from sms_opt_outs") == 3)
        // Their next previews go by push (each has an iPhone), though they asked for SMS only.
        let texts = world.twilio.requests.count
        var calls: [String] = []
        for n in 1...3 { calls.append(try await Calls.call(world.database, n, at: "2026-03-29T06:40:00Z")) }
        try await world.simulate(from: at("2026-03-29T06:34:00Z"), minutes: 2, environment: ["NUDGE_PUBLIC_URL": base])
        for call in calls { await #expect(try world.sent(call).map { String($0.prefix(17)) } == ["preview_push push"]) }
        #expect(world.twilio.requests.count == texts)
        // START lifts it; no log row names a number.
        #expect(try await world.twilio.relay(reply: "START", from: Calls.phone(2), to: webhook) == 200)
        #expect(try await world.database.psql("select phone_number from sms_opt_outs order by 1") == "\(Calls.phone(1))\n\(Calls.phone(3))")
        #expect(try await world.database.count("select count(*) from notification_logs where coalesce(error_msg, '') like '%5550100%'") == 0)
    }

    /// Twilio answers 503 to everything for four minutes while 300 SMS previews fall due, about
    /// one a second: none is failed for good, while Twilio is known down only probes that send
    /// nothing go to it (a read of its newest message), none is sent twice, and once it is back every preview goes, before
    /// its call, with its log naming the message Twilio took.
    @Test func aFourMinuteTwilioOutageOverThreeHundredPreviewsLosesNoneAndDoublesNone() async throws {
        let down = Mutex(true)
        let duringOutage = Mutex(0)
        let world = try await PreviewWorld.start(
            twilioListing: { down.withLock { $0 } ? .reject(status: 503, code: 20500, message: "Service Unavailable") : .accept },
            twilioAccount: { down.withLock { $0 } ? .reject(status: 503, code: 20500, message: "Service Unavailable") : .accept },
            twilio: { _ in
                down.withLock { down in
                    if down { duringOutage.withLock { $0 += 1 } }
                    return down ? .reject(status: 503, code: 20500, message: "Service Unavailable") : .accept
                }
            })
        defer { Task { await world.shutdown() } }
        let start = at("2026-03-29T06:14:00Z")
        let stamp = ISO8601DateFormatter()
        for n in 1...300 {
            try await Calls.user(world.database, n, preference: "sms_only")
            // Calls from 06:20 to 06:25, so their previews fall due from 06:15 to 06:20.
            try await Calls.call(world.database, n, at: stamp.string(from: start.addingTimeInterval(360 + Double(n))))
        }
        // Twilio is down from 06:14 to 06:18. The marks of requests that left are on the
        // database's clock, which the simulation does not move: each simulated minute ages them
        // by one.
        try await world.simulate(from: start, minutes: 8) { top in
            if top >= start.addingTimeInterval(4 * 60) { down.withLock { $0 = false } }
            try await world.database.psql(
                """
                update notification_outbox set request_left_at = request_left_at - interval '1 minute',
                                               request_shown_by = request_shown_by - interval '1 minute'
                 where channel = 'sms' and request_left_at is not null
                """)
        }
        let unsent = try await world.database.psql("select id, status, request_left_at, last_error from notification_outbox where status <> 'sent'")
        #expect(try await world.database.psql("select status, count(*) from notification_outbox group by 1") == "sent|300", "\(unsent)")
        let texts = Dictionary(grouping: world.twilio.sent, by: { $0.to ?? "" })
        #expect(texts.count == 300)
        #expect(texts.values.allSatisfy { $0.count == 1 })
        // While Twilio was down, the previews waited: far fewer requests than previews due.
        let tried = duringOutage.withLock { $0 }
        #expect(tried < 60, "\(tried) requests went to Twilio while it was down")
        // Found down, Twilio was probed by reading its newest message with the API key (allowed to
        // read messages, not the account), which sends nothing.
        #expect(world.twilio.probes > 0 && world.twilio.accountReads == 0)
        #expect(
            try await world.database.count(
                """
                select count(*) from notification_logs where channel = 'sms' and status = 'sent' and provider_id like 'SM%'
                """) == 300)
    }

    /// Twilio has no idempotency key: an SMS whose answer never came (a time-out) is not sent
    /// again blindly; Twilio is asked, has it, and its log names Twilio's SID. One whose
    /// dispatcher died after the request was marked, and that Twilio never got, goes again once
    /// Twilio's list has had three minutes to show it and does not. A 20429 (never processed)
    /// is retried.
    @Test func anSMSWhoseOutcomeIsUnclearIsAskedAboutAndNeverSentTwice() async throws {
        let world = try await PreviewWorld.start(twilio: { message in
            switch message.to {
            case Calls.phone(1): message.attempt == 1 ? .acceptSilently : .accept
            case Calls.phone(2) where message.attempt == 1:
                .reject(
                    status: 429, code: 20429, message: "Too Many Requests",
                    headers: [("retry-after", "1")])
            default: .accept
            }
        })
        defer { Task { await world.shutdown() } }
        for n in 1...3 { try await Calls.user(world.database, n, preference: "sms_only") }
        for n in 1...2 { try await Calls.call(world.database, n, at: "2026-03-29T06:20:00Z") }
        // User 3's preview is due at 06:17, queued at 06:16 and not yet sent when the simulation ends.
        try await Calls.call(world.database, 3, at: "2026-03-29T06:22:00Z")
        try await world.simulate(from: at("2026-03-29T06:14:00Z"), minutes: 3, environment: ["NUDGE_PUSH_TIMEOUT_SECONDS": "1"])
        // Every request, the list's included, went with the API key, never the auth token.
        #expect(!world.twilio.authenticatedWith.isEmpty && Set(world.twilio.authenticatedWith) == [world.twilio.apiKeySID])
        #expect(world.twilio.requests.filter { $0.to == Calls.phone(1) }.count == 1)
        let first = try #require(world.twilio.sent.first { $0.to == Calls.phone(1) })
        #expect(
            try await world.database.value(
                """
                select o.status || ' ' || l.provider_id from notification_outbox o join notification_logs l on l.outbox_id = o.id
                 where o.user_id = '\(Fixture.userID(1))' and l.status = 'sent'
                """) == "sent \(first.sid)")
        #expect(world.twilio.requests.filter { $0.to == Calls.phone(2) }.count == 2)
        #expect(world.twilio.sent.filter { $0.to == Calls.phone(2) }.count == 1)

        // A dispatcher that died after the request was marked (its claim lapsed), the request
        // never having reached Twilio: the next one asks, and sends it once.
        #expect(try await world.database.value("select status from notification_outbox where user_id = '\(Fixture.userID(3))'") == "pending")
        try await world.database.psql(
            """
            update notification_outbox set status = 'sending', claimed_by = 1, lease_until = now() - interval '1 second',
                   request_left_at = now(), attempts = 1
             where user_id = '\(Fixture.userID(3))'
            """)
        let listings = world.twilio.listings
        _ = try await dispatch(world.database, environment: world.environment, at: at("2026-03-29T06:17:30Z"))
        #expect(world.twilio.listings == listings + 1)
        #expect(world.twilio.sent.filter { $0.to == Calls.phone(3) }.isEmpty)
        #expect(
            try await world.database.value(
                """
                select (request_left_at is not null)::text || ' ' || last_error from notification_outbox where user_id = '\(Fixture.userID(3))'
                """
            ).hasPrefix("true Twilio's list does not show"))
        // Three minutes later (on the database's clock, which the marks are on), the list is believed.
        try await world.database.psql("update notification_outbox set request_left_at = now() - interval '181 seconds' where user_id = '\(Fixture.userID(3))'")
        for second in ["06:20:31", "06:20:32"] {
            _ = try await dispatch(world.database, environment: world.environment, at: at("2026-03-29T\(second)Z"))
        }
        #expect(world.twilio.listings == listings + 2)
        #expect(world.twilio.sent.filter { $0.to == Calls.phone(3) }.count == 1)
        #expect(try await world.database.value("select status from notification_outbox where user_id = '\(Fixture.userID(3))'") == "sent")
    }
}

/// What a preview says and when it is marked: the streak day it falls on, a free-text topic,
/// a call written without its due time, `preview_sent` from dispatch, path C's SMS from the push.
@Suite(.serialized, .dropsItsDatabases) struct PreviewFactsTests {
    /// Six check-ins in a row (Monday 23 to Saturday 28 March), calls on Sunday 29 at 00:15 and
    /// 08:10 Paris time (UTC+1 until 02:00, then +2): day 7 both times, whether validate-streaks
    /// has settled Saturday yet (at 00:05 it has not) or has (by 08:00).
    @Test func theStreakDayIsTodaysAtMidnightAndInTheMorning() async throws {
        let database = try await TestDatabase.fresh()
        try await Calls.coaches(database)
        try await Calls.user(database, 1, streak: 0)
        let id = Fixture.userID(1)
        try await database.psql(
            """
            insert into daily_tracking (user_id, date, mood, energy, steps)
            select '\(id)', d::date, 4, 3, 6000 from generate_series('2026-03-23'::date, '2026-03-28'::date, '1 day') d;
            update user_streaks set current_streak = 5, longest_streak = 5, last_checkin_date = '2026-03-27',
                                    week_start_date = '2026-03-23', settled_through = '2026-03-27'
             where user_id = '\(id)';
            """)
        let midnight = try await Calls.call(database, 1, at: "2026-03-28T23:15:00Z", topic: "Marathon plan, week 2")
        _ = try await previews(database, at: at("2026-03-28T23:09:00Z"))
        let atMidnight = try await database.psql("select body from notification_outbox where channel = 'push' and payload->>'call_id' = '\(midnight)'")
        #expect(atMidnight == "Day 7 — one full week! Let's celebrate. Today: Marathon plan, week 2.", "\(atMidnight)")
        // Queued, not yet sent: dispatch says when a channel took it.
        #expect(
            try await database.value("select preview_sent::text || ' ' || (preview_for is not null)::text from scheduled_calls where id = '\(midnight)'")
                == "false true")
        try await database.psql(
            """
            update user_streaks set current_streak = 6, longest_streak = 6, last_checkin_date = '2026-03-28', settled_through = '2026-03-28'
             where user_id = '\(id)'
            """)
        let morning = try await Calls.call(database, 1, at: "2026-03-29T06:10:00Z", topic: "fitness_checkin")
        _ = try await previews(database, at: at("2026-03-29T06:04:00Z"))
        let inTheMorning = try await database.psql("select body from notification_outbox where channel = 'push' and payload->>'call_id' = '\(morning)'")
        #expect(inTheMorning == "Day 7 — one full week! Let's celebrate. Today: your fitness goal check-in.", "\(inTheMorning)")
        #expect(try await database.value("select title from notification_outbox where channel = 'push' and payload->>'call_id' = '\(morning)'").hasSuffix("🔥"))
    }

    /// A call inserted with triggers off has no preview_due_at: it is previewed all the same.
    @Test func aCallWithoutItsDueTimeIsStillPreviewed() async throws {
        let database = try await TestDatabase.fresh()
        try await Calls.coaches(database)
        try await Calls.user(database, 1, streak: 21)
        try await database.psql(
            """
            begin;
            set local session_replication_role = replica;
            insert into scheduled_calls (user_id, scheduled_at, topic) values ('\(Fixture.userID(1))', '2026-03-29T06:20:00Z', null);
            commit;
            """)
        #expect(try await database.count("select count(*) from scheduled_calls where preview_due_at is null") == 1)
        let summary = try await previews(database, at: at("2026-03-29T06:14:30Z"))
        #expect(summary.counts.succeeded == 1, "\(summary.counts)")
        #expect(
            try await database.value("select body from notification_outbox where notification_type = 'preview_push'")
                == "DAY 21! Three weeks, you made it. 🏆 Today: today's check-in.")
        // Decided once: the next minute reads nothing.
        let again = try await previews(database, at: at("2026-03-29T06:15:30Z"))
        #expect(again.counts.processed == 0)
    }

    /// `preview_sent` is about the time the call is at: moved after its preview went, it is false
    /// until the new time's preview goes; moved back, true again (that preview is not sent twice).
    @Test func previewSentFollowsTheCallsTime() async throws {
        let world = try await PreviewWorld.start()
        defer { Task { await world.shutdown() } }
        let db = world.database
        try await Calls.user(db, 1, streak: 3)
        let call = try await Calls.call(db, 1, at: "2026-03-29T06:20:00Z")
        _ = try await previews(db, at: at("2026-03-29T06:14:01Z"))
        _ = try await dispatch(db, environment: world.environment, at: at("2026-03-29T06:15:02Z"))
        func sent() async throws -> String { try await db.value("select preview_sent::text from scheduled_calls where id = '\(call)'") }
        await #expect(try sent() == "true")
        try await db.psql("update scheduled_calls set scheduled_at = '2026-03-29T07:20:00Z' where id = '\(call)'")
        _ = try await previews(db, at: at("2026-03-29T07:14:01Z"))
        await #expect(try sent() == "false")
        try await db.psql("update scheduled_calls set scheduled_at = '2026-03-29T06:20:00Z' where id = '\(call)'")
        _ = try await previews(db, at: at("2026-03-29T06:16:01Z"))
        await #expect(try sent() == "true")
    }

    /// Path C: the push leaves 20 seconds late (dispatch was behind); its SMS waits 30 seconds
    /// from then, not from the push's due time. The call is marked previewed once the push went.
    @Test func pathCsSMSWaitsThirtySecondsFromThePushThatLeft() async throws {
        let world = try await PreviewWorld.start()
        defer { Task { await world.shutdown() } }
        let db = world.database
        try await Calls.user(db, 1, preference: "push_and_sms", streak: 3)
        let call = try await Calls.call(db, 1, at: "2026-03-29T06:20:00Z")
        _ = try await previews(db, at: at("2026-03-29T06:14:01Z"))
        #expect(
            try await db.value("select deliver_after::text from notification_outbox where notification_type = 'fallback_sms'")
                .hasPrefix("2026-03-29 06:15:30"))
        _ = try await dispatch(db, environment: world.environment, at: at("2026-03-29T06:15:20Z"))
        #expect(try await db.value("select status from notification_outbox where notification_type = 'preview_push'") == "sent")
        #expect(
            try await db.value("select coalesce(next_attempt_at, deliver_after)::text from notification_outbox where notification_type = 'fallback_sms'")
                .hasPrefix("2026-03-29 06:15:50"))
        #expect(
            try await db.value("select preview_sent::text || ' ' || preview_sent_at::text from scheduled_calls where id = '\(call)'")
                .hasPrefix("true 2026-03-29 06:15:20"))
        // At 06:15:35 (the old time) nothing goes; at 06:15:51, unconfirmed, the SMS does.
        _ = try await dispatch(db, environment: world.environment, at: at("2026-03-29T06:15:35Z"))
        #expect(world.twilio.sent.isEmpty)
        _ = try await dispatch(db, environment: world.environment, at: at("2026-03-29T06:15:51Z"))
        #expect(world.twilio.sent.count == 1)
    }
}

/// A user whose zone Nudge does not know: the call preview and a FitCircle invitation, which
/// need no local clock, are delivered; what would need their day (a leaderboard move, capped
/// by their local day and held by quiet hours) is suppressed with why.
@Suite(.serialized, .dropsItsDatabases) struct UnknownZonePreviewTests {
    @Test func aMarsOlympusUsersPreviewReachesThem() async throws {
        let world = try await PreviewWorld.start()
        defer { Task { await world.shutdown() } }
        let db = world.database
        try await Calls.user(db, 1, streak: 3)
        try await db.psql("update users set timezone = 'Mars/Olympus' where id = '\(Fixture.userID(1))'")
        let call = try await Calls.call(db, 1, at: "2026-03-29T06:20:00Z")
        try await db.psql(
            """
            insert into notification_outbox (dedupe_key, job, user_id, local_day, notification_type, deliver_after, title, body)
            values ('leaderboard-refresh:mars', 'leaderboard-refresh', '\(Fixture.userID(1))', '2026-03-29', 'leaderboard_change',
                    '2026-03-29T06:00:00Z', 'Work Warriors', 'moved'),
                   ('fitcircle-invite:mars', 'invites', '\(Fixture.userID(1))', '2026-03-29', 'fitcircle_invite',
                    '2026-03-29T06:00:00Z', 'Lean Team', 'You are invited')
            """)
        try await world.simulate(from: at("2026-03-29T06:14:00Z"), minutes: 2)
        await #expect(try world.sent(call).count == 1)
        #expect(try await db.value("select preview_sent::text from scheduled_calls where id = '\(call)'") == "true")
        #expect(
            try await db.value("select status || ' ' || last_error from notification_outbox where notification_type = 'leaderboard_change'")
                .hasPrefix("suppressed zone: the user's unknown time zone 'Mars/Olympus'"))
        #expect(try await db.value("select status from notification_outbox where notification_type = 'fitcircle_invite'") == "sent")
    }
}
