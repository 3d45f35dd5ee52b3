import Foundation
import Logging
import NudgeStandIns
import Testing

@testable import NudgeCore

/// Logs every slot a reservation takes, as the database hands it out: a trigger keeps each new
/// value of `provider_pace.next_slot` (the slot taken, plus the interval).
private func logSlots(_ database: TestDatabase) async throws {
    try await database.psql(
        """
        create table pace_log (provider text not null, next_slot timestamptz not null);
        create function log_pace() returns trigger language plpgsql as $$
        begin
            insert into pace_log values (new.provider, new.next_slot);
            return new;
        end $$;
        create trigger log_pace after insert or update on provider_pace for each row execute function log_pace();
        """)
}

/// The slots `provider` handed out, in order, as seconds since 1970 on the database's clock: each
/// logged `next_slot` less the interval, as the database computes it.
private func slots(_ database: TestDatabase, _ provider: String, interval: Duration) async throws -> [Double] {
    try await database.psql(
        """
        select extract(epoch from next_slot - \(interval.seconds)::float8 * interval '1 second') from pace_log
         where provider = '\(provider)' order by next_slot
        """
    ).split(separator: "\n").compactMap { Double($0) }
}

/// Instants of this process's monotonic clock (a stand-in's arrivals), in order, as seconds since
/// 1970 on the wall clock, which the database on this machine reads too. The clocks' offset is
/// read just after a read of the monotonic clock, in the closest of a few tries: a read held back
/// between the two can only make the arrivals look later than they were, never sooner.
private func wallClock(_ instants: [ContinuousClock.Instant]) -> [Double] {
    var best: (spread: Duration, monotonic: ContinuousClock.Instant, wall: Date)?
    for _ in 0..<5 {
        let monotonic = ContinuousClock.now
        let wall = Date()
        let after = ContinuousClock.now
        if best.map({ monotonic.duration(to: after) < $0.spread }) ?? true { best = (monotonic.duration(to: after), monotonic, wall) }
    }
    let (_, monotonic, wall) = best!
    return instants.map { wall.timeIntervalSince1970 - $0.duration(to: monotonic).seconds }.sorted()
}

/// The most of `times` (seconds, in order) inside any window of `window` seconds, `[t, t + window)`.
private func mostInAnyWindow(_ times: [Double], _ window: Double) -> Int {
    var most = 0
    var first = 0
    for (last, time) in times.enumerated() {
        while time - times[first] >= window { first += 1 }
        most = max(most, last - first + 1)
    }
    return most
}

/// Whether every request reached the stand-in at its slot or after, each with a slot of its own:
/// the k-th arrival no sooner than the k-th slot (within a millisecond: the database keeps
/// microseconds, and the two clocks are read one after the other).
///
/// How the tests judge what a provider saw. Nudge decides when a request may leave: its slot,
/// which the database hands out an interval apart, exactly; the tests count the requests by their
/// slots, at most the rate in any window. When a request then reaches the provider depends on the
/// machine: a wake-up, for an email the statement that marks its rows as leaving, the loopback.
/// The slots of `limit + 1` requests span the window and an allowance for that (Resend: 1.05 s
/// for 3), which covers an ordinary network's jitter; a machine as loaded as a test run's (the
/// stand-in and the LLM clients share it with every other suite) holds some requests back more
/// than others, and their arrivals bunch however the slots are spaced: a count of arrivals per
/// second would judge the machine, not Nudge. So the arrivals are held to this: none before its
/// turn, and none without one.
private func noneBeforeItsSlot(_ arrivals: [Double], _ slots: [Double]) -> Bool {
    arrivals.count <= slots.count && zip(arrivals, slots).allSatisfy { $0 >= $1 - 0.001 }
}

@Suite(.serialized, .dropsItsDatabases) struct ProviderPaceTests {
    /// Two processes (two pools, so two connections) take their turns from one row: one sequence
    /// of slots, an interval apart, none given twice, the first taken by whichever inserted the
    /// row. A caller whose turn is further away than it may wait takes nothing, and the next
    /// caller gets that same slot.
    @Test func twoProcessesShareOneSequenceOfSlotsAndATurnTooFarTakesNothing() async throws {
        let database = try await TestDatabase.fresh()
        let hour = Duration.seconds(3600)
        let (taken, refused, after) = try await database.withDatabase { first in
            try await database.withDatabase { second in
                let paces = [first, second].map { SharedPace(provider: "test", interval: hour, database: $0, logger: $0.logger) }
                let taken = try await withThrowingTaskGroup(of: Date.self) { group in
                    for index in 0..<20 {
                        group.addTask { try await paces[index % 2].take(within: nil)!.slot }
                    }
                    return try await group.reduce(into: [Date]()) { $0.append($1) }
                }
                let refused = try await paces[0].take(within: .seconds(2))
                let after = try await paces[1].take(within: nil)
                return (taken, refused, after)
            }
        }
        // (Microseconds as the database keeps them, read back as binary fractions of a second.)
        func hourApart(_ earlier: Date, _ later: Date) -> Bool { abs(later.timeIntervalSince(earlier) - 3600) < 0.001 }
        let sorted = taken.sorted()
        #expect(sorted.count == 20)
        for (earlier, later) in zip(sorted, sorted.dropFirst()) {
            #expect(hourApart(earlier, later), "\(earlier) \(later)")
        }
        #expect(refused == nil)
        let next = try #require(after)
        #expect(hourApart(sorted.last!, next.slot), "\(sorted.last!) \(next.slot)")
        // Each waits for its own slot, counted on the database's clock: this one 20 hours on.
        #expect(next.wait > .seconds(20 * 3600 - 60) && next.wait <= .seconds(20 * 3600), "\(next.wait)")
        #expect(try await database.count("select count(*) from provider_pace") == 1)
    }

