import Foundation
import NudgeStandIns
import Testing

@testable import NudgeCore

private func at(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }

/// The secret and address the tests sign and link with.
let digestSecret = "0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e"
let digestPostalAddress = "FitCircle Test, 1 Test Street, 75001 Paris"

/// What the emailing jobs are given in the tests: `template`'s files, links signed with the tests' secret.
func testEmailSetup(_ template: String, publicURL: String = "https://nudge.example.test") throws -> EmailSetup {
    EmailSetup(
        templates: try EmailTemplates(directory: packageRoot.appendingPathComponent("templates/email"), emails: [template]),
        links: try UnsubscribeLinks(secret: digestSecret, publicURL: publicURL), postalAddress: digestPostalAddress,
        dashboardURL: nil)
}

func digestEnvironment(publicURL: String = "https://nudge.example.test") -> [String: String] {
    ["NUDGE_UNSUBSCRIBE_SECRET": digestSecret, "NUDGE_PUBLIC_URL": publicURL, "NUDGE_POSTAL_ADDRESS": digestPostalAddress]
}

/// Runs weekly-digest in this process at `now`, as cron would start it.
func weeklyDigest(
    _ database: TestDatabase, at now: Date, window: DayWindow? = nil,
    publicURL: String = "https://nudge.example.test"
) async throws -> RunSummary {
    try await database.withDatabase { db in
        let job = WeeklyDigestJob(
            definition: jobDefinition("weekly-digest"),
            email: try testEmailSetup(DigestEmail.template, publicURL: publicURL))
        let options = RunOptions(now: now, nowIsExplicit: true, window: window, batchSize: 50, concurrency: 1)
        return try await JobRunner(job: job, options: options, database: db, observer: SilentObserver()).run()
    }
}

/// A loopback Resend and the environment that points dispatch at it.
struct ResendStandIn: Sendable {
    let resend: StandInResend

    static func start(script: @escaping StandInResend.Script = { _ in .accept }) async throws -> ResendStandIn {
        ResendStandIn(resend: try await StandInResend.start(script: script))
    }

    var environment: [String: String] {
        [
            "RESEND_API_KEY": resend.apiKey, "RESEND_FROM": "FitCircle <coach@fitcircle.example>", "RESEND_BASE_URL": resend.baseURL,
            "RESEND_REQUESTS_PER_SECOND": "100", "NUDGE_PUSH_TIMEOUT_SECONDS": "10",
        ]
    }
}

enum DigestFixture {
    /// User n in `zone`, with an address, an iPhone, and `locale`.
    static func user(_ database: TestDatabase, _ n: Int, zone: String, locale: String = "en", name: String? = nil) async throws {
        try await Outbox.user(database, n, zone: zone, locale: locale, ios: 1, signup: "2026-01-01T00:00:00Z")
        try await database.psql(
            """
            update users set email = 'user\(n)@example.test', display_name = \(name.map { "$$\($0)$$" } ?? "null")
             where id = '\(Fixture.userID(n))'
            """)
    }

    /// Steps every day (and a check-in most days), daily steps goals, and weekly goals, from `from` to `to`.
    static func activity(_ database: TestDatabase, _ n: Int, from: String, to: String) async throws {
        let id = Fixture.userID(n)
        try await database.psql(
            """
            insert into daily_tracking (user_id, date, steps, mood, energy, weight)
            select '\(id)', d::date, 5000 + (\(n) * 311 + extract(doy from d)::int * 997) % 6000,
                   case when extract(isodow from d) <> 3 or d < '2026-03-16' then 3 end, 4,
                   180 - extract(doy from d)::int * 0.1
              from generate_series('\(from)'::date, '\(to)'::date, '1 day') d;
            insert into daily_goals (user_id, date, goal_type, target_value)
            select '\(id)', d::date, 'steps', 7000 from generate_series('\(from)'::date, '\(to)'::date, '1 day') d;
            insert into weekly_goals (user_id, week_start, goal_type, target_value)
            select '\(id)', d::date, 'steps', 50000
              from generate_series('\(from)'::date, '\(to)'::date, '1 day') d where extract(isodow from d) = 1;
            """)
    }
}

@Suite(.serialized, .dropsItsDatabases) struct WeeklyDigestScheduleTests {
    /// Each zone's Sunday 20:00 as UTC, for six weeks in which the United States (8 March), the
    /// United Kingdom (29 March) and New Zealand (5 April) change their clocks; Kathmandu, at
    /// +05:45, never does. Worked out with Python's zoneinfo, not with Nudge's calendar.
    static let sundays: [(zone: String, instants: [String])] = [
        (
            "Pacific/Auckland",
            [
                "2026-03-01T07:00:00Z", "2026-03-08T07:00:00Z", "2026-03-15T07:00:00Z", "2026-03-22T07:00:00Z",
                "2026-03-29T07:00:00Z", "2026-04-05T08:00:00Z",
            ]
        ),
        (
            "Asia/Kathmandu",
            [
                "2026-03-01T14:15:00Z", "2026-03-08T14:15:00Z", "2026-03-15T14:15:00Z", "2026-03-22T14:15:00Z",
                "2026-03-29T14:15:00Z", "2026-04-05T14:15:00Z",
            ]
        ),
        (
            "Europe/London",
            [
                "2026-03-01T20:00:00Z", "2026-03-08T20:00:00Z", "2026-03-15T20:00:00Z", "2026-03-22T20:00:00Z",
                "2026-03-29T19:00:00Z", "2026-04-05T19:00:00Z",
            ]
        ),
        (
            "America/Los_Angeles",
            [
                "2026-03-02T04:00:00Z", "2026-03-09T03:00:00Z", "2026-03-16T03:00:00Z", "2026-03-23T03:00:00Z",
                "2026-03-30T03:00:00Z", "2026-04-06T03:00:00Z",
            ]
        ),
    ]

