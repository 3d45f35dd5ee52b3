import Foundation
import Logging
import NudgeStandIns
import PostgresNIO
import Synchronization
import Testing

@testable import NudgeCore

private func at(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }

/// Whether the stand-ins are in their outage, and what they took: shared by their scripts.
private final class Outage: Sendable {
    private let state = Mutex((down: true, taken: [String]()))

    var isDown: Bool { state.withLock { $0.down } }
    var taken: [String] { state.withLock { $0.taken } }

    func end() { state.withLock { $0.down = false } }

    /// What a stand-in answers a probe (a request that sends nothing): an error during the outage.
    func probe<Answer: Sendable>(down: Answer, up: Answer) -> Answer {
        isDown ? down : up
    }

    /// What the stand-in answers: an error during the outage, else it takes `what`.
    func answer<Answer: Sendable>(_ what: String, down: Answer, up: Answer) -> Answer {
        let isDown = state.withLock { state in
            if !state.down { state.taken.append(what) }
            return state.down
        }
        return isDown ? down : up
    }
}

@Suite(.serialized, .dropsItsDatabases) struct ProviderOutageTests {
    /// APNs, FCM and Resend answer 503 to everything for 8 minutes while dispatch runs every
    /// minute and notifications keep falling due, then recover: every notification reaches every
    /// device (and every address) exactly once, none ends failed, and while they were down each
    /// minute's run asked them only a probe's few sends.
    @Test func anOutageOfMinutesLosesNothingAndSendsEachOnce() async throws {
        let database = try await TestDatabase.fresh()
        let outage = Outage()
        let push = try await PushStandIns.start(
            apns: { request in
                outage.answer(
                    "apns \(request.deviceToken) \(request.collapseID ?? "")",
                    down: .reject(status: 503, reason: "ServiceUnavailable"), up: .accept)
            },
            fcm: { request in
                let down = StandInFCM.Answer.reject(status: 503, code: "UNAVAILABLE", message: "The service is currently unavailable.")
                if request.validateOnly { return outage.probe(down: down, up: .accept) }
                return outage.answer("fcm \(request.deviceToken) \(request.collapseKey ?? "")", down: down, up: .accept)
            })
        defer { Task { await push.shutdown() } }
        let resend = try await StandInResend.start(
            reading: {
                outage.probe(down: .reject(status: 503, name: "service_unavailable", message: "Resend is unavailable"), up: .accept)
            },
            script: { email in
                outage.answer(
                    "resend \(email.to)",
                    down: .reject(status: 503, name: "service_unavailable", message: "Resend is unavailable"), up: .accept)
            })
        defer { Task { await resend.shutdown() } }
        var environment = push.environment
        environment.merge([
            "RESEND_API_KEY": resend.apiKey, "RESEND_FROM": "FitCircle <coach@fitcircle.example>",
            "RESEND_BASE_URL": resend.baseURL, "RESEND_REQUESTS_PER_SECOND": "100",
        ]) { _, new in new }

        // 30 iPhones, 10 Android phones, 10 users with both; every user has an address.
        for n in 1...50 {
            try await Outbox.user(database, n, ios: n <= 30 || n > 40 ? 1 : 0, android: n > 30 ? 1 : 0)
            try await database.psql("update users set email = 'user\(n)@example.test' where id = '\(Fixture.userID(n))'")
        }
        // Each user's notifications fall due through the outage, a few every minute.
        let start = at("2026-03-10T12:00:00Z")
        func minute(_ m: Int) -> String { ISO8601DateFormatter().string(from: start.addingTimeInterval(Double(m) * 60)) }
        var pushes = 0
        for n in 1...50 {
            try await Outbox.queue(database, n, type: "streak_at_risk", at: minute(n % 8))
            try await Outbox.queue(database, n, type: "fitcircle_invite", at: minute((n + 3) % 8))
            try await Outbox.email(database, n, at: minute((n + 5) % 8))
            pushes += 2 * ((n <= 30 || n > 40 ? 1 : 0) + (n > 30 ? 1 : 0))
        }

        var requestsDuringOutage: [Int] = []
        var resendRequestsDuringOutage: [Int] = []
        for m in 0..<14 {
            if m == 8 { outage.end() }
            let before = push.apns.requestCount + push.fcm.requestCount
            let emailsBefore = resend.requestCount
            let summary = try await dispatch(database, environment: environment, at: start.addingTimeInterval(Double(m) * 60))
            #expect(summary.exitCode == 0, "minute \(m): \(summary.message ?? "")")
            if (1..<8).contains(m) {
                requestsDuringOutage.append(push.apns.requestCount + push.fcm.requestCount - before)
                resendRequestsDuringOutage.append(resend.requestCount - emailsBefore)
            }
        }

        let statuses = try await database.psql("select status, count(*) from notification_outbox group by 1 order by 1")
        let unsent = try await database.psql("select id, status, attempts, last_error from notification_outbox where status <> 'sent'")
        #expect(statuses == "sent|150", "\(unsent)")
        let taken = outage.taken
        // Every device, also of the ten users with an iPhone and an Android phone, whose
        // notifications one provider (FCM, probed harmlessly) took before the other was back.
        #expect(taken.count == pushes + 50, "\(taken.count) of \(pushes + 50)")
        #expect(Set(taken).count == taken.count, "a device or an address got one notification twice")
        #expect(resend.sent.count == 50)
        // While down, each minute asked each provider a probe's few sends, not its whole backlog.
        #expect(requestsDuringOutage.allSatisfy { $0 <= 3 * ProviderHealth.probeSize + 6 }, "\(requestsDuringOutage)")
        // Resend, asked a few batches a minute (one request is one answer, however many emails
        // it carries), may never be found down: its batches wait between tries, each on its
        // own key's jitter, and spend no attempt either.
        #expect(resendRequestsDuringOutage.allSatisfy { $0 <= 4 }, "\(resendRequestsDuringOutage)")
        // No attempt was spent on the outage: the retries (docs/jobs/dispatch.md, "Retries and
        // waits") are left for the notifications' own trouble. (A user's two devices, on two
        // providers back one after the other, are two attempts that each reached one.)
        #expect(try await database.count("select count(*) from notification_outbox where attempts > greatest(1, cardinality(delivered_to))") == 0)
        #expect(try await database.psql("select provider, state from provider_health order by 1") == "apns|up\nfcm|up\nresend|up\ntwilio|up")
        // What an operator reads meanwhile: the logs name the outage, the rows say what they wait for.
        #expect(try await database.count("select count(*) from notification_logs where status = 'failed'") == 0)
    }

