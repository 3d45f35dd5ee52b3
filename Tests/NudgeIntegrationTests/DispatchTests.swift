import Foundation
import NudgeStandIns
import PostgresNIO
import Testing

@testable import NudgeCore

@Suite(.serialized, .dropsItsDatabases) struct DispatchDeliveryTests {
    /// One user with an iPhone and an Android phone, one with users.fcm_token only: each device
    /// gets the notification once, in its platform's shape, and every attempt is logged.
    @Test func everyDeviceGetsItOnceInItsPlatformsShape() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start()
        defer { Task { await push.shutdown() } }
        try await Outbox.user(database, 1, ios: 1, android: 1)
        try await Outbox.user(database, 2, ios: 0)
        try await database.psql("update users set fcm_token = 'legacy-token-2:APA91b' where id = '\(Fixture.userID(2))'")
        let first = try await Outbox.queue(
            database, 1, type: "streak_at_risk", at: "2026-03-10T09:00:00Z", title: "🔥 Your 12-day streak is at risk",
            body: "Check in today", payload: #"{"type":"streak_at_risk","deep_link":"fitcircle://checkin","streak":12}"#)
        try await Outbox.queue(database, 2, type: "proactive_push", at: "2026-03-10T09:00:00Z", title: "Hi", body: "How did it go?")

        let result = try await database.nudge(["run", "dispatch", "--now", "2026-03-10T09:00:30Z"], environment: push.environment)
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")

        let apns = push.apns.requests
        #expect(apns.count == 1)
        let request = try #require(apns.first)
        #expect(request.deviceToken == Outbox.iosToken(1))
        #expect(request.headers["apns-topic"] == push.apns.bundleID)
        #expect(request.headers["apns-push-type"] == "alert")
        #expect(request.headers["apns-priority"] == "10")
        #expect(request.headers["apns-collapse-id"] == "nudge-\(first)")
        #expect(request.headers["apns-id"].flatMap(UUID.init(uuidString:)) != nil)
        #expect(Int(request.headers["apns-expiration"] ?? "") != nil)
        #expect(request.alert?.title == "🔥 Your 12-day streak is at risk")
        #expect(request.data["deep_link"] == "fitcircle://checkin")
        #expect(request.data["streak"] == "12")

        let fcm = push.fcm.requests
        #expect(Set(fcm.map(\.deviceToken)) == [Outbox.androidToken(1), "legacy-token-2:APA91b"])
        #expect(fcm.allSatisfy { $0.accessToken == push.fcm.issuedTokens.first })
        #expect(fcm.first { $0.deviceToken == "legacy-token-2:APA91b" }?.collapseKey == "nudge-proactive_push")

        #expect(
            try await database.psql("select status || ' ' || array_length(delivered_to, 1) from notification_outbox order by id")
                == "sent 2\nsent 1")
        #expect(try await database.count("select count(*) from notification_logs where status = 'sent' and provider_id is not null") == 3)
        #expect(
            try await database.value("select provider_id from notification_logs where provider = 'apns'")
                == request.headers["apns-id"])
    }
}

extension DispatchDeliveryTests {
    /// A user with a year of history (20,000 notifications sent, their logs) costs dispatch what
    /// a new one does: its claims, caps, grouping, previews and release read the open rows and
    /// the last days' sends, never the history.
    @Test func aYearOfHistoryDoesNotMakeTheNextNotificationCostMore() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start()
        defer { Task { await push.shutdown() } }
        try await Outbox.user(database, 1)
        try await Outbox.user(database, 2)
        let veteran = Fixture.userID(1)
        try await database.psql(
            """
            begin;
            insert into notification_outbox (dedupe_key, job, user_id, local_day, notification_type, deliver_after, title, body,
                                             status, sent_at, next_attempt_at, attempts, delivered_to, created_at)
            select 'history:' || n, 'test', '\(veteran)', d::date, 'social_engagement', d, 'Old', 'Body',
                   'sent', d, 'infinity', 1, array['\(Outbox.iosToken(1))'], d
              from generate_series(1, 20000) n,
                   lateral (select timestamptz '2026-03-09T09:00:00Z' - n * interval '26 minutes' as d) t;
            insert into notification_logs (user_id, notification_type, channel, status, title, body, outbox_id, sent_at, created_at)
            select '\(veteran)', 'social_engagement', 'push', 'sent', 'Old', 'Body', n, d, d
              from generate_series(1, 20000) n,
                   lateral (select timestamptz '2026-03-09T09:00:00Z' - n * interval '26 minutes' as d) t;
            commit;
            analyze notification_outbox;
            analyze notification_logs;
            """)
        try await Outbox.queue(database, 1, type: "streak_at_risk", at: "2026-03-10T09:00:00Z")
        try await Outbox.queue(database, 2, type: "streak_at_risk", at: "2026-03-10T09:00:00Z")