    /// deploy/sql/roles.sql: the jobs' role takes its turns; serve's has nothing to do with the pace.
    @Test func theJobsRoleTakesTurnsAndServesRoleCannot() async throws {
        let database = try await TestDatabase.fresh()
        let roles = try await database.applyRoles()
        #expect(roles.status == 0, "\(roles.stderr)")
        let jobsURL = database.url(as: "nudge_jobs")
        #expect(jobsURL != database.url)
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        let wait = try await Database.with(try DatabaseURL(jobsURL), logger: quiet) { db in
            try await SharedPace(provider: "resend", interval: .milliseconds(500), database: db, logger: db.logger).reserve(within: .seconds(2))
        }
        #expect(wait == .zero)
        let serve = await database.attempt("select count(*) from provider_pace", as: "nudge_serve")
        #expect(serve.status != 0)
        #expect(serve.stderr.contains("permission denied"), "\(serve.stderr)")
    }

    /// Two dispatchers, three lanes each, on the two shards of 600 users' emails, at
    /// RESEND_REQUESTS_PER_SECOND=2: their batch requests (30 emails each, ten or so per
    /// dispatcher) took slots at most 2 in any second between them, and each reached the Resend
    /// stand-in on its turn (`noneBeforeItsSlot`). Six lanes sending at once ask for more turns
    /// than 2 seconds hold (four): the requests whose turn was further went back to the outbox
    /// without spending an attempt, and went again. Every email was sent exactly once.
    @Test func twoDispatchersOnTwoShardsKeepResendsRateTogether() async throws {
        let database = try await TestDatabase.fresh()
        try await logSlots(database)
        let stand = try await ResendStandIn.start()
        defer { Task { await stand.resend.shutdown() } }
        try await database.psql(
            """
            insert into users (id, timezone, locale, created_at, email)
            select md5('user-' || n)::uuid, 'UTC', 'en', '2026-01-01', 'user' || n || '@example.test' from generate_series(1, 600) n;
            insert into notification_outbox (dedupe_key, job, user_id, local_day, notification_type, channel, deliver_after, title,
                                             body, payload)
            select 'test:' || id || ':email', 'test', id, current_date, 'weekly_digest', 'email', now() - interval '1 second',
                   'Your week', 'You walked 52,000 steps.', '{"email_type":"weekly_digest","html":"<p>52,000 steps</p>","tags":{}}'
              from users;
            """)
        var environment = stand.environment
        environment["RESEND_REQUESTS_PER_SECOND"] = "2"
        // Draining (no --now): a request refused its turn goes again a second later in the same run.
        let runs = try ["0/2", "1/2"].map { shard in
            try database.startNudge(
                [
                    "run", "dispatch", "--shard", shard, "--lanes", "3", "--batch-size", "30", "--drain-seconds", "55",
                    "--json",
                ], environment: environment)
        }
        var waited = 0
        for run in runs {
            let result = await run.finished()
            #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
            let summary = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
            waited += (summary?["tally"] as? [String: Int])?["waiting"] ?? 0
        }

        #expect(try await database.psql("select status, attempts, count(*) from notification_outbox group by 1, 2") == "sent|1|600")
        let sent = stand.resend.sent
        #expect(sent.count == 600)
        #expect(Set(sent.flatMap(\.to)).count == 600)
        #expect(try await database.count("select count(*) from email_logs") == 600)
        // Both dispatchers sent, in several requests each.
        #expect(try await database.count("select count(distinct run_id) from notification_logs") == 2)
        let requests = stand.resend.requestCount
        #expect(requests >= 20)
        // Emails of requests refused their turn, which waited (no attempt spent: above).
        #expect(waited > 0)

        // The requests by their slots: at most 2 in any second, and each reached the stand-in on its turn.
        let taken = try await slots(database, "resend", interval: ResendClient.paceInterval(requestsPerSecond: 2))
        #expect(taken.count >= requests)
        #expect(mostInAnyWindow(taken, 1.0) <= 2, "\(taken)")
        let arrived = wallClock(stand.resend.arrivals)
        #expect(arrived.count == requests)
        #expect(noneBeforeItsSlot(arrived, taken), "\(arrived)\n\(taken)")
    }

