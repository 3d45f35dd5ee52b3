import Foundation
import Logging
import NudgeCore
import NudgeStandIns
import Synchronization
import Testing

/// Users ready for a proactive push, inserted with SQL. User n's id is `Fixture.userID(n)`.
private enum PushFixture {
    /// A user with check-ins on at `frequency`, an active push token, quiet since `lastActive`.
    static func user(
        _ database: TestDatabase, _ n: Int, timezone: String = "UTC", locale: String = "en",
        frequency: String = "daily", checkIns: Bool = true, lastActive: String = "2026-02-01T12:00:00Z"
    ) async throws {
        try await database.psql(
            """
            insert into users (id, timezone, locale, created_at, last_active_at)
            values (md5('user-\(n)')::uuid, '\(timezone)', '\(locale)', '2026-01-01T00:00:00Z', '\(lastActive)');
            insert into context_profiles (user_id, notification_preferences)
            values (md5('user-\(n)')::uuid, jsonb_build_object('check_ins_enabled', \(checkIns), 'frequency', '\(frequency)'));
            insert into user_push_tokens (user_id, device_token, platform)
            values (md5('user-\(n)')::uuid, 'device-token-\(n)', 'ios');
            """)
    }

    /// A conversation of user n at `at`, with one message of theirs.
    static func conversation(
        _ database: TestDatabase, _ n: Int, title: String, domain: String = "career", at: String,
        says message: String = "I keep rehearsing the opening of my talk"
    ) async throws {
        try await database.psql(
            """
            with c as (insert into conversations (user_id, domain, title, created_at, updated_at)
                       values (md5('user-\(n)')::uuid, '\(domain)', '\(title)', '\(at)', '\(at)'::timestamptz + interval '10 minutes')
                       returning id, user_id, created_at)
            insert into messages (conversation_id, user_id, role, content, created_at)
            select id, user_id, 'user', '\(message)', created_at + interval '1 minute' from c
            """)
    }

    /// A fresh database with users 1…`count`, each due a re-engagement push about "Topic n".
    static func usersToFollowUp(_ count: Int) async throws -> TestDatabase {
        let database = try await TestDatabase.fresh()
        for n in 1...count {
            try await user(database, n)
            try await conversation(database, n, title: "Topic \(n)", at: "2026-02-05T09:00:00Z")
        }
        return database
    }

    /// A fresh pattern cache for user n: the pattern layer has something to say.
    static func pattern(_ database: TestDatabase, _ n: Int) async throws {
        try await database.psql(
            """
            insert into pattern_cache (user_id, patterns, session_count)
            values (md5('user-\(n)')::uuid,
                    '[{"theme": "work stress before deadlines", "occurrences": 4, "domains": ["career"], "confidence": 0.8,
                       "synthesis": "Stress builds before deadlines."}]', 0)
            """)
    }
}

private let valid = #"{"title": "Thinking of your talk", "body": "How is the preparation going? I'm here if you want to walk through it."}"#

/// Marks the users the stand-in answered with a 429 once already.
private final class Once: Sendable {
    private let seen = Mutex<Set<String>>([])
    func first(_ key: String) -> Bool { seen.withLock { $0.insert(key).inserted } }
}

private func pushEnvironment(_ server: StandInLLM, provider: String) -> [String: String] {
    // A generous time-out: on a loaded test machine a slow answer must not turn into a retry.
    var environment = [
        "PUSH_TRIGGER_ENABLED": "true", "NUDGE_LLM_MAX_RETRIES": "2", "NUDGE_LLM_REQUESTS_PER_MINUTE": "1000",
        "NUDGE_LLM_TIMEOUT_SECONDS": "120",
    ]
    if provider == "openai" {
        environment["NUDGE_LLM_PROVIDER"] = "openai"
        environment["OPENAI_BASE_URL"] = server.baseURL + "/v1"
        environment["OPENAI_API_KEY"] = "sk-test-not-a-real-key"
        environment["NUDGE_LLM_MODEL"] = "local-model"
    } else {
        environment["ANTHROPIC_BASE_URL"] = server.baseURL
        environment["ANTHROPIC_API_KEY"] = "sk-ant-test-not-a-real-key"
    }
    return environment
}