        let before = try await database.rowsRead(["notification_outbox", "notification_logs"])
        let result = try await database.nudge(["run", "dispatch", "--now", "2026-03-10T09:00:30Z"], environment: push.environment)
        #expect(result.status == 0, "\(result.stderr)")
        // Counted before this test's own queries read anything.
        let read = try await database.rowsRead(["notification_outbox", "notification_logs"]) - before
        #expect(push.apns.requestCount == 2)
        #expect(try await database.count("select count(*) from notification_outbox where status = 'sent' and local_day = '2026-03-10'") == 2)
        // What the caps look back on (the last 8 days' sends, about 440 rows), and a little more:
        // never the 40,000 rows of the year.
        let recent = try await database.count(
            """
            select count(*) from notification_outbox where user_id = '\(veteran)' and sent_at >= '2026-03-02T09:00:30Z'
            """)
        #expect(read < recent + 150, "\(read) rows of the outbox and logs read; \(recent) sent in the caps' 8 days")
    }
}

@Suite(.serialized, .dropsItsDatabases) struct DispatchProviderAnswerTests {
    /// Each provider answer ends as it should: an invalid token is deactivated (kept for
    /// audit), a 429, a 5xx and a time-out are retried and delivered on a later attempt.
    @Test func eachAnswerEndsAsItShould() async throws {
        let database = try await TestDatabase.fresh()
        let apnsAnswers: [String: StandInAPNs.Answer] = [
            Outbox.iosToken(1): .reject(status: 410, reason: "Unregistered"),
            Outbox.iosToken(2): .reject(status: 400, reason: "BadDeviceToken"),
            Outbox.iosToken(3): .reject(status: 429, reason: "TooManyRequests"),
            Outbox.iosToken(4): .reject(status: 500, reason: "InternalServerError"),
            Outbox.iosToken(5): .hang,
        ]
        let fcmAnswers: [String: StandInFCM.Answer] = [
            Outbox.androidToken(7): .reject(status: 404, code: "UNREGISTERED", message: "Requested entity was not found."),
            Outbox.androidToken(8): .reject(
                status: 400, code: "INVALID_ARGUMENT",
                message: "The registration token is not a valid FCM registration token"),
            Outbox.androidToken(9): .reject(status: 503, code: "UNAVAILABLE", message: "The service is unavailable.", retryAfter: "45"),
        ]
        let push = try await PushStandIns.start(
            apns: { request in request.attempt == 1 ? apnsAnswers[request.deviceToken] ?? .accept : .accept },
            fcm: { request in request.attempt == 1 ? fcmAnswers[request.deviceToken] ?? .accept : .accept })
        defer { Task { await push.shutdown() } }
        // Five more devices on each platform that take their push: each provider has shown that
        // its configuration is right, so an unknown token is unknown indeed.
        for n in Array(1...6) + Array(12...16) { try await Outbox.user(database, n, ios: 1) }
        for n in Array(7...11) + Array(17...21) { try await Outbox.user(database, n, ios: 0, android: 1) }
        for n in 1...21 { try await Outbox.queue(database, n, type: "streak_at_risk", at: "2026-03-10T12:00:00Z") }

        // The time-out ends the wait for the one device that never answers. 20 s, not less: the
        // stand-ins answer from this test process, which forty suites load, and at 5 s a whole
        // run of CI once saw answers that had not come yet within 5 s taken for time-outs.
        let environment = push.environment.merging(["NUDGE_PUSH_TIMEOUT_SECONDS": "20"]) { _, new in new }
        let first = try await database.nudge(["run", "dispatch", "--now", "2026-03-10T12:00:10Z"], environment: environment)
        #expect(first.status == 0, "\(first.stdout)\n\(first.stderr)")
        #expect(
            try await database.psql("select device_token from user_push_tokens where not active order by 1")
                == [Outbox.iosToken(1), Outbox.iosToken(2), Outbox.androidToken(7), Outbox.androidToken(8)].sorted().joined(separator: "\n"))
        let pending = try await database.psql(
            """
            select u.n || ' ' || o.attempts from notification_outbox o
              join (select id, row_number() over (order by created_at) n from users) u on u.id = o.user_id
             where o.status = 'pending' order by 1
            """)
        #expect(pending.split(separator: "\n").count == 4, "\(pending)")
        // UNAVAILABLE waits its retry-after.
        #expect(
            try await database.value(
                """
                select extract(epoch from next_attempt_at - '2026-03-10T12:00:10Z')::int from notification_outbox
                 where user_id = '\(Fixture.userID(9))'
                """) == "45")
        // The run's summary counts what became of each notification and the tokens it pruned.
        let summary = try await database.psql(
            """
            select key || '=' || value from job_runs, jsonb_each_text(summary)
             where id = (select max(id) from job_runs where job = 'dispatch') order by 1
            """)
        #expect(summary == "failed=4\npushes_sent:apns=6\npushes_sent:fcm=7\nretrying=4\nsent=13\ntokens_deactivated=4")

        let second = try await database.nudge(["run", "dispatch", "--now", "2026-03-10T12:01:30Z"], environment: environment)
        #expect(second.status == 0, "\(second.stdout)\n\(second.stderr)")
        let detail = try await database.psql("select user_id, status, attempts, last_error from notification_outbox order by 1")
        #expect(
            try await database.psql("select status, count(*) from notification_outbox group by 1 order by 1") == "failed|4\nsent|17",
            "\(detail)")
        #expect(
            try await database.value("select last_error from notification_outbox where user_id = '\(Fixture.userID(1))'")
                .contains("410 Unregistered"))
        // Every attempt is a row: 21 first attempts and 4 retries.
        #expect(try await database.count("select count(*) from notification_logs") == 25)
        #expect(try await database.count("select count(*) from notification_logs where status = 'sent'") == 17)
        // The retry carried the first attempt's collapse id and apns-id.
        let retried = push.apns.requests.filter { $0.deviceToken == Outbox.iosToken(4) }
        #expect(retried.count == 2)
        #expect(Set(retried.compactMap(\.collapseID)).count == 1)
        #expect(Set(retried.compactMap { $0.headers["apns-id"] }).count == 1)
        // Provider keys are in no table, no log and no output.
        let key = push.apns.privateKeyPEM.split(separator: "\n")[1]
        #expect(!(try await database.dump()).contains(key))
        #expect(!(first.stdout + first.stderr + second.stdout + second.stderr).contains(key))
    }

    /// A user whose only device is the legacy users.fcm_token, with two notifications grouped into
    /// one delivery that FCM answers UNREGISTERED: the token is recorded inactive once, the run
    /// goes on.
    @Test func anUninstalledLegacyTokenOfAGroupedDeliveryIsRecordedOnce() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start(fcm: { request in
            request.deviceToken.hasPrefix("legacy") ? .reject(status: 404, code: "UNREGISTERED", message: "Requested entity was not found.") : .accept
        })
        defer { Task { await push.shutdown() } }
        try await Outbox.user(database, 1, ios: 0)
        try await database.psql("update users set fcm_token = 'legacy-1:APA91b' where id = '\(Fixture.userID(1))'")
        try await Outbox.user(database, 2, ios: 0, android: 1)
        for n in 1...2 {
            try await Outbox.queue(database, n, type: "leaderboard_change", at: "2026-03-10T12:00:00Z")
            try await Outbox.queue(database, n, type: "leaderboard_change", at: "2026-03-10T12:02:00Z")
        }
        let result = try await database.nudge(["run", "dispatch", "--now", "2026-03-10T12:02:30Z"], environment: push.environment)
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        #expect(
            try await database.psql("select device_token, active from user_push_tokens where user_id = '\(Fixture.userID(1))'")
                == "legacy-1:APA91b|f")
        #expect(try await database.psql("select status, count(*) from notification_outbox group by 1 order by 1") == "failed|2\nsent|2")
        #expect(push.fcm.requestCount == 2)
        // The push_tokens view no longer offers the token.
        #expect(try await database.count("select count(*) from push_tokens where user_id = '\(Fixture.userID(1))'") == 0)
    }

    /// A message FCM refuses for what it is (a reserved data key), not for its token: that
    /// notification fails with FCM's words, the provider goes on for everyone else.
    @Test func aMessageTheProviderRefusesFailsAloneWithoutPausingIt() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start(fcm: { request in
            request.data["from"] != nil
                ? .reject(status: 400, code: "INVALID_ARGUMENT", message: "Invalid data payload key: from") : .accept
        })
        defer { Task { await push.shutdown() } }
        for n in 1...8 { try await Outbox.user(database, n, ios: 0, android: 1) }
        try await Outbox.queue(database, 1, type: "social_engagement", at: "2026-03-10T12:00:00Z", payload: #"{"from":"alex"}"#)
        for n in 2...8 { try await Outbox.queue(database, n, type: "social_engagement", at: "2026-03-10T12:00:00Z") }
        let result = try await database.nudge(["run", "dispatch", "--now", "2026-03-10T12:00:10Z"], environment: push.environment)
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        #expect(
            try await database.value("select status || ': ' || last_error from notification_outbox where user_id = '\(Fixture.userID(1))'")
                .hasSuffix("FCM 400 INVALID_ARGUMENT: Invalid data payload key: from"))
        #expect(try await database.count("select count(*) from notification_outbox where status = 'sent'") == 7)
        #expect(try await database.count("select count(*) from user_push_tokens where not active") == 0)
    }

    /// Many uninstalled apps at once (the evening reminder to those who stopped using the app)
    /// are that many uninstalled apps: their tokens are deactivated, the provider is not paused.
    @Test func aWaveOfUninstalledAppsDeactivatesTheirTokens() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start(apns: { request in
            request.deviceToken < Outbox.iosToken(9) ? .reject(status: 410, reason: "Unregistered") : .accept
        })
        defer { Task { await push.shutdown() } }
        for n in 1...10 { try await Outbox.user(database, n) }
        for n in 1...10 { try await Outbox.queue(database, n, type: "daily_checkin", at: "2026-03-10T20:00:00Z") }
        let result = try await database.nudge(["run", "dispatch", "--now", "2026-03-10T20:00:10Z"], environment: push.environment)
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        #expect(try await database.count("select count(*) from user_push_tokens where not active") == 8)
        #expect(try await database.psql("select status, count(*) from notification_outbox group by 1 order by 1") == "failed|8\nsent|2")
    }

    /// FCM's project quota holds every FCM send; the notification waits for the time FCM asks,
    /// without spending an attempt.
    @Test func aProjectOverItsQuotaHoldsItsNotificationsWithoutSpendingAttempts() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start(fcm: { _ in
            .reject(status: 429, code: "QUOTA_EXCEEDED", message: "Quota exceeded.", retryAfter: "90")
        })
        defer { Task { await push.shutdown() } }
        try await Outbox.user(database, 1, ios: 0, android: 1)
        try await Outbox.queue(database, 1, type: "social_engagement", at: "2026-03-10T12:00:00Z")
        let result = try await database.nudge(["run", "dispatch", "--now", "2026-03-10T12:00:10Z"], environment: push.environment)
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        #expect(
            try await database.value(
                """
                select status || ' ' || attempts || ' ' || extract(epoch from next_attempt_at - '2026-03-10T12:00:10Z')::int
                  from notification_outbox
                """) == "pending 0 90")
    }

    /// A user another dispatcher holds (their lease) is left to it: none of their rows is taken.
    @Test func aLeasedUserIsLeftToTheDispatcherHoldingThem() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start()
        defer { Task { await push.shutdown() } }
        for n in 1...2 {
            try await Outbox.user(database, n)
            try await Outbox.queue(database, n, type: "social_engagement", at: "2026-03-10T12:00:00Z")
        }
        try await database.psql("insert into dispatch_leases values ('\(Fixture.userID(1))', 999, now() + interval '1 hour')")
        let result = try await database.nudge(["run", "dispatch", "--now", "2026-03-10T12:00:10Z"], environment: push.environment)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(
            try await database.psql("select status, attempts from notification_outbox order by user_id = '\(Fixture.userID(1))'")
                == "sent|1\npending|0")
        #expect(push.apns.requests.map(\.deviceToken) == [Outbox.iosToken(2)])
    }

    /// One provider token serves every push of a run and the runs after it; a new one is made
    /// only when the stored one is 50 minutes old: over an hour of cron runs, two.
    @Test func providerTokensOutliveTheProcess() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start()
        defer { Task { await push.shutdown() } }
        for n in 1...3 { try await Outbox.user(database, n, ios: 1, android: 1) }
        for minute in 0..<60 {
            // Each cron run is a new process a minute after the last: the stored token ages a minute.
            try await database.psql("update provider_tokens set issued_at = issued_at - interval '1 minute', expires_at = expires_at - interval '1 minute'")
            let now = String(format: "2026-03-10T12:%02d:00Z", minute)
            if minute % 6 == 0 {
                for n in 1...3 {
                    try await Outbox.queue(database, n, type: "fitcircle_invite", at: now)
                }
            }
            if minute == 0 {
                // Two dispatchers start together with no token stored yet: they make one between them.
                let runs = try (0..<2).map { _ in try database.startNudge(["run", "dispatch", "--now", now], environment: push.environment) }
                for run in runs { #expect(await run.finished().status == 0) }
                continue
            }
            let result = try await database.nudge(["run", "dispatch", "--now", now], environment: push.environment)
            #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        }
        #expect(push.apns.requestCount == 30)
        // Made at the first run and renewed once its stored copy was 50 minutes old; at most three
        // over the hour, as Apple's limit wants (a renewal may fall a run early on a busy machine).
        #expect((2...3).contains(push.apns.providerTokens.count))
        // FCM's access token lasts an hour: renewed five minutes before it expires.
        #expect((1...2).contains(push.fcm.issuedTokens.count))
        #expect(try await database.count("select count(*) from provider_tokens") == 2)
        #expect(try await database.count("select count(*) from notification_outbox where status = 'sent'") == 30)
    }

    /// A burst of BadDeviceToken across many devices is the configuration's fault (sandbox tokens
    /// against production): the channel pauses, no token is deactivated, nothing is dropped, and
    /// the run says so and exits 1.
    @Test func aBurstOfInvalidTokensPausesTheChannelInsteadOfPruning() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start(apns: { _ in .reject(status: 400, reason: "BadDeviceToken") })
        defer { Task { await push.shutdown() } }
        for n in 1...24 { try await Outbox.user(database, n, ios: 1) }
        for n in 1...24 { try await Outbox.queue(database, n, type: "streak_at_risk", at: "2026-03-10T12:00:00Z") }
        let result = try await database.nudge(["run", "dispatch", "--now", "2026-03-10T12:00:10Z"], environment: push.environment)
        #expect(result.status == 1, "\(result.stdout)\n\(result.stderr)")
        #expect(result.stdout.contains("APNs paused"))
        #expect(try await database.count("select count(*) from user_push_tokens where not active") == 0)
        #expect(try await database.psql("select distinct status from notification_outbox") == "pending")
        #expect(try await database.count("select count(*) from notification_outbox where attempts > 0") == 0)
    }

    /// A key Apple does not know (a wrong APNS_KEY_ID) and FCM's THIRD_PARTY_AUTH_ERROR are
    /// configuration errors: never a reason to prune.
    @Test func configurationErrorsPauseAndNeverPrune() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start(fcm: { _ in .reject(status: 401, code: "THIRD_PARTY_AUTH_ERROR", message: "Auth error") })
        defer { Task { await push.shutdown() } }
        try await Outbox.user(database, 1, ios: 1, android: 1)
        try await Outbox.queue(database, 1, type: "streak_at_risk", at: "2026-03-10T12:00:00Z")
        var environment = push.environment
        environment["APNS_KEY_ID"] = "WRONGKEY1"
        let result = try await database.nudge(["run", "dispatch", "--now", "2026-03-10T12:00:10Z"], environment: environment)
        #expect(result.status == 1)
        #expect(result.stdout.contains("APNs paused: APNs 403 InvalidProviderToken"))
        #expect(result.stdout.contains("FCM paused: FCM 401 THIRD_PARTY_AUTH_ERROR"))
        #expect(try await database.count("select count(*) from user_push_tokens where active") == 2)
        #expect(try await database.value("select status || ' ' || attempts from notification_outbox") == "pending 0")
    }

    /// Without credentials a provider is "not configured": its notifications stay queued, the
    /// others go, and `nudge list` and the summary say so.
    @Test func anUnconfiguredProviderLeavesItsNotificationsQueued() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start()
        defer { Task { await push.shutdown() } }
        try await Outbox.user(database, 1, ios: 1)
        try await Outbox.user(database, 2, ios: 0, android: 1)
        for n in 1...2 { try await Outbox.queue(database, n, type: "streak_at_risk", at: "2026-03-10T12:00:00Z") }
        var environment = push.environment
        for name in ["APNS_KEY_ID", "APNS_TEAM_ID", "APNS_PRIVATE_KEY", "APNS_BUNDLE_ID"] { environment[name] = "" }
        let result = try await database.nudge(["run", "dispatch", "--now", "2026-03-10T12:00:10Z"], environment: environment)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("waiting 1"))
        #expect(
            result.stdout.contains(
                "APNs is not configured (APNS_KEY_ID, APNS_TEAM_ID, APNS_PRIVATE_KEY, APNS_BUNDLE_ID); Resend is not configured (RESEND_API_KEY, RESEND_FROM); Twilio is not configured (TWILIO_ACCOUNT_SID, TWILIO_API_KEY_SID, TWILIO_API_KEY_SECRET, TWILIO_FROM); notifications waiting for a provider: 1 (each until it is back or its shelf life ends)"
            ))
        #expect(
            try await database.psql("select status || ' ' || coalesce(last_error, '') from notification_outbox order by user_id = '\(Fixture.userID(2))'")
                == "pending waiting: APNs is not configured (APNS_KEY_ID, APNS_TEAM_ID, APNS_PRIVATE_KEY, APNS_BUNDLE_ID)\nsent ")
        let list = try await database.nudge(["list"], environment: environment)
        #expect(list.stdout.contains("APNs: not configured"))
        #expect(list.stdout.contains("FCM: configured"))
        // Half a configuration is an error that names what is missing.
        environment["APNS_KEY_ID"] = "K"
        let half = try await database.nudge(["run", "dispatch", "--now", "2026-03-10T12:00:10Z"], environment: environment)
        #expect(half.status == 1)
        #expect(half.stderr.contains("APNs is half configured: APNS_TEAM_ID, APNS_PRIVATE_KEY, APNS_BUNDLE_ID not set"))
    }
}

/// The retry policy is one: the delay the queue gives a batch's failed rows in SQL is the
/// ceiling of the one dispatch gives a row it settles (`DispatchRules.retryDelay`).
@Suite(.dropsItsDatabases) struct RetryPolicyTests {
    @Test func theQueuesBackoffInSQLIsTheSettlementsCeiling() async throws {
        let database = try await TestDatabase.fresh()
        for attempts in 0...5 {
            let query: SQLFragment = """
                select extract(epoch from \(DispatchRules.retryCeiling(afterAttemptsIn: "v.attempts")))::float8
                  from (values (\(attempts))) as v(attempts)
                """
            let seconds = try await database.withDatabase { db in
                try await db.withConnection { connection in
                    var found = -1.0
                    for try await value in try await connection.query(try query.query(), logger: db.logger).decode(Double.self) {
                        found = value
                    }
                    return found
                }
            }
            #expect(seconds == DispatchRules.retryDelay(afterAttempt: attempts, retryAfter: nil, jitter: 1), "\(attempts)")
        }
    }
}
