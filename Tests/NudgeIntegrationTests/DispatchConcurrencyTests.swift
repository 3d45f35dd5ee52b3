import Foundation
import NudgeStandIns
import PostgresNIO
import Synchronization
import Testing

@testable import NudgeCore

/// `count` users, each with one iPhone and `perUser` notifications of different types due at `at`.
private func queueForMany(_ database: TestDatabase, users count: Int, perUser: Int, at: String) async throws {
    let types = ["streak_at_risk", "social_engagement", "weekly_goal_progress", "data_submission", "leaderboard_change"]
    try await database.psql(
        """
        begin;
        insert into users (id, timezone, locale, created_at)
        select md5('user-' || n)::uuid, 'UTC', 'en', '2026-01-01' from generate_series(1, \(count)) n;
        insert into user_push_tokens (user_id, device_token, platform)
        select id, md5(id::text) || md5(id::text || 'device'), 'ios' from users;
        insert into notification_outbox (dedupe_key, job, user_id, local_day, notification_type, deliver_after, title, body)
        select 'test:' || u.id || ':' || t.type, 'test', u.id, '\(at.prefix(10))', t.type, '\(at)', 'Title ' || t.type, 'Body'
          from users u, unnest((array[\(types.prefix(perUser).map { "'\($0)'" }.joined(separator: ","))])::text[]) as t(type);
        commit;
        """)
}