    /// APNs answers 503 to everyone for 8 minutes, then recovers for all but one token, which it
    /// answers with a 500 for ever (the lowest row id, the one a probe would always pick first).
    /// Every other device gets its push within a minute of the recovery, APNs is up again within
    /// two minutes, and the poisoned row waits on its own (tried now and then, spending an
    /// attempt whenever APNs answered others meanwhile) instead of holding APNs down.
    @Test func onePoisonedTokenNeverHoldsAProviderDown() async throws {
        let database = try await TestDatabase.fresh()
        let outage = Outage()
        let poisoned = Outbox.iosToken(1)
        let push = try await PushStandIns.start(apns: { request in
            if request.deviceToken == poisoned { return .reject(status: 500, reason: "InternalServerError") }
            return outage.answer("apns \(request.deviceToken)", down: .reject(status: 503, reason: "ServiceUnavailable"), up: .accept)
        })
        defer { Task { await push.shutdown() } }
        for n in 1...30 { try await Outbox.user(database, n) }
        let start = at("2026-03-10T12:00:00Z")
        for n in 1...30 {
            try await Outbox.queue(database, n, type: "streak_at_risk", at: ISO8601DateFormatter().string(from: start.addingTimeInterval(Double(n % 6) * 60)))
        }
        var upAt: Int?
        for m in 0..<12 {
            if m == 8 { outage.end() }
            let summary = try await dispatch(database, environment: push.environment, at: start.addingTimeInterval(Double(m) * 60))
            #expect(summary.exitCode == 0, "minute \(m): \(summary.message ?? "")")
            if m >= 8, upAt == nil, try await database.value("select state from provider_health where provider = 'apns'") == "up" { upAt = m }
            if m == 8 {
                let unsent = try await database.psql("select id, status, attempts, last_error from notification_outbox where status <> 'sent'")
                #expect(try await database.count("select count(*) from notification_outbox where status = 'sent'") == 29, "\(unsent)")
            }
        }
        let apns = try await database.psql("select state, reason from provider_health where provider = 'apns'")
        #expect(upAt.map { $0 <= 10 } == true, "APNs still \(apns)")
        #expect(Set(outage.taken).count == 29)
        #expect(outage.taken.count == 29)
        // The poisoned row: still waiting, or failed after its attempts; never sent.
        #expect(try await database.value("select status from notification_outbox where user_id = '\(Fixture.userID(1))'") != "sent")
        #expect(push.apns.requests.filter { $0.deviceToken == poisoned }.count <= 12)
    }

