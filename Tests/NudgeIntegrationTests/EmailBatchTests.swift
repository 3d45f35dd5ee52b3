import Foundation
import NudgeStandIns
import Synchronization
import Testing

@testable import NudgeCore

private func at(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }

private func resendEnvironment(_ resend: StandInResend) -> [String: String] {
    [
        "RESEND_API_KEY": resend.apiKey, "RESEND_FROM": "FitCircle <coach@fitcircle.example>", "RESEND_BASE_URL": resend.baseURL,
        "RESEND_REQUESTS_PER_SECOND": "100", "NUDGE_PUSH_TIMEOUT_SECONDS": "3",
    ]
}

/// Resend batch requests whose answer is lost, or that proved nothing was sent: each goes again
/// only as it left, and nothing is sent twice.
@Suite(.serialized, .dropsItsDatabases) struct EmailBatchTests {
    /// One batch of twelve emails: users in Auckland and Los Angeles, streak emails that end
    /// with the user's day and digests that keep 48 hours, so that the order of their shelf
    /// lives (Los Angeles's streaks, Auckland's, then the digests) is not the order of their
    /// rows. Resend takes the batch and its answer is lost; the next run sends the same bytes
    /// under the same key, Resend answers it again (a different body would get 409), and every
    /// email ends sent once, its log naming Resend's id.
    @Test func aLostBatchOfTwoZonesAndTwoShelfLivesGoesAgainByteForByte() async throws {
        let database = try await TestDatabase.fresh()
        let resend = try await StandInResend.start(script: { email in email.attempt == 1 ? .acceptSilently : .accept })
        defer { Task { await resend.shutdown() } }
        for n in 1...12 {
            let zone = n % 4 < 2 ? "Pacific/Auckland" : "America/Los_Angeles"
            try await Outbox.user(database, n, zone: zone, ios: 0)
            try await database.psql("update users set email = 'user\(n)@example.test' where id = '\(Fixture.userID(n))'")
            try await Outbox.email(database, n, type: n % 2 == 0 ? "weekly_digest" : "streak_at_risk", at: "2026-03-10T12:00:00Z")
        }
        let first = try await dispatch(database, environment: resendEnvironment(resend), at: at("2026-03-10T12:00:30Z"))
        #expect(first.exitCode == 0, "\(first)")
        #expect(resend.requestCount == 1)
        #expect(resend.sent.count == 12)
        #expect(
            try await database.psql("select status, count(distinct request_key), count(*) from notification_outbox group by 1")
                == "pending|1|12")