@Suite(.serialized, .dropsItsDatabases) struct PushTriggerTests {
    private let now = "2026-02-10T10:30:00Z"

    @Test(arguments: ["anthropic", "openai"])
    func eachLLMAnswerEndsAsTheSeedSaysAndTheOtherUsersAreUnaffected(provider: String) async throws {
        let database = try await TestDatabase.fresh()
        let cases = ["ok", "slow", "ratelimited", "overloaded", "garbled", "verbose", "parrot"]
        for (index, name) in cases.enumerated() {
            try await PushFixture.user(database, index + 1)
            try await PushFixture.conversation(database, index + 1, title: "Talk prep \(name)", at: "2026-02-05T09:00:00Z")
        }
        try await PushFixture.user(database, 20, checkIns: false)
        try await PushFixture.conversation(database, 20, title: "Talk prep off", at: "2026-02-05T09:00:00Z")
        try await PushFixture.user(database, 21, frequency: "hourly")
        try await PushFixture.conversation(database, 21, title: "Talk prep bad frequency", at: "2026-02-05T09:00:00Z")

        let once = Once()
        let server = try await StandInLLM.start { request in
            let prompt = request.prompt
            func has(_ name: String) -> Bool { prompt.contains("Talk prep \(name) ") || prompt.contains("Talk prep \(name)</user_data>") }
            if has("slow") { return (.reply(valid), .milliseconds(1500)) }
            if has("ratelimited") && once.first("ratelimited") { return (.status(429, retryAfter: "1"), .zero) }
            if has("overloaded") { return (.status(529), .zero) }
            if has("garbled") { return (.reply("Sure! Here is a push: Thinking of your talk"), .zero) }
            if has("verbose") { return (.reply(#"{"title": "\#(String(repeating: "x", count: 60))", "body": "ok"}"#), .zero) }
            if has("parrot") {
                return (.reply(#"{"title": "Still at it?", "body": "You told me: I keep rehearsing the opening of my talk. Want to practise?"}"#), .zero)
            }
            return (.reply(valid), .zero)
        }
        defer { Task { await server.shutdown() } }
        let environment = pushEnvironment(server, provider: provider)

        let result = try await database.nudge(["run", "push-trigger", "--now", now, "--concurrency", "8", "--json"], environment: environment)
        #expect(result.status == 3, "\(result.stderr)")
        let pushed = try await database.psql(
            """
            select c.title from push_log p join conversations c on c.user_id = p.user_id order by 1
            """)
        #expect(pushed == "Talk prep ok\nTalk prep ratelimited\nTalk prep slow")
        #expect(
            try await database.count(
                """
                select count(*) from notification_outbox o join push_log p on p.id = (o.payload->>'push_log_id')::uuid
                 where o.user_id = p.user_id and o.job = 'push-trigger' and o.notification_type = 'proactive_push'
                   and o.payload->>'action' = 'new_conversation' and o.payload->>'push_type' = 're_engagement'
                   and o.payload->>'domain' = 'career' and p.push_type = 're_engagement'
                   and p.metadata = '{"layer": "re_engagement"}' and p.content = o.title || ' — ' || o.body
                   and p.sent_at = '\(now)'
                """) == 3)
        #expect(try await database.count("select count(*) from notification_outbox") == 3)
        let failures = try await database.psql(
            """
            select c.title || ': ' || f.reason from job_run_failures f join conversations c on c.user_id = f.item_id order by 1
            """
        ).split(separator: "\n")
        #expect(failures.count == 5, "\(failures)")
        #expect(failures.contains { $0.hasPrefix("Talk prep bad frequency: notification_preferences.frequency is 'hourly'") })
        #expect(failures.contains { $0.hasPrefix("Talk prep garbled: the LLM's reply is not a JSON object") })
        #expect(failures.contains { $0.hasPrefix("Talk prep overloaded: the LLM answered HTTP 529") && $0.hasSuffix("after 3 attempts") })
        #expect(failures.contains { $0 == "Talk prep parrot: the LLM's copy repeats 5 or more of the user's own words verbatim; not pushed" })
        #expect(failures.contains { $0 == "Talk prep verbose: the LLM's title has 60 characters, more than 50; not pushed" })
        // A rejected reply skips the user; an LLM that keeps failing, or bad data, fails them.
        let summary = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as! [String: Any]
        let counts = summary["counts"] as! [String: Int]
        #expect(counts["failed"] == 2)
        #expect(counts["succeeded"] == 3)
        #expect(
            try await database.psql("select outcome, count(*) from llm_calls group by 1 order by 1")
                == "rejected: the LLM's copy repeats 5 or more of the user's own words verbatim|1\nrejected: the LLM's reply is not a JSON object with a title and a body|1\nrejected: the LLM's title has 60 characters, more than 50|1\nused|3"
        )

        let sent = server.requests
        func about(_ name: String) -> [StandInLLM.Request] { sent.filter { $0.prompt.contains("Talk prep \(name)") } }
        let limited = about("ratelimited")
        #expect(limited.count == 2)
        #expect(limited.count == 2 && limited[1].receivedAt - limited[0].receivedAt >= .milliseconds(950))
        #expect(about("overloaded").count == 3)
        #expect(about("off").isEmpty)
        #expect(about("bad frequency").isEmpty)
        let expectedRequests = 10   // ok, slow, garbled, verbose, parrot once; ratelimited twice; overloaded three times
        #expect(
            sent.count == expectedRequests,
            "\(Dictionary(grouping: sent.map { $0.prompt.components(separatedBy: "Talk prep ").dropFirst().first?.prefix(12) ?? "" }, by: { $0 }).mapValues(\.count))"
        )

        // A later run the same morning pushes nobody twice, and tries the failed users again.
        let rerun = try await database.nudge(["run", "push-trigger", "--now", "2026-02-10T11:30:00Z"], environment: environment)
        #expect(rerun.status == 3)
        #expect(try await database.count("select count(*) from push_log") == 3)
        let retried = 3 + 1 + 1 + 1   // overloaded's three attempts, garbled, verbose, parrot
        #expect(server.requests.count == expectedRequests + retried)
    }

    @Test func frequencyRulesHoldOverFourteenDaysOfHourlyRuns() async throws {
        let database = try await TestDatabase.fresh()
        let zones = ["UTC", "America/New_York", "Asia/Kolkata"]
        var n = 0
        var interval: [Int: Int] = [:]
        var quiet: Set<Int> = []
        for zone in zones {
            for (frequency, days) in [("daily", 1), ("few_times_a_week", 2), ("weekly", 7)] {
                for sessions in [false, true] {
                    n += 1
                    try await PushFixture.user(database, n, timezone: zone, frequency: frequency)
                    try await PushFixture.pattern(database, n)
                    try await PushFixture.conversation(database, n, title: "Old topic", at: "2026-01-20T12:00:00Z")
                    interval[n] = days
                    if sessions {
                        for day in ["2026-03-03", "2026-03-09", "2026-03-10"] {
                            try await database.psql(
                                """
                                insert into conversations (user_id, domain, title, created_at, updated_at)
                                select id, 'fitness', 'Morning session', ('\(day) 08:00'::timestamp at time zone timezone),
                                       ('\(day) 08:20'::timestamp at time zone timezone)
                                  from users where id = md5('user-\(n)')::uuid
                                """)
                        }
                    } else {
                        quiet.insert(n)
                    }
                }
            }
        }
        let server = try await StandInLLM.start { request in (.reply(CannedCopy.reply(to: request.prompt)), .zero) }
        defer { Task { await server.shutdown() } }
        let environment = Environment(pushEnvironment(server, provider: "anthropic"))
        let definition = try JobCatalog(directory: packageRoot.appendingPathComponent("jobs")).definition(named: "push-trigger")!
        let start = ISO8601DateFormatter().date(from: "2026-03-01T00:00:00Z")!
        try await database.withDatabase { db in
            for hour in 0...(14 * 24) {
                let options = RunOptions(
                    now: start.addingTimeInterval(Double(hour) * 3600), nowIsExplicit: true, batchSize: 50,
                    concurrency: 4)
                let summary = try await JobRegistry.withJob(JobSetup(definition: definition, environment: environment, options: options)) { job in
                    try await runQuietly(job, options: options, database: db)
                }
                guard summary.exitCode == 0 else { throw TestFailure("run at hour \(hour) ended \(summary.status): \(summary.failures)") }
            }
        }
        let localDay = "(p.sent_at at time zone u.timezone)::date"
        #expect(
            try await database.count(
                """
                select count(*) from (select p.user_id from push_log p join users u on u.id = p.user_id
                                       group by p.user_id, \(localDay) having count(*) > 1) twice
                """) == 0)
        #expect(
            try await database.count(
                """
                select count(*) from push_log p join users u on u.id = p.user_id
                  join conversations c on c.user_id = p.user_id and (c.created_at at time zone u.timezone)::date = \(localDay)
                """) == 0)
        let days = try await database.psql(
            """
            select right(u.id::text, 12), string_agg(extract(day from \(localDay))::text, ',' order by p.sent_at)
              from push_log p join users u on u.id = p.user_id group by u.id
            """)
        for user in 1...n {
            let id = String(Fixture.userID(user).suffix(12))
            let pushedDays =
                days.split(separator: "\n").first { $0.hasPrefix(id) }.map {
                    $0.split(separator: "|")[1].split(separator: ",").compactMap { Int($0) }
                } ?? []
            for (earlier, later) in zip(pushedDays, pushedDays.dropFirst()) {
                #expect(later - earlier >= interval[user]!, "user \(user): pushes on days \(pushedDays)")
            }
            if quiet.contains(user) {
                // Something to say every day: every day the interval allows is a push.
                #expect(pushedDays == Array(stride(from: 1, through: 14, by: interval[user]!)), "user \(user): \(pushedDays)")
            } else {
                #expect(!pushedDays.contains(3) && !pushedDays.contains(9) && !pushedDays.contains(10), "user \(user): \(pushedDays)")
            }
        }
    }