    /// Cron's every 15 minutes from each Saturday 12:00 UTC to Monday 12:00 UTC, six weekends:
    /// each user gets exactly one digest (a push and an email) per week, queued by the run at
    /// their Sunday 20:00, and none at any other tick; a rerun of a digested week queues nothing.
    @Test func oneDigestPerWeekAtEachUsersSundayEveningAcrossClockChanges() async throws {
        let database = try await TestDatabase.fresh()
        for (index, zone) in Self.sundays.enumerated() {
            try await DigestFixture.user(database, index + 1, zone: zone.zone)
            try await DigestFixture.activity(database, index + 1, from: "2026-02-01", to: "2026-04-06")
        }
        var queuedAt: [String: [String]] = [:]   // user -> the ticks that queued their digests
        var lastID = 0
        var skipped = 0
        try await database.pinned { database in
            for saturday in ["2026-02-28", "2026-03-07", "2026-03-14", "2026-03-21", "2026-03-28", "2026-04-04"] {
                var tick = at("\(saturday)T12:00:00Z")
                let end = tick.addingTimeInterval(48 * 3600)
                while tick < end {
                    guard try await database.anyoneDue(for: "weekly-digest", at: tick) else {
                        // One in eight of the runs skipped as reading nobody is run: it does read nobody.
                        skipped += 1
                        if skipped % 8 == 0 { #expect(try await weeklyDigest(database, at: tick).counts.processed == 0, "\(tick)") }
                        tick = tick.addingTimeInterval(15 * 60)
                        continue
                    }
                    let summary = try await weeklyDigest(database, at: tick)
                    #expect(summary.counts.failed == 0, "\(summary.failures)")
                    if summary.counts.succeeded > 0 {
                        let rows = try await database.psql(
                            """
                            select id, user_id, channel from notification_outbox where id > \(lastID) and notification_type = 'weekly_digest'
                             order by id
                            """
                        ).split(separator: "\n")
                        for row in rows {
                            let fields = row.split(separator: "|").map(String.init)
                            lastID = max(lastID, Int(fields[0])!)
                            if fields[2] == "push" { queuedAt[fields[1], default: []].append(ISO8601DateFormatter().string(from: tick)) }
                        }
                    }
                    tick = tick.addingTimeInterval(15 * 60)
                }
            }
        }
        for (index, zone) in Self.sundays.enumerated() {
            #expect(queuedAt[Fixture.userID(index + 1)] == zone.instants, "\(zone.zone)")
        }
        // A push and an email per user and week, each under its Sunday; one work mark per week.
        #expect(
            try await database.psql(
                """
                select channel, count(*), count(distinct (user_id, local_day)) from notification_outbox
                 where notification_type = 'weekly_digest' group by 1 order by 1
                """) == "email|24|24\npush|24|24")
        #expect(try await database.count("select count(*) from job_work where job = 'weekly-digest' and extract(isodow from local_day) = 7") == 24)
        // Running again at the last tick of the week, or backfilling a digested week, queues nothing.
        let again = try await weeklyDigest(database, at: at("2026-04-06T05:00:00Z"))
        #expect(again.counts.succeeded == 0)
        let backfill = try await weeklyDigest(
            database, at: at("2026-04-06T05:00:00Z"),
            window: try DayWindow(from: LocalDate(year: 2026, month: 3, day: 22)!, to: LocalDate(year: 2026, month: 3, day: 22)!))
        #expect(backfill.counts.succeeded == 0)
        #expect(try await database.count("select count(*) from notification_outbox where notification_type = 'weekly_digest'") == 48)
    }

    /// A run that comes more than 16 hours after a user's Sunday 20:00 (an outage) sends nothing
    /// late by itself and says how to backfill; the backfill sends it.
    @Test func aLateWeekIsLeftToABackfill() async throws {
        let database = try await TestDatabase.fresh()
        try await DigestFixture.user(database, 1, zone: "Europe/London")
        try await DigestFixture.activity(database, 1, from: "2026-03-01", to: "2026-03-24")
        let late = try await weeklyDigest(database, at: at("2026-03-23T13:00:00Z"))
        #expect(late.counts.succeeded == 0)
        #expect(try await database.count("select count(*) from notification_outbox") == 0)
        let backfill = try await weeklyDigest(
            database, at: at("2026-03-23T13:00:00Z"),
            window: try DayWindow(from: LocalDate(year: 2026, month: 3, day: 22)!, to: LocalDate(year: 2026, month: 3, day: 22)!))
        #expect(backfill.counts.succeeded == 1)
        #expect(try await database.psql("select channel, local_day from notification_outbox order by 1") == "email|2026-03-22\npush|2026-03-22")
    }
}