@Suite(.serialized, .dropsItsDatabases) struct DispatchConcurrencyTests {
    /// Two dispatchers started together over 10,000 notifications, on different shards and then
    /// on the same one: every device gets each notification it is owed exactly once, and each
    /// user's daily cap holds (their notifications are decided by one dispatcher at a time).
    @Test(arguments: [["0/2", "1/2"], ["0/1", "0/1"]])
    func twoDispatchersDeliverEachNotificationOnceAndKeepTheCaps(_ shards: [String]) async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start()
        defer { Task { await push.shutdown() } }
        try await queueForMany(database, users: 2_000, perUser: 5, at: "2026-03-10T12:00:00Z")
        let environment = push.environment.merging(["NUDGE_PUSH_TIMEOUT_SECONDS": "20"]) { _, new in new }
        let runs = try shards.map { shard in
            // Two lanes of 50 each: four claim loops at once between them, gentle on a debug build.
            try database.startNudge(
                [
                    "run", "dispatch", "--now", "2026-03-10T12:00:30Z", "--shard", shard, "--lanes", "2",
                    "--batch-size", "50", "--concurrency", "50",
                ], environment: environment)
        }
        for run in runs {
            let result = await run.finished()
            #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        }

        let detail = try await database.psql("select status, attempts, last_error, count(*) from notification_outbox group by 1, 2, 3")
        #expect(
            try await database.psql("select status, count(*) from notification_outbox group by 1 order by 1") == "sent|6000\nsuppressed|4000",
            "\(detail)")
        let requests = push.apns.requests
        #expect(requests.count == 6_000)
        // One request per device and notification, and three notifications a device: the cap.
        let perDevice = Dictionary(grouping: requests, by: \.deviceToken)
        #expect(perDevice.count == 2_000)
        #expect(perDevice.values.allSatisfy { $0.count == 3 && Set($0.compactMap(\.collapseID)).count == 3 })
        // Both dispatchers did a share of the work.
        #expect(try await database.count("select count(distinct run_id) from notification_logs") == 2)
    }

    /// A dispatcher killed mid-way leaves its claims to their lease; the next run takes them and
    /// no device is shown a notification twice: a push re-sent carries the first one's collapse id.
    @Test func aDispatcherKilledMidWayLosesNothingAndShowsNothingTwice() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start(apns: { _ in .acceptAfter(.milliseconds(40)) })
        defer { Task { await push.shutdown() } }
        try await queueForMany(database, users: 1_500, perUser: 1, at: "2026-03-10T12:00:00Z")
        // The shortest lease a 3-second push time-out allows: 3 × 3 + 10 + 20 seconds.
        let environment = push.environment.merging(["NUDGE_DISPATCH_LEASE_SECONDS": "39", "NUDGE_PUSH_TIMEOUT_SECONDS": "3"]) { _, new in new }
        let first = try database.startNudge(
            ["run", "dispatch", "--now", "2026-03-10T12:00:30Z", "--lanes", "2"],
            environment: environment)
        try await first.reaches("300 pushes at APNs", on: push.apns.changes) { push.apns.requestCount >= 300 }
        first.signal(SIGKILL)
        _ = await first.finished()
        let claimed = try await database.count("select count(*) from notification_outbox where status = 'sending'")
        #expect(claimed > 0)
        #expect(try await database.value("select status from job_runs") == "running")
        // Each claim's lease as the killed run left it, to be judged against when the next run ends.
        try await database.psql("create table held_leases as select id, lease_until from notification_outbox where status = 'sending'")

        // Within the lease nothing of it is taken again; after it, everything is. A claim whose
        // lease outlasted the whole early run cannot have been taken by it, however slow the
        // machine made that run.
        let gentle = ["--lanes", "1", "--batch-size", "50", "--concurrency", "50"]
        let early = try await database.nudge(["run", "dispatch", "--now", "2026-03-10T12:00:40Z"] + gentle, environment: environment)
        #expect(early.status == 0, "\(early.stderr)")
        try await database.psql("create table early_ended as select now() as at")
        #expect(
            try await database.count(
                """
                select count(*) from notification_outbox o join held_leases h using (id)
                 where h.lease_until > (select at from early_ended) and (o.status <> 'sending' or o.lease_until <> h.lease_until)
                """) == 0)
        // The last lease ends: a wait for that moment, on the database's clock.
        try await database.psql(
            """
            select pg_sleep(greatest(0, extract(epoch from max(lease_until) - clock_timestamp()) + 0.01))
              from notification_outbox where status = 'sending'
            """)
        #expect(try await database.count("select count(*) from notification_outbox where status = 'sending' and lease_until > now()") == 0)
        let late = try await database.nudge(["run", "dispatch", "--now", "2026-03-10T12:01:30Z"] + gentle, environment: environment)
        #expect(late.status == 0, "\(late.stderr)")
        #expect(try await database.psql("select status, count(*) from notification_outbox group by 1") == "sent|1500")

        let perDevice = Dictionary(grouping: push.apns.requests, by: \.deviceToken)
        #expect(perDevice.count == 1_500)
        // A device may have been sent one notification twice (killed between sending and
        // recording), never two different collapse ids: it shows one.
        #expect(perDevice.values.allSatisfy { Set($0.compactMap(\.collapseID)).count == 1 })
        // Sent twice only where a run could not know the first went: the killed run's claims,
        // and an attempt that got no answer within the time-out (a loaded machine can make one).
        let twice = Set(perDevice.filter { $0.value.count > 1 }.keys)
        let explained = Set(
            try await database.psql(
                """
                select t.device_token from user_push_tokens t
                 where t.user_id in (select o.user_id from notification_outbox o join held_leases h using (id))
                    or t.user_id in (select user_id from notification_logs where status <> 'sent')
                """
            ).split(separator: "\n").map(String.init))
        #expect(twice.subtracting(explained).isEmpty, "\(twice.subtracting(explained).count) of \(twice.count) sent twice unexplained")
    }

    /// A dry run decides and reports, calls no provider and changes no row.
    @Test func aDryRunSendsNothingAndChangesNoRow() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start()
        defer { Task { await push.shutdown() } }
        try await queueForMany(database, users: 120, perUser: 4, at: "2026-03-10T12:00:00Z")
        let before = try await database.dump(excluding: ["job_runs", "job_run_failures"])
        let result = try await database.nudge(
            ["run", "dispatch", "--now", "2026-03-10T12:00:30Z", "--dry-run", "--json"],
            environment: push.environment)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try await database.dump(excluding: ["job_runs", "job_run_failures"]) == before)
        #expect(push.apns.requestCount == 0)
        #expect(push.fcm.requestCount == 0)
        #expect(push.fcm.issuedTokens.isEmpty)
        let report = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        let decisions = try #require(report["decisions"] as? [[String: Any]])
        #expect(decisions.count == 120)
        let summary = try #require(report["summary"] as? [String: Any])
        let tally = try #require(summary["tally"] as? [String: Int])
        #expect(tally["would_deliver"] == 360)
        #expect(tally["suppressed:caps"] == 120)
    }

    /// Without --now a run drains: a notification that falls due while it runs leaves within a
    /// second or two of its time; with nothing more due before its deadline, it ends.
    @Test func aRunDrainsWhatFallsDueAndEndsWhenNothingIs() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start()
        defer { Task { await push.shutdown() } }
        try await Outbox.user(database, 1)
        let due = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 + 4).rounded(.up))
        try await Outbox.queue(database, 1, type: "fitcircle_invite", at: ISO8601DateFormatter().string(from: due))
        // Started at once, not queued for one of the harness's process slots: the times below
        // are the run's own. Its drain is an hour: a run that waited it out would outlast the
        // tests' budget, so ending at all says it ended once nothing was due.
        let running = try database.startNudge(["run", "dispatch", "--drain-seconds", "3600"], environment: push.environment)
        let ended = await running.endsWithinTheBudget()
        #expect(ended, "the run was still draining after the tests' budget")
        let result = await running.finished()
        #expect(result.status == 0, "\(result.stderr)")
        let request = try #require(push.apns.requests.first)
        #expect(request.receivedAt >= due.addingTimeInterval(-0.05))
        #expect(request.receivedAt.timeIntervalSince(due) < 2.5)
        #expect(try await database.value("select status from notification_outbox") == "sent")
    }
}