        let second = try await dispatch(database, environment: resendEnvironment(resend), at: at("2026-03-10T12:06:30Z"))
        #expect(second.exitCode == 0, "\(second)")
        #expect(try await database.psql("select status, count(*) from notification_outbox group by 1") == "sent|12")
        #expect(resend.requestCount == 2)
        #expect(resend.sent.count == 12)
        // (The stand-in answers a key again only for the same bytes: another body gets 409.)
        let again = resend.requests.filter { $0.attempt == 2 }
        #expect(again.map(\.to) == resend.requests.filter { $0.attempt == 1 }.map(\.to))
        #expect(again.count == 12)
        let logged = try await database.psql("select provider_id from email_logs order by provider_id")
        #expect(logged == resend.sent.map(\.id).sorted().joined(separator: "\n"))
        #expect(try await database.count("select count(*) from notification_logs where status = 'sent' and channel = 'email'") == 12)
        #expect(try await database.psql("select state from provider_health where provider = 'resend'") == "up")
    }

    /// Resend answers a new batch of three with 429 (nothing sent) while another dispatcher has
    /// taken one of its rows: the batch keeps its key on all three (it is forgotten only when
    /// one claim holds every row carrying it), and goes again whole under that key once the row
    /// is free. Each email is sent once, in one request of three.
    @Test func aBatchIsForgottenWholeOrNotAtAll() async throws {
        let database = try await TestDatabase.fresh()
        let taken = Mutex(false)
        let third = Fixture.userID(3)
        let resend = try await StandInResend.start(script: { email in
            guard email.attempt == 1 else { return .accept }
            let first = taken.withLock { taken in
                defer { taken = true }
                return !taken
            }
            if first {
                // Another dispatcher's claim on the third user's row, as after a lapsed lease.
                _ = try? database.psqlFromAStandIn(
                    """
                    update notification_outbox set claimed_by = -7, lease_until = now() + interval '1 hour'
                     where user_id = '\(third)';
                    update dispatch_leases set leased_until = now() + interval '1 hour' where user_id = '\(third)';
                    """)
            }
            return .reject(status: 429, name: "rate_limit_exceeded", message: "Too many requests", headers: [("retry-after", "1")])
        })
        defer { Task { await resend.shutdown() } }
        for n in 1...3 {
            try await Outbox.user(database, n, ios: 0)
            try await database.psql("update users set email = 'user\(n)@example.test' where id = '\(Fixture.userID(n))'")
            try await Outbox.email(database, n, type: "weekly_digest", at: "2026-03-10T12:00:00Z")
        }
        let first = try await dispatch(database, environment: resendEnvironment(resend), at: at("2026-03-10T12:00:30Z"))
        #expect(first.exitCode == 0, "\(first)")
        #expect(resend.requestCount == 1)
        #expect(resend.sent.isEmpty)
        #expect(
            try await database.psql("select count(*), count(distinct request_key) from notification_outbox where request_key is not null")
                == "3|1")
        #expect(
            try await database.psql("select status, attempts from notification_outbox where user_id <> '\(third)' group by 1, 2")
                == "pending|0")

        // The other dispatcher's claim lapses.
        try await database.psql(
            """
            update notification_outbox set lease_until = now() - interval '1 second';
            update dispatch_leases set leased_until = now() - interval '1 second';
            """)
        let second = try await dispatch(database, environment: resendEnvironment(resend), at: at("2026-03-10T12:05:30Z"))
        #expect(second.exitCode == 0, "\(second)")
        #expect(try await database.psql("select status, count(*) from notification_outbox group by 1") == "sent|3")
        #expect(resend.sent.count == 3)
        #expect(resend.requestCount == 2)
        #expect(Set(resend.requests.compactMap(\.idempotencyKey)).count == 1)
    }
}

/// A claim whose lease lapsed while its batch was sending: another dispatcher took its rows, so
/// the first one's write leaves them, their logs and their effects alone.
@Suite(.serialized, .dropsItsDatabases) struct LapsedClaimTests {
    /// The rows of a push and an email are taken by another claim while their requests are on
    /// the wire: the first run's renewal of its claims before the write comes back without their
    /// users, whom it reports skipped; it writes no log, no email log, and leaves the rows to the
    /// other claim; once that one lapses too, the next run sends the push again under its collapse id
    /// and the email under its key (Resend sends nothing twice), and each is logged once.
    @Test func aBatchWhoseClaimLapsedWritesNothingForTheRowsItLost() async throws {
        let database = try await TestDatabase.fresh()
        let taken = Mutex(Set<Int>())
        @Sendable func steal(_ n: Int) {
            let first = taken.withLock { $0.insert(n).inserted }
            guard first else { return }
            _ = try? database.psqlFromAStandIn(
                """
                update notification_outbox set claimed_by = -7, lease_until = now() + interval '1 hour'
                 where user_id = '\(Fixture.userID(n))';
                update dispatch_leases set run_id = -7, leased_until = now() + interval '1 hour' where user_id = '\(Fixture.userID(n))';
                """)
        }
        let push = try await PushStandIns.start(apns: { _ in
            steal(1)
            return .accept
        })
        defer { Task { await push.shutdown() } }
        let resend = try await StandInResend.start(script: { _ in
            steal(2)
            return .accept
        })
        defer { Task { await resend.shutdown() } }
        try await Outbox.user(database, 1)
        try await Outbox.queue(database, 1, type: "streak_at_risk", at: "2026-03-10T12:00:00Z")
        try await Outbox.user(database, 2, ios: 0)
        try await database.psql("update users set email = 'user2@example.test' where id = '\(Fixture.userID(2))'")
        try await Outbox.email(database, 2, type: "weekly_digest", at: "2026-03-10T12:00:00Z")
        // Resend's settings, with the push stand-ins' provider time-out, as the other dispatch
        // tests have, instead of the short one the lost batches above rely on: nothing here waits
        // for an answer that does not come, and a loaded machine may take more than 3 s to open a
        // connection and answer (the answer would then be taken as lost).
        var environment = push.environment.merging(resendEnvironment(resend)) { _, new in new }
        environment["NUDGE_PUSH_TIMEOUT_SECONDS"] = push.environment["NUDGE_PUSH_TIMEOUT_SECONDS"]

        let first = try await dispatch(database, environment: environment, at: at("2026-03-10T12:00:30Z"))
        #expect(first.exitCode == 0, "\(first)")
        #expect(push.apns.requests.count == 1, "\(first.tally); \(first.failures)")
        #expect(resend.sent.count == 1)
        // The claims renewed before the write came back without the two users: the batch says so.
        #expect(first.counts.skipped == 2, "\(first.counts)")
        #expect(
            try await database.psql(
                """
                select count(*) from job_run_failures where run_id = (select max(id) from job_runs) and reason like 'its claim ran out while%'
                """) == "2")
        #expect(try await database.count("select count(*) from notification_logs") == 0)
        #expect(try await database.count("select count(*) from email_logs") == 0)
        #expect(try await database.psql("select status, claimed_by from notification_outbox group by 1, 2") == "sending|-7")