    /// Thirty pushes wait for FCM's one connection slot while FCM answers 503: once the first
    /// few answers (from three devices) have found it down, the pushes still waiting for the slot
    /// are asked about FCM again as they get it, and are parked instead of being sent into the
    /// outage; none spends an attempt.
    @Test func pushesWaitingForASlotAreParkedOnceTheirProviderIsFoundDown() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start(fcm: { _ in .reject(status: 503, code: "UNAVAILABLE", message: "The service is currently unavailable.") })
        defer { Task { await push.shutdown() } }
        for n in 1...30 {
            try await Outbox.user(database, n, ios: 0, android: 1)
            try await Outbox.queue(database, n, type: "challenge_milestone", at: "2026-03-10T12:00:00Z")
        }
        let environment = push.environment.merging(["FCM_CONCURRENCY": "1"]) { $1 }
        let summary = try await dispatch(database, environment: environment, at: at("2026-03-10T12:00:10Z"))
        #expect(summary.exitCode == 0, "\(summary.message ?? "")")
        let asked = push.fcm.requests.filter { !$0.validateOnly }.count
        // The three that found it down, and the few that had the slot before the third answer was
        // counted (it is counted once its exchange has given the slot up): never the thirty that
        // went when health was asked only before the wait.
        #expect(asked < 10, "FCM was asked \(asked) notifications")
        #expect(try await database.value("select state from provider_health where provider = 'fcm'") == "down")
        #expect(try await database.psql("select distinct status || ' ' || attempts || ' ' || waiting_for from notification_outbox") == "pending 0 fcm")
    }

    /// Two lanes of one dispatcher write what they learnt at the same time: while both writes
    /// wait (the shared rows locked by another session), what each took is still counted, so
    /// outages from three devices, two learnt by one lane and one by the other, keep APNs down
    /// for both. (With one slot for a write under way, the second lane's took the first's
    /// place, and its two outages were forgotten until the write ended.)
    @Test func twoLanesWritingAtOnceEachKeepWhatTheyLearnt() async throws {
        let database = try await TestDatabase.fresh()
        let health = ChannelHealth(configured: [.apns: .ready], identities: [.apns: "c"], clock: FixedClock(at("2026-03-10T12:00:00Z")))
        let outage = SendResult.unavailable("APNs 503 ServiceUnavailable", after: nil)
        let locker = try await TestSQL.hold("begin; lock table provider_health in access exclusive mode", url: database.url)
        let lanes = Task {
            try await database.withDatabase(connections: 4) { db in
                do {
                    health.record(outage, from: .apns, device: "a")
                    health.record(outage, from: .apns, device: "b")
                    async let first: Void = db.withConnection { connection in
                        try await health.sync(now: at("2026-03-10T12:00:01Z"), dryRun: false, probing: false, on: connection, logger: db.logger)
                    }
                    // The second lane's write begins once the first one waits for the lock.
                    try await db.withConnection { connection in
                        try await waitForLockWaiters(1, on: connection, logger: db.logger)
                    }
                    health.record(outage, from: .apns, device: "c")
                    async let second: Void = db.withConnection { connection in
                        try await health.sync(now: at("2026-03-10T12:00:02Z"), dryRun: false, probing: false, on: connection, logger: db.logger)
                    }
                    try await db.withConnection { connection in
                        try await waitForLockWaiters(2, on: connection, logger: db.logger)
                    }
                    let during = health.health(.apns)
                    await locker.end()
                    _ = try await (first, second)
                    return during
                } catch {
                    // The lanes' writes wait for the lock: released, they end, and the error is seen.
                    await locker.end()
                    throw error
                }
            }
        }
        let during = try #require(try await ending { try await lanes.value }, "the lanes' writes did not end")
        #expect(during.state == .down, "\(during)")
        #expect(try await database.value("select state from provider_health where provider = 'apns'") == "down")
    }

    /// While APNs is down, each probe wakes rows of distinct users, the next ones after the last
    /// probe's, starting over at the first: never a row of the probe just before, and never the
    /// same few lowest ids again and again.
    @Test func probesRotateThroughTheParkedRowsOneUserEach() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start(apns: { _ in .reject(status: 503, reason: "ServiceUnavailable") })
        defer { Task { await push.shutdown() } }
        for n in 1...5 { try await Outbox.user(database, n) }
        var rows = await [try Outbox.queue(database, 1, type: "fitcircle_invite", at: "2026-03-10T12:00:00Z")]
        for n in 1...5 { await rows.append(try Outbox.queue(database, n, type: "challenge_milestone", at: "2026-03-10T12:00:00Z")) }
        rows.sort()
        try await database.psql(
            """
            update provider_health set state = 'down', since = '2026-03-10T11:59:00Z', reason = 'test', probe_at = '2026-03-10T12:00:00Z'
             where provider = 'apns';
            update notification_outbox set waiting_for = 'apns', next_attempt_at = '2026-03-11T12:00:00Z';
            """)
        var probes: [[Int64]] = []
        for k in 0..<3 {
            _ = try await dispatch(database, environment: push.environment, at: at("2026-03-10T12:00:01Z").addingTimeInterval(30 * Double(k)))
            let probe = try await database.value("select array_to_string(probe_rows, ',') from provider_health where provider = 'apns'")
            probes.append(probe.split(separator: ",").compactMap { Int64($0) })
        }
        let users = try await database.psql("select id, user_id from notification_outbox order by id")
        #expect(probes == [[rows[0], rows[2], rows[3]], [rows[1], rows[4], rows[5]], [rows[0], rows[2], rows[3]]], "\(probes)\n\(users)")
        for probe in probes {
            #expect(
                try await database.count(
                    "select count(distinct user_id) from notification_outbox where id = any('{\(probe.map(String.init).joined(separator: ","))}')")
                    == probe.count)
        }
        #expect(try await database.psql("select distinct status || ' ' || attempts || ' ' || waiting_for from notification_outbox") == "pending 0 apns")
    }

    /// FCM and Resend found down are probed with requests that send nobody anything (a message
    /// validated only, a read of the team's domains), never with a parked notification: while
    /// they answer 503, no notification is asked of them and none spends an attempt; the first
    /// probe they answer brings them up, and what was parked goes in that same run, each once.
    @Test func aProviderDownIsProbedWithRequestsThatSendNothing() async throws {
        let database = try await TestDatabase.fresh()
        let outage = Outage()
        let push = try await PushStandIns.start(fcm: { request in
            let down = StandInFCM.Answer.reject(status: 503, code: "UNAVAILABLE", message: "The service is currently unavailable.")
            if request.validateOnly { return outage.probe(down: down, up: .accept) }
            return outage.answer("fcm \(request.deviceToken)", down: down, up: .accept)
        })
        defer { Task { await push.shutdown() } }
        let resendDown = StandInResend.Answer.reject(status: 503, name: "service_unavailable", message: "Resend is unavailable")
        let resend = try await StandInResend.start(
            reading: { outage.probe(down: resendDown, up: .accept) },
            script: { email in outage.answer("resend \(email.to)", down: resendDown, up: .accept) })
        defer { Task { await resend.shutdown() } }
        var environment = push.environment
        environment.merge([
            "RESEND_API_KEY": resend.apiKey, "RESEND_FROM": "FitCircle <coach@fitcircle.example>",
            "RESEND_BASE_URL": resend.baseURL,
        ]) { _, new in new }
        for n in 1...4 {
            try await Outbox.user(database, n, ios: 0, android: 1)
            try await database.psql("update users set email = 'user\(n)@example.test' where id = '\(Fixture.userID(n))'")
            try await Outbox.queue(database, n, type: "challenge_milestone", at: "2026-03-10T12:00:00Z")
            try await Outbox.email(database, n, at: "2026-03-10T12:00:00Z")
        }
        // Both were found down a minute ago; their notifications are parked.
        try await database.psql(
            """
            update provider_health set state = 'down', since = '2026-03-10T11:59:00Z', reason = 'test', probe_at = '2026-03-10T12:00:00Z'
             where provider in ('fcm', 'resend');
            update notification_outbox set waiting_for = case channel when 'email' then 'resend' else 'fcm' end,
                                           next_attempt_at = '2026-03-11T12:00:00Z';
            """)
        // A dry run probes nothing.
        let configured = environment
        _ = try await database.withDatabase { db in
            try await DeliveryServices.with(Environment(configured), dryRun: true) { services in
                let options = RunOptions(now: at("2026-03-10T12:00:01Z"), nowIsExplicit: true, batchSize: 50, dryRun: true)
                let job = DispatchJob(definition: jobDefinition("dispatch"), push: services, lease: 120, dryRun: true, clock: options.clock)
                return try await JobRunner(job: job, options: options, database: db, observer: SilentObserver()).run()
            }
        }
        #expect(push.fcm.validations == 0 && resend.reads == 0)
        for k in 0..<2 {
            let summary = try await dispatch(database, environment: environment, at: at("2026-03-10T12:00:01Z").addingTimeInterval(30 * Double(k)))
            #expect(summary.exitCode == 0, "\(summary.message ?? "")")
            #expect(push.fcm.validations == k + 1 && resend.reads == k + 1, "probe \(k): \(push.fcm.validations) \(resend.reads)")
        }
        #expect(push.fcm.requestCount == 0 && resend.requestCount == 0, "a notification went out as a probe")
        #expect(
            try await database.psql("select provider, state from provider_health where provider in ('fcm', 'resend') order by 1")
                == "fcm|down\nresend|down")
        #expect(try await database.psql("select distinct status || ' ' || attempts from notification_outbox") == "pending 0")

        outage.end()
        let summary = try await dispatch(database, environment: environment, at: at("2026-03-10T12:01:01Z"))
        #expect(summary.exitCode == 0, "\(summary.message ?? "")")
        #expect(
            try await database.psql("select provider, state from provider_health where provider in ('fcm', 'resend') order by 1")
                == "fcm|up\nresend|up")
        #expect(try await database.psql("select status, count(*) from notification_outbox group by 1") == "sent|8")
        #expect(outage.taken.count == 8 && Set(outage.taken).count == 8, "\(outage.taken)")
        #expect(push.fcm.validations == 3 && resend.reads == 3)
    }

    /// One push a minute through a 15-minute FCM 503: FCM never counts as down (each minute
    /// has one answer), and no row fails for good: each waits, spending no attempt, and is sent
    /// once FCM is back.
    @Test func aTrickleThroughAFifteenMinuteOutageFailsNothing() async throws {
        let database = try await TestDatabase.fresh()
        let outage = Outage()
        let push = try await PushStandIns.start(fcm: { request in
            let down = StandInFCM.Answer.reject(status: 503, code: "UNAVAILABLE", message: "The service is unavailable.")
            if request.validateOnly { return outage.probe(down: down, up: .accept) }
            return outage.answer("fcm \(request.deviceToken)", down: down, up: .accept)
        })
        defer { Task { await push.shutdown() } }
        let start = at("2026-03-10T12:00:00Z")
        for n in 1...15 {
            try await Outbox.user(database, n, ios: 0, android: 1)
            try await Outbox.queue(database, n, type: "streak_at_risk", at: ISO8601DateFormatter().string(from: start.addingTimeInterval(Double(n - 1) * 60)))
        }
        for m in 0..<27 {
            if m == 15 { outage.end() }
            let summary = try await dispatch(database, environment: push.environment, at: start.addingTimeInterval(Double(m) * 60))
            #expect(summary.exitCode == 0, "minute \(m): \(summary.message ?? "")")
            #expect(try await database.count("select count(*) from notification_outbox where status = 'failed'") == 0, "minute \(m)")
        }
        #expect(try await database.psql("select status, count(*) from notification_outbox group by 1") == "sent|15")
        #expect(try await database.count("select count(*) from notification_outbox where attempts > 1") == 0)
        #expect(Set(outage.taken).count == 15 && outage.taken.count == 15)
    }

    /// A quiet night: five users who deleted the app get their pushes at 23:30, when hardly anyone
    /// else gets one, and APNs calls their tokens unknown run after run; ten good iPhones get
    /// theirs through the night. APNs is never paused, every run exits 0, the ten get their push
    /// and the five tokens end inactive.
    @Test func aQuietNightsStaleTokensPauseNothing() async throws {
        let database = try await TestDatabase.fresh()
        let stale = Set((1...5).map { Outbox.iosToken($0) })
        let push = try await PushStandIns.start(apns: { request in
            stale.contains(request.deviceToken) ? .reject(status: 400, reason: "BadDeviceToken") : .accept
        })
        defer { Task { await push.shutdown() } }
        for n in 1...15 { try await Outbox.user(database, n) }
        for n in 1...5 { try await Outbox.queue(database, n, type: "challenge_milestone", at: "2026-03-10T23:30:00Z") }
        for n in 6...15 {
            try await Outbox.queue(
                database, n, type: "fitcircle_invite",
                at: ISO8601DateFormatter().string(from: at("2026-03-10T23:40:00Z").addingTimeInterval(Double(n - 6) * 15 * 60)))
        }
        var now = at("2026-03-10T23:30:00Z")
        var exits: Set<Int32> = []
        while now <= at("2026-03-11T03:00:00Z") {
            let summary = try await dispatch(database, environment: push.environment, at: now)
            exits.insert(summary.exitCode)
            #expect(try await database.value("select state from provider_health where provider = 'apns'") == "up", "\(now)")
            now = now.addingTimeInterval(5 * 60)
        }
        #expect(exits.isSubset(of: [0, 3]), "\(exits)")
        #expect(try await database.count("select count(*) from notification_outbox where status = 'sent'") == 10)
        #expect(try await database.psql("select device_token from user_push_tokens where not active order by 1") == stale.sorted().joined(separator: "\n"))
    }

    /// APNs down for 30 hours: a streak at risk, worth sending on its own local day, is never
    /// delivered after that day ended; it ends suppressed (`expired`), and uses no later day's
    /// cap. The day after's reminder goes out once APNs is back.
    @Test func aLongOutageLetsNothingStaleGoOut() async throws {
        let database = try await TestDatabase.fresh()
        let outage = Outage()
        let push = try await PushStandIns.start(apns: { request in
            outage.answer(
                "apns \(request.deviceToken) \(request.collapseID ?? "")",
                down: .reject(status: 503, reason: "ServiceUnavailable"), up: .accept)
        })
        defer { Task { await push.shutdown() } }
        let zones = ["Europe/Paris", "America/Los_Angeles", "Asia/Tokyo"]
        var atRisk: [Int64] = []
        for n in 1...12 {
            try await Outbox.user(database, n, zone: zones[n % 3])
            // 18:00 on Monday 9 March, local.
            let local = try await database.value(
                "select to_char(('2026-03-09 18:00'::timestamp at time zone '\(zones[n % 3])') at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')")
            await atRisk.append(try Outbox.queue(database, n, type: "streak_at_risk", at: local, day: "2026-03-09"))
        }
        var now = at("2026-03-09T02:00:00Z")
        let recovery = now.addingTimeInterval(30 * 3600)
        // The day after's check-in reminder, due when APNs comes back.
        let reminder = try await Outbox.queue(database, 1, type: "daily_checkin", at: "2026-03-10T08:00:00Z")
        while now <= recovery.addingTimeInterval(3600) {
            if now >= recovery { outage.end() }
            let summary = try await dispatch(database, environment: push.environment, at: now)
            #expect(summary.exitCode == 0, "\(summary.message ?? "")")
            now = now.addingTimeInterval(20 * 60)
        }
        let stale = try await database.psql(
            """
            select status || ' ' || split_part(last_error, ':', 1) from notification_outbox where id = any('{\(atRisk.map(String.init).joined(separator: ","))}')
             group by 1
            """)
        #expect(stale == "suppressed expired")
        #expect(
            try await database.count(
                """
                select count(*) from notification_logs where status = 'suppressed' and error_msg like 'expired: streak_at_risk%'
                """) == 12)
        #expect(!outage.taken.contains { $0.hasSuffix("nudge-\(atRisk[0])") })
        #expect(outage.taken.count == 1)
        #expect(try await database.value("select status from notification_outbox where id = \(reminder)") == "sent")
    }

    /// A wrong APNS_ENVIRONMENT at three notifications a minute: every token is called unknown,
    /// but never enough at once within one run to look like a burst. Across runs the shared
    /// window sees it (twenty distinct devices by the seventh minute), the provider is paused and
    /// the runs say so, and no valid token is deactivated on the way.
    @Test func aWrongEnvironmentAtATrickleDeactivatesNoValidToken() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start(apns: { _ in .reject(status: 400, reason: "BadDeviceToken") })
        defer { Task { await push.shutdown() } }
        let start = at("2026-03-10T12:00:00Z")
        var exits: [Int32] = []
        for m in 0..<8 {
            for k in 1...3 {
                let n = m * 3 + k
                try await Outbox.user(database, n)
                try await Outbox.queue(database, n, type: "streak_at_risk", at: ISO8601DateFormatter().string(from: start.addingTimeInterval(Double(m) * 60)))
            }
            let summary = try await dispatch(database, environment: push.environment, at: start.addingTimeInterval(Double(m) * 60))
            exits.append(summary.exitCode)
        }
        #expect(try await database.count("select count(*) from user_push_tokens where not active") == 0)
        #expect(try await database.psql("select state, burst from provider_health where provider = 'apns'") == "paused|t")
        // Found in the seventh minute; every run after it says so and exits 1 until it is fixed.
        #expect(exits == [0, 0, 0, 0, 0, 0, 1, 1])
        #expect(try await database.count("select count(*) from notification_outbox where status <> 'pending'") == 0)
        // Paused, APNs is asked nothing more but a probe now and then.
        #expect(push.apns.requestCount <= 21 + ProviderHealth.probeSize)
        // What an operator reads.
        let list = try await database.nudge(["list"], environment: push.environment)
        #expect(list.stdout.contains("APNs: configured: sandbox, topic \(push.apns.bundleID) — APNs is paused since"), "\(list.stdout)")
        #expect(list.stdout.contains("FCM: configured: project"))
        #expect(!list.stdout.contains("FCM is"))
    }

    /// FCM answers 200 and never finishes its body: the batch's sends end at their bound, FCM is
    /// found down (not the database), the run and the rows say so in words, and the
    /// notifications wait for it without spending an attempt.
    @Test func aProviderThatStallsIsNamedAndWaitedFor() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start(fcm: { _ in .stallAfterHead })
        defer { Task { await push.shutdown() } }
        for n in 1...3 {
            try await Outbox.user(database, n, ios: 0, android: 1)
            try await Outbox.queue(database, n, type: "streak_at_risk", at: "2026-03-10T12:00:00Z")
        }
        let environment = push.environment.merging(["NUDGE_PUSH_TIMEOUT_SECONDS": "1"]) { _, new in new }
        let summary = try await dispatch(database, environment: environment, at: at("2026-03-10T12:00:30Z"))
        #expect(summary.counts.failed == 0 && summary.tally["waiting"] == 3)
        let note = try #require(summary.message)
        #expect(
            note.contains(
                "FCM is down since 2026-03-10T12:00:30Z: 3 of its last 3 requests got no answer "
                    + "(last: no whole answer within the batch's time bound (it stalled))"), "\(note)")
        #expect(!note.contains("database") && !note.contains("Cancellation"))
        #expect(try await database.psql("select distinct status || ' ' || attempts || ' ' || waiting_for from notification_outbox") == "pending 0 fcm")
    }

    /// A Twilio that takes 0.6 s to answer each request while 300 call previews (SMS only) fall
    /// due in one minute, sent by a dispatcher as cron starts it (four lanes of 100 users): the
    /// requests wait for one of Twilio's connections outside their time-out, each phone gets its
    /// one SMS, and none is "outcome unknown".
    @Test func aSlowTwilioGetsEverySMSOnce() async throws {
        let world = try await PreviewWorld.start(twilioLatency: .milliseconds(600))
        defer { Task { await world.shutdown() } }
        for n in 1...300 { try await Calls.user(world.database, n, preference: "sms_only", ios: 0) }
        try await world.database.psql(
            """
            insert into scheduled_calls (user_id, scheduled_at, status, topic)
            select id, '2026-03-29T06:20:00Z', 'pending', 'fitness_checkin' from users
            """)
        _ = try await previews(world.database, at: at("2026-03-29T06:15:00Z"))
        #expect(try await world.database.count("select count(*) from notification_outbox where channel = 'sms'") == 300)
        let result = try await world.database.nudge(["run", "dispatch", "--now", "2026-03-29T06:15:02Z"], environment: world.environment)
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        let outcomes = try await world.database.psql("select status, count(*) from notification_outbox group by 1")
        let detail = try await world.database.psql("select status, last_error, count(*) from notification_outbox group by 1, 2")
        #expect(outcomes == "sent|300", "\(detail)")
        #expect(try await world.database.count("select count(*) from notification_outbox where last_error like 'outcome unknown%'") == 0)
        let perPhone = Dictionary(grouping: world.twilio.sent, by: \.to)
        #expect(perPhone.count == 300)
        #expect(perPhone.values.allSatisfy { $0.count == 1 })
        // Twilio keeps none of them past its call.
        #expect(world.twilio.sent.allSatisfy { ($0.validityPeriod ?? 0) > 0 && ($0.validityPeriod ?? .max) <= 300 })
    }
}

/// Returns once `count` sessions wait for a lock on `provider_health`: watched by the server
/// itself, in one statement bounded by the tests' budget (PostgreSQL tells no one of a lock
/// wait beginning, so the server looks every 10 ms; the test process waits on the statement).
private func waitForLockWaiters(_ count: Int, on connection: PostgresConnection, logger: Logger) async throws {
    let seconds = Int(TestBudget.seconds)
    try await connection.query(
        """
        do $$
        declare deadline timestamptz := clock_timestamp() + make_interval(secs => \(unescaped: String(seconds)));
        begin
          -- pg_locks is the whole server's, and every test database copied from the template
          -- gives provider_health the same oid: only this database's waits count.
          while (select count(*) from pg_locks
                  where locktype = 'relation' and database = (select oid from pg_database where datname = current_database())
                    and relation = 'provider_health'::regclass and not granted) < \(unescaped: String(count)) loop
            if clock_timestamp() > deadline then raise exception 'no % sessions waited for provider_health', \(unescaped: String(count)); end if;
            perform pg_sleep(0.01);
          end loop;
        end $$
        """, logger: logger)
}