/// What a test job saw, shared with the test.
private final class LeaseLog: Sendable {
    let seen = Mutex<[UUID: Bool]>([:])
}

/// dispatch, with a batch whose facts take so long to read that its claims run out and another
/// dispatcher takes one of its users meanwhile.
private struct SlowFactsDispatch: OutsideCalls, Bookkeeping {
    let inner: DispatchJob
    let stolen: UUID
    /// Per user sent to, whether their claim had a minute or more left as the sends began.
    let leaseAtSends = LeaseLog()
    var definition: JobDefinition { inner.definition }
    var source: OutboxQueue { inner.source }
    var readStatements: Int { inner.readStatements + 1 }
    var callsOutside: Bool { inner.callsOutside }
    var bookkeepingStatements: Int { inner.bookkeepingStatements }
    var outsideTimeLimit: Duration? { inner.outsideTimeLimit }

    func loadFacts(for items: [UserNotifications], run: RunContext, on connection: PostgresConnection) async throws
        -> [UUID: DispatchJob.Facts]
    {
        try await connection.query(
            """
            update dispatch_leases set leased_until = now() - interval '1 second';
            """, logger: run.logger)
        try await connection.query(
            """
            update notification_outbox set lease_until = now() - interval '1 second' where status = 'sending'
            """, logger: run.logger)
        try await connection.query(
            """
            update dispatch_leases set run_id = -1, leased_until = now() + interval '2 minutes' where user_id = \(stolen)
            """, logger: run.logger)
        try await connection.query(
            """
            update notification_outbox set claimed_by = -1, lease_until = now() + interval '2 minutes' where user_id = \(stolen)
            """, logger: run.logger)
        return try await inner.loadFacts(for: items, run: run, on: connection)
    }

    func decide(for item: UserNotifications, facts: DispatchJob.Facts?, run: RunContext) throws -> Decision<DispatchJob.Change> {
        try inner.decide(for: item, facts: facts, run: run)
    }

    func complete(_ change: PlannedChange<DispatchJob.Change>, run: RunContext) async throws -> PlannedChange<DispatchJob.Change> {
        let user = change.itemID
        if let database = run.database {
            let renewed = try await database.withConnection { connection in
                var renewed = false
                for try await ok in try await connection.query(
                    """
                    select bool_and(o.lease_until > now() + interval '1 minute' and l.leased_until > now() + interval '1 minute')
                      from notification_outbox o join dispatch_leases l on l.user_id = o.user_id
                     where o.user_id = \(user) and o.claimed_by = \(run.claim)
                    """, logger: run.logger
                ).decode(Bool?.self) { renewed = ok ?? false }
                return renewed
            }
            leaseAtSends.seen.withLock { $0[user] = renewed }
        }
        return try await inner.complete(change, run: run)
    }

    func completeTogether(_ changes: [PlannedChange<DispatchJob.Change>], run: RunContext) async -> [PlannedChange<DispatchJob.Change>] {
        await inner.completeTogether(changes, run: run)
    }

    func review(_ changes: [PlannedChange<DispatchJob.Change>], run: RunContext) -> [PlannedChange<DispatchJob.Change>] {
        inner.review(changes, run: run)
    }

    func writes(for changes: [PlannedChange<DispatchJob.Change>], run: RunContext) -> BatchWrites {
        inner.writes(for: changes, run: run)
    }

    func tend(run: RunContext, on connection: PostgresConnection) async throws {
        try await inner.tend(run: run, on: connection)
    }

    func afterBatch(run: RunContext, on connection: PostgresConnection) async throws -> [String: Int] {
        try await inner.afterBatch(run: run, on: connection)
    }
}