        try await database.psql(
            """
            update notification_outbox set lease_until = now() - interval '1 second';
            update dispatch_leases set leased_until = now() - interval '1 second';
            """)
        let second = try await dispatch(database, environment: environment, at: at("2026-03-10T12:05:30Z"))
        #expect(second.exitCode == 0, "\(second)")
        let rows = try await database.psql("select status, count(*) from notification_outbox group by 1")
        let why = try await database.psql("select status, last_error from notification_outbox")
        #expect(rows == "sent|2", "\(second.tally); \(second.failures); \(why)")
        #expect(push.apns.requests.count == 2)
        #expect(Set(push.apns.requests.compactMap(\.collapseID)).count == 1)
        #expect(resend.sent.count == 1)
        #expect(
            try await database.psql("select channel, count(*) from notification_logs where status = 'sent' group by 1 order by 1")
                == "email|1\npush|1")
        #expect(try await database.value("select provider_id from email_logs") == resend.sent[0].id)
    }

    /// The same with a claim long enough that the write needs no renewal (its bound, two
    /// 5-second statements and ten seconds, is well within what is left): the rows taken while
    /// their pushes were on the wire reach the write, and its compare-and-set on the claim leaves
    /// their devices alone too. The token APNs called unregistered stays active, the one that took
    /// its push keeps its last use, until the run that holds them writes.
    @Test func aLapsedClaimsDevicesAreLeftToTheRunThatHoldsThem() async throws {
        let database = try await TestDatabase.fresh()
        let taken = Mutex(Set<String>())
        let push = try await PushStandIns.start(apns: { request in
            let first = taken.withLock { $0.insert(request.deviceToken).inserted }
            if first {
                _ = try? database.psqlFromAStandIn(
                    """
                    update notification_outbox set claimed_by = -7, lease_until = now() + interval '1 hour';
                    update dispatch_leases set run_id = -7, leased_until = now() + interval '1 hour';
                    """)
            }
            return request.deviceToken == Outbox.iosToken(1) ? .reject(status: 410, reason: "Unregistered") : .accept
        })
        defer { Task { await push.shutdown() } }
        for n in 1...2 {
            try await Outbox.user(database, n)
            try await Outbox.queue(database, n, type: "streak_at_risk", at: "2026-03-10T12:00:00Z")
        }
        let summary = try await database.withDatabase(limits: DatabaseLimits(statementTimeout: .seconds(5))) { db in
            try await DeliveryServices.with(Environment(push.environment), dryRun: false) { services in
                let options = RunOptions(now: at("2026-03-10T12:00:30Z"), nowIsExplicit: true, batchSize: 50, concurrency: 1)
                let job = DispatchJob(definition: jobDefinition("dispatch"), push: services, lease: 120, dryRun: false, clock: options.clock)
                return try await JobRunner(job: job, options: options, database: db, observer: SilentObserver()).run()
            }
        }
        #expect(summary.exitCode == 0, "\(summary)")
        #expect(push.apns.requests.count == 2)
        #expect(try await database.count("select count(*) from notification_logs") == 0)
        #expect(try await database.psql("select status, claimed_by from notification_outbox group by 1, 2") == "sending|-7")
        #expect(try await database.psql("select active, last_used is null from user_push_tokens order by device_token") == "t|t\nt|t")
    }
}
