import Foundation
import NudgeStandIns
import Testing

@testable import NudgeCore

private func at(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }

func jobDefinition(_ name: String) -> JobDefinition {
    try! JobCatalog(directory: packageRoot.appendingPathComponent("jobs")).definition(named: name)!
}

/// Runs dispatch in this process at `now`, as cron would start it at that minute (with as many
/// connections as `nudge run` opens for its lanes).
func dispatch(_ database: TestDatabase, environment: [String: String], at now: Date, lanes: Int = 1) async throws -> RunSummary {
    try await database.withDatabase(connections: max(4, lanes + 2)) { db in
        try await DeliveryServices.with(Environment(environment), dryRun: false) { push in
            var options = RunOptions(now: now, nowIsExplicit: true, batchSize: 50, concurrency: 50)
            options.lanes = lanes
            let job = DispatchJob(definition: jobDefinition("dispatch"), push: push, lease: 120, dryRun: false, clock: options.clock)
            return try await JobRunner(job: job, options: options, database: db, observer: SilentObserver()).run()
        }
    }
}

/// Quiet hours, the weekend pause and the daily cap over a weekend whose Sunday night the clocks
/// change, in three zones: runs every 30 minutes, as cron's every minute would, from Saturday
/// 20:00 to Monday 09:00 local.
@Suite(.serialized, .dropsItsDatabases) struct DispatchScheduleTests {
    struct Zone: Sendable, CustomTestStringConvertible {
        let name: String
        /// Local instants as UTC: Saturday 20:00 (the simulation starts), Saturday 20:30, 23:00,
        /// 23:30, Sunday 01:45, 08:00, 10:00, 11:00, 12:00, 20:00, Monday 07:00, 09:00 (it ends).
        let times: [String: String]

        var testDescription: String { name }
    }

    static let zones = [
        Zone(
            name: "America/New_York",
            times: [
                "sat 20:00": "2026-03-08T01:00:00Z", "sat 20:30": "2026-03-08T01:30:00Z", "sat 23:00": "2026-03-08T04:00:00Z",
                "sat 23:30": "2026-03-08T04:30:00Z", "sun 01:45": "2026-03-08T06:45:00Z", "sun 08:00": "2026-03-08T12:00:00Z",
                "sun 10:00": "2026-03-08T14:00:00Z", "sun 11:00": "2026-03-08T15:00:00Z", "sun 12:00": "2026-03-08T16:00:00Z",
                "sun 20:00": "2026-03-09T00:00:00Z", "mon 07:00": "2026-03-09T11:00:00Z", "mon 09:00": "2026-03-09T13:00:00Z",
            ]),
        Zone(
            name: "Europe/Paris",
            times: [
                "sat 20:00": "2026-03-28T19:00:00Z", "sat 20:30": "2026-03-28T19:30:00Z", "sat 23:00": "2026-03-28T22:00:00Z",
                "sat 23:30": "2026-03-28T22:30:00Z", "sun 01:45": "2026-03-29T00:45:00Z", "sun 08:00": "2026-03-29T06:00:00Z",
                "sun 10:00": "2026-03-29T08:00:00Z", "sun 11:00": "2026-03-29T09:00:00Z", "sun 12:00": "2026-03-29T10:00:00Z",
                "sun 20:00": "2026-03-29T18:00:00Z", "mon 07:00": "2026-03-30T05:00:00Z", "mon 09:00": "2026-03-30T07:00:00Z",
            ]),
        Zone(
            name: "Australia/Lord_Howe",
            times: [
                "sat 20:00": "2026-04-04T09:00:00Z", "sat 20:30": "2026-04-04T09:30:00Z", "sat 23:00": "2026-04-04T12:00:00Z",
                "sat 23:30": "2026-04-04T12:30:00Z", "sun 01:45": "2026-04-04T14:45:00Z", "sun 08:00": "2026-04-04T21:30:00Z",
                "sun 10:00": "2026-04-04T23:30:00Z", "sun 11:00": "2026-04-05T00:30:00Z", "sun 12:00": "2026-04-05T01:30:00Z",
                "sun 20:00": "2026-04-05T09:30:00Z", "mon 07:00": "2026-04-05T20:30:00Z", "mon 09:00": "2026-04-05T22:30:00Z",
            ]),
    ]