@Suite(.dropsItsDatabases) struct DispatchLeaseTests {
    /// Facts read past the claims' lease (the users' and their rows'): before anything is sent,
    /// the claims are renewed for the batch's sends, and the user another dispatcher took
    /// meanwhile is left to it (skipped, nothing sent to them); the others' notifications go out
    /// once.
    @Test func aBatchWhoseClaimsRanOutRenewsThemBeforeSendingAndLeavesATakenUserAlone() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start()
        defer { Task { await push.shutdown() } }
        try await queueForMany(database, users: 3, perUser: 1, at: "2026-03-10T12:00:00Z")
        let stolen = try #require(UUID(uuidString: try await database.value("select id from users order by id limit 1")))
        let holder = Mutex<SlowFactsDispatch?>(nil)
        let summary = try await database.withDatabase { db in
            try await DeliveryServices.with(Environment(push.environment), dryRun: false) { services in
                let options = RunOptions(
                    now: ISO8601DateFormatter().date(from: "2026-03-10T12:00:30Z")!, nowIsExplicit: true,
                    batchSize: 50, concurrency: 50)
                // A lease of 5 seconds: shorter than the batch's sends may take, so it is renewed.
                let inner = DispatchJob(
                    definition: jobDefinition("dispatch"), push: services, lease: 5, dryRun: false,
                    clock: options.clock)
                let job = SlowFactsDispatch(inner: inner, stolen: stolen)
                holder.withLock { $0 = job }
                return try await JobRunner(job: job, options: options, database: db, observer: SilentObserver()).run()
            }
        }
        #expect(summary.counts.skipped == 1)
        #expect(push.apns.requests.count == 2)
        #expect(
            try await database.psql("select status, claimed_by, count(*) from notification_outbox group by 1, 2 order by 1")
                == "sending|-1|1\nsent||2")
        #expect(try await database.count("select count(*) from notification_logs where status = 'sent'") == 2)
        // The others' claims, run out, had been renewed before their sends (well past the 5
        // seconds they began with).
        let renewed = try #require(holder.withLock { $0 }).leaseAtSends.seen.withLock { $0 }
        #expect(renewed.count == 2 && renewed.values.allSatisfy { $0 })
    }
}

/// The database cut off under a dispatcher's lanes while their pushes are on the wire.
@Suite(.serialized, .dropsItsDatabases) struct DispatchLaneFailureTests {
    /// Every connection of the database is cut as the first push reaches APNs, with four lanes
    /// at work: each lane's batch already sent is written once more on a connection opened for
    /// it, each lane ends on its own error without cutting the others' sends, and once the claims
    /// left (of rows claimed and not yet sent) lapse, the next run sends the rest. Every device
    /// gets its push exactly once, and every row ends sent.
    @Test func aLostConnectionEndsEachLaneAloneAndItsSentBatchIsWritten() async throws {
        let database = try await TestDatabase.fresh()
        let cut = Mutex(false)
        let terminated = Mutex<String?>(nil)
        let push = try await PushStandIns.start(apns: { _ in
            let first = cut.withLock { cut in
                defer { cut = true }
                return !cut
            }
            if first {
                let ended =
                    (try? database.psqlFromAStandIn(
                        """
                        select count(pg_terminate_backend(pid)) from pg_stat_activity
                         where datname = current_database() and pid <> pg_backend_pid() and backend_type = 'client backend'
                        """)) ?? "failed"
                terminated.withLock { $0 = ended }
            }
            return .accept
        })
        defer { Task { await push.shutdown() } }
        try await queueForMany(database, users: 160, perUser: 1, at: "2026-03-10T12:00:00Z")
        do {
            _ = try await dispatch(database, environment: push.environment, at: ISO8601DateFormatter().date(from: "2026-03-10T12:00:30Z")!, lanes: 4)
        } catch {
            // The run ends on the lanes' error (exit 1); what its lanes sent is written.
        }
        #expect(cut.withLock { $0 })
        // The run's sessions were ended under it, not merely asked to be.
        #expect((Int(terminated.withLock { $0 } ?? "") ?? 0) > 0, "\(terminated.withLock { $0 } ?? "no answer")")
        // A row still claimed is one whose lane lost its connection before sending it (claimed,
        // not yet sent): none of them reached APNs. Their claims lapse; the next run sends them.
        let claimed = try await database.psql(
            """
            select t.device_token from notification_outbox o join user_push_tokens t on t.user_id = o.user_id
             where o.status = 'sending'
            """
        ).split(separator: "\n").map(String.init)
        #expect(Set(claimed).isDisjoint(with: push.apns.requests.map(\.deviceToken)))
        try await database.psql(
            """
            update notification_outbox set lease_until = now() - interval '1 second' where status = 'sending';
            update dispatch_leases set leased_until = now() - interval '1 second';
            """)
        let again = try await dispatch(database, environment: push.environment, at: ISO8601DateFormatter().date(from: "2026-03-10T12:01:30Z")!, lanes: 4)
        #expect(again.exitCode == 0, "\(again)")
        #expect(try await database.psql("select status, count(*) from notification_outbox group by 1") == "sent|160")
        let perDevice = Dictionary(grouping: push.apns.requests, by: \.deviceToken)
        #expect(perDevice.count == 160)
        #expect(perDevice.values.allSatisfy { $0.count == 1 })
        #expect(try await database.count("select count(*) from notification_logs where status = 'sent'") == 160)
    }
}