    @Test func theLLMBudgetStopsTheRunCleanlyAndTheNextRunGoesOn() async throws {
        let database = try await PushFixture.usersToFollowUp(5)
        let server = try await StandInLLM.start { _ in (.reply(valid), .zero) }
        defer { Task { await server.shutdown() } }
        let environment = pushEnvironment(server, provider: "anthropic")
        let arguments = ["run", "push-trigger", "--now", now, "--max-llm-calls", "2", "--json"]
        let first = try await database.nudge(arguments, environment: environment)
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.stdout.contains(#""status":"stopped""#), "\(first.stdout)")
        #expect(first.stdout.contains("--max-llm-calls"))
        #expect(try await database.count("select count(*) from push_log") == 2)
        #expect(try await database.value("select status from job_runs order by id desc limit 1") == "stopped")
        for _ in 0..<3 { _ = try await database.nudge(arguments, environment: environment) }
        #expect(try await database.count("select count(*) from push_log") == 5)
        #expect(try await database.count("select count(distinct user_id) from push_log") == 5)
        #expect(server.requests.count == 5)
    }

    @Test func aDryRunCallsNoLLMUnlessAskedAndWritesNothing() async throws {
        let database = try await PushFixture.usersToFollowUp(3)
        let server = try await StandInLLM.start { _ in (.reply(valid), .zero) }
        defer { Task { await server.shutdown() } }
        let environment = pushEnvironment(server, provider: "anthropic")
        // A dry run's LLM calls are real: they take their turns under the account's rate
        // (provider_pace) like any run's, and write nothing else.
        let unwritten: Set<String> = ["job_runs", "job_run_failures", "provider_pace"]
        let before = try await database.dump(excluding: unwritten)
        let dry = try await database.nudge(
            ["run", "push-trigger", "--now", now, "--dry-run", "--json"],
            environment: ["PUSH_TRIGGER_ENABLED": "true"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains(#""pushed:re_engagement":3"#), "\(dry.stdout)")
        #expect(server.requests.isEmpty)
        let withLLM = try await database.nudge(["run", "push-trigger", "--now", now, "--dry-run", "--dry-run-llm"], environment: environment)
        #expect(withLLM.status == 0, "\(withLLM.stderr)")
        #expect(server.requests.count == 3)
        #expect(try await database.dump(excluding: unwritten) == before)
        #expect(try await database.count("select count(*) from provider_pace where provider = 'anthropic'") == 1)
    }

    @Test func whenTheSessionCheckCannotBeReadNobodyIsPushed() async throws {
        let database = try await PushFixture.usersToFollowUp(3)
        // The session check fails closed (docs/jobs/push-trigger.md, "Frequency").
        let server = try await StandInLLM.start { _ in (.reply(valid), .zero) }
        defer { Task { await server.shutdown() } }
        try await database.psql("alter table conversations rename to conversations_away")
        let result = try await database.nudge(["run", "push-trigger", "--now", now], environment: pushEnvironment(server, provider: "anthropic"))
        try await database.psql("alter table conversations_away rename to conversations")
        #expect(result.status == 1)
        #expect(result.stderr.contains("conversations"), "\(result.stderr)")
        #expect(server.requests.isEmpty)
        #expect(try await database.count("select count(*) from push_log") == 0)
        #expect(try await database.count("select count(*) from notification_outbox") == 0)
        // Readable again, the next run goes on.
        let next = try await database.nudge(["run", "push-trigger", "--now", now], environment: pushEnvironment(server, provider: "anthropic"))
        #expect(next.status == 0, "\(next.stderr)")
        #expect(try await database.count("select count(*) from push_log") == 3)
    }

    /// A run held back by the LLM's rate limit reaches some users hours after it began: each is
    /// decided at the time it is reached, those whose 10:00-13:00 window has passed are skipped
    /// with the reason, and a push's `sent_at` is when it was queued.
    @Test func aLongRunDecidesEachUserAtTheTimeItReachesThem() async throws {
        let database = try await PushFixture.usersToFollowUp(8)
        // Every LLM call takes 40 minutes of the run's clock.
        let clock = SteppingClock(ISO8601DateFormatter().date(from: "2026-02-10T10:30:00Z")!)
        let server = try await StandInLLM.start { _ in
            clock.advance(by: 40 * 60)
            return (.reply(valid), .zero)
        }
        defer { Task { await server.shutdown() } }
        let definition = try JobCatalog(directory: packageRoot.appendingPathComponent("jobs")).definition(named: "push-trigger")!
        let configuration = LLMConfiguration(
            provider: .anthropic, baseURL: server.baseURL, apiKey: "sk-ant-test-not-a-real-key",
            model: LLMConfiguration.defaultAnthropicModel, requestsPerMinute: 1_000)
        let summary = try await database.withDatabase { db in
            try await LLMClient.with(configuration, concurrency: 1) { llm in
                let options = RunOptions(now: clock.now(), nowIsExplicit: false, clock: clock, batchSize: 3)
                return try await runQuietly(
                    PushTriggerJob(definition: definition, llm: llm, budget: LLMBudget()),
                    options: options, database: db)
            }
        }
        #expect(summary.exitCode == 0, "\(summary)")
        #expect(summary.counts.succeeded == 3)
        #expect(summary.counts.skipped == 5)
        #expect(
            try await database.psql("select to_char(sent_at at time zone 'UTC', 'HH24:MI') from push_log order by sent_at")
                == "11:10\n11:50\n12:30")
        #expect(try await database.psql("select distinct local_day from push_log") == "2026-02-10")
        let reasons = try await database.psql("select reason from job_run_failures order by reason").split(separator: "\n")
        #expect(reasons.count == 5)
        // One was asked at 12:30 and answered after 13:00; two were reached within the batch,
        // after the window closed; two only in a later batch.
        #expect(reasons.filter { $0.hasPrefix("the user's window closed at 2026-02-10T13:00:00Z while the LLM was writing") }.count == 1)
        #expect(reasons.filter { $0.hasPrefix("the user's window closed at 2026-02-10T13:00:00Z before the LLM could be asked") }.count == 2)
        #expect(reasons.filter { $0.hasPrefix("the run reached the user at 13:10 local time, after their window") }.count == 2)
        #expect(server.requests.count == 4)
        #expect(try await database.psql("select outcome from llm_calls order by called_at").split(separator: "\n").filter { $0.hasPrefix("unused") }.count == 1)
    }

    /// Two runs racing on one user and local day: the database refuses the second push_log row,
    /// so the user fails with the reason and nothing is queued twice.
    @Test func theDatabaseRefusesASecondProactivePushTheSameLocalDay() async throws {
        let database = try await PushFixture.usersToFollowUp(3)
        // What a racing run wrote and this one could not yet see: today's push, no day mark.
        try await database.psql(
            """
            insert into push_log (user_id, push_type, content, sent_at, local_day)
            values (md5('user-2')::uuid, 're_engagement', 'x — y', '2026-01-01T10:00:00Z', '2026-02-10')
            """)
        let server = try await StandInLLM.start { _ in (.reply(valid), .zero) }
        defer { Task { await server.shutdown() } }
        let result = try await database.nudge(["run", "push-trigger", "--now", now], environment: pushEnvironment(server, provider: "anthropic"))
        #expect(result.status == 3, "\(result.stderr)")
        #expect(try await database.value("select reason from job_run_failures").contains("push_log_one_a_local_day"))
        #expect(try await database.count("select count(*) from push_log where user_id = md5('user-2')::uuid") == 1)
        #expect(try await database.count("select count(*) from notification_outbox where user_id = md5('user-2')::uuid") == 0)
        #expect(try await database.count("select count(*) from notification_outbox") == 2)
    }

    /// SIGTERM while LLM calls hang: the calls get the grace, then are cancelled; the users they
    /// were for are left undone, the run ends within the grace, and the next run pushes them.
    @Test func sigtermEndsARunWithHangingLLMCallsWithinTheGrace() async throws {
        let database = try await PushFixture.usersToFollowUp(6)
        let hang = Flag(true)
        let server = try await StandInLLM.start { request in
            let stalls = hang.value && (request.prompt.contains("Topic 2") || request.prompt.contains("Topic 5"))
            return (.reply(valid), stalls ? .seconds(3600) : .zero)
        }
        defer { Task { await server.shutdown() } }
        var environment = pushEnvironment(server, provider: "anthropic")
        // The longest grace there is: the four calls that answer at once are over well within
        // it, however busy the machine, and the two that hang an hour are not.
        environment["NUDGE_SHUTDOWN_GRACE_SECONDS"] = "30"
        let arguments = ["run", "push-trigger", "--now", now, "--concurrency", "4"]
        let running = try database.startNudge(arguments, environment: environment)
        try await running.reaches("the six LLM calls", on: server.changes) { server.requests.count == 6 }
        running.signal(SIGTERM)
        // The hanging calls last an hour: a run that ends within the budget ended them itself,
        // after the grace (its length is checked on a clock the test moves, in process).
        let ended = await running.endsWithinTheBudget()
        #expect(ended, "the run did not end after its grace")
        let stopped = await running.finished()
        #expect(stopped.status == 1, "\(stopped.stderr)")
        #expect(try await database.value("select status from job_runs") == "interrupted")
        #expect(try await database.count("select count(*) from push_log") == 4)
        #expect(try await database.count("select count(*) from job_run_failures where reason like 'not done: the run was stopped by a signal%'") == 2)

        hang.value = false
        let next = try await database.nudge(arguments, environment: environment)
        #expect(next.status == 0, "\(next.stderr)")
        #expect(try await database.count("select count(*) from push_log") == 6)
        #expect(try await database.count("select count(distinct user_id) from push_log") == 6)
    }

    /// Ctrl-C waits for the batch; a second Ctrl-C ends the process at once, and the next run
    /// closes the books on it and goes on.
    @Test func aSecondInterruptEndsTheProcessAtOnce() async throws {
        let database = try await PushFixture.usersToFollowUp(2)
        let hang = Flag(true)
        let server = try await StandInLLM.start { _ in (.reply(valid), hang.value ? .seconds(3600) : .zero) }
        defer { Task { await server.shutdown() } }
        var environment = pushEnvironment(server, provider: "anthropic")
        environment["NUDGE_SHUTDOWN_GRACE_SECONDS"] = "30"
        let running = try database.startNudge(["run", "push-trigger", "--now", now, "--concurrency", "2"], environment: environment)
        try await running.reaches("the two LLM calls", on: server.changes) { server.requests.count == 2 }
        running.signal(SIGINT)
        // The first interrupt waits for the calls in flight: a run that ended on it would be
        // seen here (a second is enough for a process to end, never needed for it to go on).
        #expect(!(await running.ends(within: 1)), "the first interrupt waits for the calls in flight")
        running.signal(SIGINT)
        // Ended by the second interrupt, not by the grace's end: its words say which.
        let stopped = await running.finished()
        #expect(stopped.status == 1)
        #expect(stopped.stderr.contains("a second SIGINT: ending now"), "\(stopped.stderr)")
        hang.value = false
        let next = try await database.nudge(["run", "push-trigger", "--now", now], environment: environment)
        #expect(next.status == 0, "\(next.stderr)")
        #expect(try await database.psql("select status from job_runs order by id") == "interrupted\nsucceeded")
        #expect(try await database.count("select count(*) from push_log") == 2)
    }

    /// A batch reads the tokens of its own users, not the whole table: with 1,000 users in their
    /// window among 10,000 with a token, a run reads far fewer token rows than one pass over
    /// them. (The `exists` over the push_tokens view it replaced read every token and every user
    /// for each batch: 19 minutes for a million users' first run, where 100,000 took 20 s.)
    @Test func aBatchReadsItsOwnUsersTokensNotEveryToken() async throws {
        let database = try await TestDatabase.fresh()
        try await database.psql(
            """
            begin;
            insert into users (id, timezone, locale, created_at, last_active_at)
            select md5('user-' || n)::uuid, case when n <= 1000 then 'UTC' else 'Asia/Tokyo' end, 'en',
                   '2026-01-01T00:00:00Z', '2026-02-01T12:00:00Z'
              from generate_series(1, 10000) n;
            insert into context_profiles (user_id, notification_preferences)
            select md5('user-' || n)::uuid, '{"check_ins_enabled": true, "frequency": "daily"}'
              from generate_series(1, 10000) n;
            insert into user_push_tokens (user_id, device_token, platform)
            select md5('user-' || n)::uuid, 'device-token-' || n, 'ios' from generate_series(1, 10000) n;
            commit;
            analyze;
            """)
        let before = try await database.rowsRead(["user_push_tokens"])
        let run = try await database.nudge(
            ["run", "push-trigger", "--dry-run", "--json", "--now", now, "--batch-size", "1000"],
            environment: ["PUSH_TRIGGER_ENABLED": "true"])
        #expect(run.status == 0, "\(run.stderr)")
        let read = try await database.rowsRead(["user_push_tokens"]) - before
        let summary = try #require(JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])["summary"]
        let tally = try #require((summary as? [String: Any])?["tally"] as? [String: Int], "\(run.stdout.prefix(500))")
        // Everyone in their window was read and decided (none has anything to follow up).
        #expect(tally == ["skipped:nothing_to_say": 1_000], "\(tally)")
        #expect(read < 2_000, "\(read) token rows read")
    }

    @Test func itShipsDisabledAndNeedsAKeyOnceEnabled() async throws {
        let database = try await TestDatabase.fresh()
        try await PushFixture.user(database, 1)
        let off = try await database.nudge(["run", "push-trigger", "--now", now])
        #expect(off.status == 0)
        #expect(off.stdout.contains("PUSH_TRIGGER_ENABLED is not set"), "\(off.stdout)")
        let noKey = try await database.nudge(["run", "push-trigger", "--now", now], environment: ["PUSH_TRIGGER_ENABLED": "true"])
        #expect(noKey.status == 1)
        #expect(noKey.stderr.contains("ANTHROPIC_API_KEY is not set"), "\(noKey.stderr)")
        #expect(try await database.count("select count(*) from job_runs") == 0)
    }
}

/// A switch the test flips while a stand-in reads it.
private final class Flag: Sendable {
    private let state: Mutex<Bool>

    init(_ value: Bool) {
        state = Mutex(value)
    }

    var value: Bool {
        get { state.withLock { $0 } }
        set { state.withLock { $0 = newValue } }
    }
}

/// A run's clock that the test moves forward.
private final class SteppingClock: RunClock {
    private let instant: Mutex<Date>

    init(_ start: Date) {
        instant = Mutex(start)
    }

    func now() -> Date { instant.withLock { $0 } }

    func advance(by seconds: TimeInterval) { instant.withLock { $0 = $0.addingTimeInterval(seconds) } }
}

private func runQuietly<J: Job>(_ job: J, options: RunOptions, database: Database) async throws -> RunSummary {
    try await JobRunner(job: job, options: options, database: database, observer: SilentObserver()).run()
}