    /// Two LLM clients, as two push-trigger processes, each with its own pool and 15 calls at
    /// once, at NUDGE_LLM_REQUESTS_PER_MINUTE=600: one sequence of slots between them, at most 10
    /// in any second (so at most 600 in any minute), where each alone would have taken 10, and
    /// each request reached the stand-in on its turn.
    @Test func twoLLMClientsSharingTheDatabaseKeepTheRequestsPerMinuteTogether() async throws {
        let database = try await TestDatabase.fresh()
        try await logSlots(database)
        let server = try await StandInLLM.start { _ in (.reply(#"{"title": "t", "body": "b"}"#), .zero) }
        defer { Task { await server.shutdown() } }
        let configuration = LLMConfiguration(
            provider: .anthropic, baseURL: server.baseURL, apiKey: "sk-ant-test-not-a-real-key",
            model: LLMConfiguration.defaultAnthropicModel, requestsPerMinute: 600)
        try await withThrowingTaskGroup(of: Void.self) { processes in
            for _ in 0..<2 {
                processes.addTask {
                    try await database.withDatabase { db in
                        try await LLMClient.with(configuration, concurrency: 15) { llm in
                            let pace = llm.sharedPace(db, logger: db.logger)
                            try await withThrowingTaskGroup(of: Void.self) { calls in
                                for _ in 0..<15 {
                                    calls.addTask { _ = try await llm.complete(prompt: "Say hello", pace: pace, logger: db.logger) }
                                }
                                try await calls.waitForAll()
                            }
                        }
                    }
                }
            }
            try await processes.waitForAll()
        }

        // The requests by their slots, one sequence for both: at most 10 in any second, and each
        // reached the stand-in on its turn.
        #expect(server.requests.count == 30)
        let taken = try await slots(database, "anthropic", interval: LLMClient.paceInterval(requestsPerMinute: 600))
        #expect(taken.count == 30)
        #expect(mostInAnyWindow(taken, 1.0) <= 10, "\(taken)")
        let arrived = wallClock(server.requests.map(\.receivedAt))
        #expect(noneBeforeItsSlot(arrived, taken), "\(arrived)\n\(taken)")
    }
}

/// Resend's turn under the pace is waited for on the run's wait clock: the second of two batches
/// at one request a second leaves when the test moves the clock by the interval, not before,
/// and never waits the real second.
@Suite(.dropsItsDatabases) struct ResendTurnTests {
    @Test func aBatchWaitsForItsTurnOnTheRunsWaitClock() async throws {
        let resend = try await StandInResend.start()
        defer { Task { await resend.shutdown() } }
        let configuration = try #require(
            try ResendConfiguration(
                environment: Environment([
                    "RESEND_API_KEY": resend.apiKey, "RESEND_FROM": "FitCircle <coach@fitcircle.example>",
                    "RESEND_BASE_URL": resend.baseURL, "RESEND_REQUESTS_PER_SECOND": "1",
                ])))
        let client = try ResendClient(configuration: configuration, http: ProviderHTTP(extraTrustedRoots: nil, timeout: .seconds(30)))
        do {
            try await Self.secondWaitsForItsTurn(client, resend)
        } catch {
            await client.shutdown()
            throw error
        }
        await client.shutdown()
    }

    private static func secondWaitsForItsTurn(_ client: ResendClient, _ resend: StandInResend) async throws {
        let clock = ManualWaitClock()
        let pace = LocalPace(interval: .seconds(1), clock: clock)
        func email(_ n: Int) -> EmailRequest {
            EmailRequest(to: "user\(n)@example.test", subject: "Your week", html: "<p>\(n)</p>", text: "\(n)", unsubscribeURL: nil, tags: [:])
        }
        let first = await client.sendBatch([email(1)], key: "nudge-batch-turn-1", pace: pace, waitClock: clock)
        #expect(first.allSatisfy { if case .delivered = $0 { true } else { false } }, "\(first)")
        let second = Task { await client.sendBatch([email(2)], key: "nudge-batch-turn-2", pace: pace, waitClock: clock) }
        // Its turn is a second away on the run's clock: it sleeps until then, and has not left.
        let deadline = try await nextSleeper(of: clock)
        #expect(deadline == .seconds(1))
        #expect(resend.requestCount == 1)
        clock.advance(by: .seconds(1))
        try await until("the second batch at Resend", on: resend.changes) { resend.requestCount == 2 }
        let answered = await second.value
        #expect(answered.allSatisfy { if case .delivered = $0 { true } else { false } }, "\(answered)")
    }
}