    @Test(arguments: zones)
    func quietHoursTheWeekendPauseAndTheDailyCapHoldAcrossTheChange(_ zone: Zone) async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start()
        defer { Task { await push.shutdown() } }
        let t = zone.times
        // User 1: the standard quiet hours (22:00–08:00), no weekend pause.
        try await Outbox.user(database, 1, zone: zone.name)
        let atRisk = try await Outbox.queue(database, 1, type: "weekly_digest", at: t["sat 23:00"]!)
        let reminder = try await Outbox.queue(database, 1, type: "daily_checkin", at: t["sat 23:30"]!)
        let moved = try await Outbox.queue(database, 1, type: "streak_milestone", at: t["sun 01:45"]!)
        // Worth sending only on its own day: held to 08:00, it would go out stale.
        let stale = try await Outbox.queue(database, 1, type: "streak_at_risk", at: t["sat 23:00"]!)
        let cheer = try await Outbox.queue(database, 1, type: "social_engagement", at: t["sun 10:00"]!)
        let goal = try await Outbox.queue(database, 1, type: "weekly_goal_progress", at: t["sun 11:00"]!)
        let submit = try await Outbox.queue(database, 1, type: "data_submission", at: t["sun 12:00"]!)
        let evening = try await Outbox.queue(database, 1, type: "daily_checkin", at: t["sun 20:00"]!)
        // User 2: quiet 23:00–07:00 and weekends paused.
        try await Outbox.user(database, 2, zone: zone.name)
        try await database.psql(
            """
            insert into notification_preferences (user_id, dnd_start, dnd_end, pause_weekends)
            values ('\(Fixture.userID(2))', '23:00', '07:00', true)
            """)
        // Sunday noon: held by the weekend pause, then the night, within its 24 hours' shelf life (a
        // type dispatch does not know: optional, the default shelf life).
        let weekend = try await Outbox.queue(database, 2, type: "coach_tip", at: t["sun 12:00"]!)
        // Saturday evening: the weekend pause would hold it past its six hours.
        let cheered = try await Outbox.queue(database, 2, type: "social_engagement", at: t["sat 20:30"]!)
        let critical = try await Outbox.queue(database, 2, type: "daily_checkin", at: t["sun 12:00"]!)

        var now = at(t["sat 20:00"]!)
        while now <= at(t["mon 09:00"]!) {
            let summary = try await dispatch(database, environment: push.environment, at: now)
            #expect(summary.exitCode == 0, "\(summary.message ?? "")")
            now = now.addingTimeInterval(30 * 60)
        }

        func sent(_ id: Int64) async throws -> String {
            try await database.value(
                "select coalesce(to_char(sent_at at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), status) from notification_outbox where id = \(id)")
        }
        await #expect(try sent(reminder) == t["sat 23:30"]!)   // critical: through quiet hours
        await #expect(try sent(atRisk) == t["sun 08:00"]!)   // deferred to the window's end…
        await #expect(try sent(moved) == t["sun 08:00"]!)   // …on the night the clocks change
        await #expect(try sent(stale) == "suppressed")   // past its shelf life by then
        #expect(
            try await database.value("select last_error from notification_outbox where id = \(stale)")
                .hasPrefix("expired: streak_at_risk due \(t["sat 23:00"]!) was worth sending until"))
        // The daily total counts each push on the day it was for: the digest deferred from Saturday
        // night to 08:00 is Saturday's, so Sunday's are the milestone, the cheer and the goal.
        await #expect(try sent(cheer) == t["sun 10:00"]!)
        await #expect(try sent(goal) == t["sun 11:00"]!)   // the day's third
        await #expect(try sent(submit) == "suppressed")   // a fourth is over the cap
        await #expect(try sent(evening) == t["sun 20:00"]!)   // critical: never held by the cap
        await #expect(try sent(weekend) == t["mon 07:00"]!)   // the weekend, then the night
        await #expect(try sent(cheered) == "suppressed")   // stale by Monday morning
        await #expect(try sent(critical) == t["sun 12:00"]!)   // critical: through the weekend pause
        let sunday = try await database.value("select (timestamptz '\(t["sun 12:00"]!)' at time zone '\(zone.name)')::date")
        #expect(
            try await database.value("select last_error from notification_outbox where id = \(submit)")
                .hasPrefix("caps: daily cap: 3 notifications already sent for \(sunday)"))
        // Deferred to the instant the window ends, not to the next run after it.
        #expect(
            try await database.psql("select status, error_msg from notification_logs where outbox_id = \(atRisk) order by created_at")
                .hasPrefix("deferred|quiet hours 22:00–08:00: until \(t["sun 08:00"]!)"))
        #expect(
            try await database.value("select error_msg from notification_logs where outbox_id = \(weekend) and status = 'deferred'")
                .hasSuffix("until \(t["mon 07:00"]!)"))
        #expect(
            try await database.value("select error_msg from notification_logs where outbox_id = \(weekend) and status = 'deferred'")
                .hasPrefix("weekend pause and quiet hours 23:00–07:00"))
        #expect(try await database.count("select count(*) from notification_logs where status = 'suppressed' and error_msg like 'caps: daily cap%'") == 1)
        // What the device saw: eight pushes, one each.
        #expect(push.apns.requests.count == 8)
        #expect(Set(push.apns.requests.compactMap(\.collapseID)).count == 8)
    }
}
