import Foundation
import Synchronization
import Testing

@testable import NudgeCore

private func at(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }

private let iphone = Device(tokenID: UUID(), token: String(repeating: "ab", count: 32), platform: "ios")
private let paris = try! LocalCalendar(identifier: "Europe/Paris")

/// The shelf lives `jobs/dispatch.json` ships.
private let shipped: ShelfLife = {
    let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("jobs/dispatch.json")
    return try! JSONDecoder().decode(JobDefinition.self, from: Data(contentsOf: url)).shelfLife!
}()

private func row(
    _ id: Int64, _ type: String, channel: DeliveryChannel = .push, due: String, payload: String = "{}",
    dueAt: String? = nil
) -> QueuedNotification {
    QueuedNotification(
        id: id, type: type, channel: channel, localDay: LocalDate(iso8601: String(due.prefix(10)))!,
        deliverAfter: at(due), dueAt: dueAt.map(at), title: "t", body: "b", payload: payload)
}

private func plan(
    _ rows: [QueuedNotification], providers: [DeliveryProvider: ProviderState] = [.apns: .ready, .fcm: .ready],
    preferences: DeliveryPreferences = .standard, now: String
) -> DispatchRules.Plan {
    DispatchRules.plan(
        rows: rows, facts: .init(preferences: preferences, devices: [iphone], address: "ana@example.com"),
        providers: providers, locale: "en", calendar: paris, now: at(now), shelfLife: shipped)
}

@Suite struct ShelfLifeTests {
    @Test func eachTypeIsWorthSendingForItsOwnTime() {
        // Monday 18:00 in Paris (16:00 UTC): a streak at risk is worth sending until Paris's midnight.
        #expect(shipped.expiry(of: row(1, "streak_at_risk", due: "2026-03-09T16:00:00Z"), calendar: paris) == at("2026-03-09T23:00:00Z"))
        #expect(shipped.expiry(of: row(2, "proactive_push", due: "2026-03-09T16:00:00Z"), calendar: paris) == at("2026-03-09T19:00:00Z"))
        #expect(shipped.expiry(of: row(3, "weekly_digest", due: "2026-03-08T19:00:00Z"), calendar: paris) == at("2026-03-09T19:00:00Z"))
        #expect(
            shipped.expiry(of: row(4, "weekly_digest", channel: .email, due: "2026-03-08T19:00:00Z"), calendar: paris)
                == at("2026-03-10T19:00:00Z"))
        #expect(shipped.expiry(of: row(5, "preview_push", due: "2026-03-09T16:00:00Z"), calendar: paris) == at("2026-03-09T16:10:00Z"))
        // A move on a daily board at 22:30 is stale at midnight, when the board resets; on a weekly board, after 2 hours.
        #expect(
            shipped.expiry(
                of: row(6, "leaderboard_change", due: "2026-03-09T21:30:00Z", payload: #"{"period":"daily"}"#),
                calendar: paris) == at("2026-03-09T23:00:00Z"))
        #expect(
            shipped.expiry(
                of: row(7, "leaderboard_change", due: "2026-03-09T21:30:00Z", payload: #"{"period":"weekly"}"#),
                calendar: paris) == at("2026-03-09T23:30:00Z"))
        // On the board's last evening, a weekly board's move ends with the week.
        #expect(
            shipped.expiry(
                of: row(8, "leaderboard_change", due: "2026-03-15T22:30:00Z", payload: #"{"period":"weekly"}"#),
                calendar: paris) == at("2026-03-15T23:00:00Z"))
        // A type no one named: a day for a push.
        #expect(shipped.expiry(of: row(9, "something_new", due: "2026-03-09T16:00:00Z"), calendar: paris) == at("2026-03-10T16:00:00Z"))
    }

    @Test func aShelfLifeTheFileCannotSayIsRefusedWithItsName() {
        let bad = Data(#"{"streak_at_risk": "until tomorrow"}"#.utf8)
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(ShelfLife.self, from: bad) }
        #expect(ShelfLife.parse("90s") == .duration(90))
        #expect(ShelfLife.parse("End of local day") == .endOfLocalDay)
        #expect(ShelfLife.parse("end of period, at most 2h") == .endOfPeriod(atMost: 7200))
        #expect(ShelfLife.parse("0m") == nil)
        #expect(ShelfLife.parse("-3h") == nil)
    }

    /// Monday's "streak at risk" after an outage is not sent on Tuesday morning, nor does it use
    /// up Tuesday's cap: it ends suppressed, expired.
    @Test func aNotificationPastItsShelfLifeIsNotSent() {
        let result = plan(
            [row(1, "streak_at_risk", due: "2026-03-09T16:00:00Z", dueAt: "2026-03-10T07:00:00Z")],
            now: "2026-03-10T07:00:00Z")
        guard case .suppressed(step: "expired", let reason)? = result.outcomes[1] else {
            Issue.record("sent stale: \(String(describing: result.outcomes[1]))")
            return
        }
        #expect(reason.contains("worth sending until 2026-03-09T23:00:00Z (shelf life: end of local day)"))
        #expect(result.deliveries.isEmpty)
    }

    /// Quiet hours from 22:00 would hold a 21:30 leaderboard move until 08:00: past its board's
    /// day, so it ends now instead of going out stale in the morning.
    @Test func aDeferralPastTheShelfLifeEndsTheRowNow() {
        var late = DeliveryPreferences()
        late.quietHours = QuietHours(start: LocalTime(hour: 21, minute: 0)!, end: LocalTime(hour: 8, minute: 0)!, pauseWeekends: false)
        let result = plan(
            [
                row(1, "leaderboard_change", due: "2026-03-09T20:30:00Z", payload: #"{"period":"daily"}"#),
                row(2, "social_engagement", due: "2026-03-09T20:30:00Z"),
            ],
            preferences: late, now: "2026-03-09T20:30:00Z")
        guard case .suppressed(step: "expired", _)? = result.outcomes[1] else {
            Issue.record("deferred past its shelf life: \(String(describing: result.outcomes[1]))")
            return
        }
        // A social push is worth six hours: until 03:30 in Paris, before the quiet hours end.
        guard case .suppressed(step: "expired", _)? = result.outcomes[2] else {
            Issue.record("kept")
            return
        }
        let weekly = plan([row(3, "weekly_goal_progress", due: "2026-03-09T19:30:00Z")], preferences: late, now: "2026-03-09T20:30:00Z")
        guard case .suppressed(step: "expired", _)? = weekly.outcomes[3] else {
            Issue.record("kept past its day")
            return
        }
        // At 07:00 the quiet hour left ends well within its six hours: deferred, as ever.
        let morning = plan([row(4, "social_engagement", due: "2026-03-09T06:00:00Z")], preferences: late, now: "2026-03-09T06:00:00Z")
        #expect(morning.outcomes[4] == .deferred(until: at("2026-03-09T07:00:00Z"), reason: "quiet hours 21:00–08:00"))
    }

    /// A provider that cannot be used parks its notifications until their shelf life ends; one
    /// held by its quota has them looked at again when the quota allows.
    @Test func aRowWaitingForAProviderIsParkedUntilItsShelfLifeEnds() {
        let down = plan(
            [row(1, "streak_at_risk", due: "2026-03-09T16:00:00Z")],
            providers: [.apns: .unavailable("APNs is down"), .fcm: .ready], now: "2026-03-09T16:00:00Z")
        #expect(down.outcomes[1] == .waiting(until: at("2026-03-09T23:00:00Z"), reason: "APNs is down", parkedFor: .apns))
        let held = plan(
            [row(1, "streak_at_risk", due: "2026-03-09T16:00:00Z")],
            providers: [.apns: .held("quota", for: 90), .fcm: .ready], now: "2026-03-09T16:00:00Z")
        #expect(held.outcomes[1] == .waiting(until: at("2026-03-09T16:01:30Z"), reason: "quota"))
        let email = plan(
            [
                row(
                    2, "weekly_digest", channel: .email, due: "2026-03-08T19:00:00Z",
                    payload: #"{"email_type":"weekly_digest","html":"<p>hi</p>","tags":{}}"#)
            ],
            providers: [.resend: .unavailable("Resend is down")], now: "2026-03-08T19:00:00Z")
        #expect(email.outcomes[2] == .waiting(until: at("2026-03-10T19:00:00Z"), reason: "Resend is down", parkedFor: .resend))
    }
}

@Suite struct OutageWaitTests {
    /// One push a minute through a 15-minute FCM 503 never makes FCM down, so each row meets
    /// the outage alone: it waits, longer each time, spending no attempt, and is still pending
    /// when FCM is back.
    @Test func aTrickleThroughAFifteenMinuteOutageFailsNothing() {
        let due = "2026-03-09T16:00:00Z"
        var current = row(1, "streak_at_risk", due: due)
        let delivery = plan([current], now: due).deliveries[0]
        var now = at(due)
        var waits: [TimeInterval] = []
        while now < at(due).addingTimeInterval(15 * 60) {
            let settled = DispatchRules.settle(
                current, delivery: delivery,
                results: [iphone.key: .unavailable("APNs 503 ServiceUnavailable", after: nil)],
                now: now, jitter: 1)
            #expect(settled.status == .pending)
            #expect(!settled.countsAsAttempt)
            guard let next = settled.nextAttemptAt else {
                Issue.record("no next attempt")
                return
            }
            waits.append(next.timeIntervalSince(now))
            now = next
            current = QueuedNotification(
                id: 1, type: "streak_at_risk", localDay: current.localDay, deliverAfter: current.deliverAfter,
                dueAt: now, title: "t", body: "b", attempts: current.attempts)
        }
        #expect(waits.first == DispatchRules.firstRetryDelay)
        #expect(waits == waits.sorted())
        #expect(waits.allSatisfy { $0 <= DispatchRules.longestOutageWait })
        #expect(waits.count < 20)
    }

    @Test func anOutageWaitGrowsWithTheWaitAndHonoursRetryAfter() {
        let due = at("2026-03-09T16:00:00Z")
        #expect(DispatchRules.outageWait(since: due, now: due, retryAfter: nil, jitter: 1) == 30)
        #expect(DispatchRules.outageWait(since: due, now: due.addingTimeInterval(600), retryAfter: nil, jitter: 1) == 150)
        #expect(DispatchRules.outageWait(since: due, now: due.addingTimeInterval(600), retryAfter: nil, jitter: 0) == 75)
        #expect(DispatchRules.outageWait(since: due, now: due.addingTimeInterval(7200), retryAfter: nil, jitter: 1) == 300)
        #expect(DispatchRules.outageWait(since: due, now: due, retryAfter: 120, jitter: 0) == 120)
    }
}

@Suite struct ProviderHealthTests {
    let now = at("2026-03-09T16:00:00Z")

    /// `answers` accepted, `outages` from as many devices (or from `outageDevices` of them),
    /// `unknown` tokens of distinct devices named from `firstUnknown` on.
    private func answers(
        _ answers: Int, outages: Int = 0, outageDevices: Int? = nil, unknown: Int = 0, firstUnknown: Int = 0,
        trial: Bool = false
    ) -> ProviderHealth.Delta {
        var delta = ProviderHealth.Delta()
        delta.answers = answers + unknown
        delta.outages = outages
        delta.outageDevices = Set((0..<min(outages, outageDevices ?? outages)).map { ProviderHealth.digest("device \($0)") })
        delta.accepted = answers
        delta.unknownTokens = unknown
        delta.unknownDevices = Set((firstUnknown..<firstUnknown + unknown).map { ProviderHealth.digest("stale \($0)") })
        if outages > 0 { delta.lastOutage = "APNs 503 ServiceUnavailable" }
        if trial {
            delta.trialAnswers = answers + unknown
            delta.trialOutages = outages
            delta.trialAccepted = answers
        }
        return delta
    }

    @Test func mostlyUnansweredRequestsMakeAProviderDownAndAnAnsweredProbeBringsItBack() {
        let healthy = ProviderHealth().applying(answers(40, outages: 2), now: now, config: "c")
        #expect(healthy.state == .up)
        let down = healthy.applying(answers(0, outages: 200), now: now.addingTimeInterval(1), config: "c")
        #expect(down.state == .down)
        #expect(down.reason?.contains("got no answer (last: APNs 503 ServiceUnavailable)") == true)
        #expect(down.probeAt == now.addingTimeInterval(1 + ProviderHealth.downProbeInterval))
        #expect(!down.allowsSending(config: "c"))
        #expect(down.probeDue(at: now.addingTimeInterval(31)))
        let stillDown = down.applying(answers(0, outages: 3, trial: true), now: now.addingTimeInterval(40), config: "c")
        #expect(stillDown.state == .down)
        let back = stillDown.applying(answers(3, trial: true), now: now.addingTimeInterval(80), config: "c")
        #expect(back.state == .up)
        #expect(back.allowsSending(config: "c"))
        // Two failures among few answers are the notifications' own trouble, not an outage.
        #expect(ProviderHealth().applying(answers(1, outages: 2), now: now, config: "c").state == .up)
    }

    /// A wrong environment at three pushes a minute: each cron minute adds its answers to the
    /// shared window, no token is believed unknown meanwhile, and once twenty distinct devices
    /// were called unknown (the seventh minute) it is paused.
    @Test func aWrongEnvironmentAtATrickleIsFoundAcrossRuns() {
        var health = ProviderHealth()
        for minute in 0..<6 {
            health = health.applying(
                answers(0, unknown: 3, firstUnknown: 3 * minute), now: now.addingTimeInterval(60 * Double(minute)),
                config: "sandbox")
            #expect(health.state == .up)
            #expect(!health.confirmsTokens(config: "sandbox"))
        }
        health = health.applying(answers(0, unknown: 3, firstUnknown: 18), now: now.addingTimeInterval(360), config: "sandbox")
        #expect(health.state == .paused)
        #expect(health.burst)
        #expect(health.reason?.hasPrefix("it called the tokens of 21 distinct devices unknown in 21 answers") == true)
        #expect(!health.allowsSending(config: "sandbox"))
        // The fix (production) is tried at once; a token it takes brings the provider back.
        #expect(health.allowsSending(config: "production"))
        let fixed = health.applying(answers(1, trial: true), now: now.addingTimeInterval(420), config: "production")
        #expect(fixed.state == .up)
        // An unknown token again is no proof: the pause holds.
        #expect(health.applying(answers(0, unknown: 1, trial: true), now: now.addingTimeInterval(420), config: "sandbox").state == .paused)
    }

    /// At 23:30, 3 pushes taken and the same 6 stale tokens called unknown run after run: they
    /// count once each and never pause the provider; once 5 tokens were taken under this
    /// configuration they are believed (and deactivated), hours later too, however quiet.
    @Test func aQuietHoursFewStaleTokensNeverPauseTheProvider() {
        var health = ProviderHealth().applying(answers(3, unknown: 6), now: now, config: "c")
        for minute in 1...20 {
            health = health.applying(answers(0, unknown: 6), now: now.addingTimeInterval(60 * Double(minute)), config: "c")
            #expect(health.state == .up)
        }
        #expect(health.tokens.unknown == 6)
        #expect(health.tokens.answers == 9)
        #expect(!health.confirmsTokens(config: "c"))
        health = health.applying(answers(1), now: now.addingTimeInterval(50 * 60), config: "c")
        health = health.applying(answers(1), now: now.addingTimeInterval(110 * 60), config: "c")
        #expect(health.confirmsTokens(config: "c"))
        // Another configuration (a new APNS_ENVIRONMENT) has confirmed nothing yet.
        #expect(!health.confirmsTokens(config: "other"))
        #expect(health.applying(answers(0, unknown: 1), now: now.addingTimeInterval(300 * 60), config: "c").confirmsTokens(config: "c"))
    }

    /// One token that FCM answers with a 5xx every time is that token's trouble: however often it
    /// is tried, the provider stays up; outages from three devices make it down.
    @Test func oneDeviceThatAlwaysDrawsA5xxNeverMakesAProviderDown() {
        var health = ProviderHealth()
        for second in 0..<10 {
            health = health.applying(answers(0, outages: 2, outageDevices: 1), now: now.addingTimeInterval(Double(second)), config: "c")
        }
        #expect(health.state == .up)
        health = health.applying(answers(0, outages: 3), now: now.addingTimeInterval(11), config: "c")
        #expect(health.state == .down)
    }

    /// A probe whose rows are answered brings the provider back even when one of them (the
    /// poisoned token) drew a 5xx again.
    @Test func aProbeWithAnyRequestAnsweredBringsTheProviderBack() {
        let down = ProviderHealth().applying(answers(0, outages: 10), now: now, config: "c")
        #expect(down.state == .down)
        #expect(down.applying(answers(0, outages: 3, trial: true), now: now.addingTimeInterval(31), config: "c").state == .down)
        let back = down.applying(answers(2, outages: 1, trial: true), now: now.addingTimeInterval(62), config: "c")
        #expect(back.state == .up)
    }

    /// A harmless probe's answer brings up a provider that is down, never one paused meanwhile (it
    /// asks nothing of the configuration); a probe refused for the configuration pauses it.
    @Test func aHarmlessProbeBringsUpOnlyAProviderThatIsDown() {
        let down = ProviderHealth().applying(answers(0, outages: 10), now: now, config: "c")
        var probe = ProviderHealth.Delta()
        probe.probeAnswers = 1
        #expect(down.applying(probe, now: now.addingTimeInterval(31), config: "c").state == .up)
        var refusal = ProviderHealth.Delta()
        refusal.configuration = "FCM 403 PERMISSION_DENIED"
        let paused = down.applying(refusal, now: now.addingTimeInterval(31), config: "c")
        #expect(paused.state == .paused)
        #expect(paused.applying(probe, now: now.addingTimeInterval(62), config: "c").state == .paused)
    }

    /// What a probe's HTTP answer says: any answer but a 5xx or a 408 is an answer; a refusal of
    /// the key, the account or the project pauses; Resend's refusal of a read to a key allowed
    /// only to send is an answer.
    @Test func aProbesAnswerIsReadAsTheProvidersOwn() {
        for status in [200, 400, 401, 404, 429] { #expect(ProbeAnswer("X", status: status) == .answered("X answered \(status)")) }
        for status in [408, 500, 502, 503] { #expect(ProbeAnswer("X", status: status) == .unavailable("X answered \(status)")) }
        let restricted = Data(#"{"statusCode":401,"name":"restricted_api_key","message":"This API key is restricted to only send emails"}"#.utf8)
        #expect(ResendClient.probeReading(status: 401, body: restricted) == .answered("Resend answered 401 restricted_api_key"))
        let invalid = Data(#"{"statusCode":403,"name":"invalid_api_key","message":"API key is invalid"}"#.utf8)
        #expect(ResendClient.probeReading(status: 403, body: invalid) == .refused("Resend 403 invalid_api_key"))
        #expect(ResendClient.probeReading(status: 503, body: Data()) == nil)
        #expect(TwilioClient.probeReading(status: 401, body: Data())?.description.hasPrefix("Twilio 401") == true)
        #expect(TwilioClient.probeReading(status: 200, body: Data()) == nil)
        let denied = Data(#"{"error":{"code":403,"message":"Permission denied","status":"PERMISSION_DENIED"}}"#.utf8)
        if case .refused? = FCMClient.probeReading(status: 403, body: denied) {} else { Issue.record("FCM 403 is not a refusal") }
        let unavailable = Data(#"{"error":{"code":503,"message":"Unavailable","status":"UNAVAILABLE"}}"#.utf8)
        #expect(FCMClient.probeReading(status: 503, body: unavailable) == nil)
        #expect(FCMClient.probeReading(status: 200, body: Data(#"{"name":"projects/p/messages/fake_message_id"}"#.utf8)) == nil)
    }

    /// While the provider answers other requests, a 5xx for one row is about that row: an
    /// attempt, so a poisoned token ends after its attempts instead of waiting all day; while it
    /// does not, the row waits without spending one.
    @Test func anOutageWhileTheProviderAnswersOthersSpendsAnAttempt() {
        let health = ChannelHealth(configured: [.fcm: .ready], identities: [.fcm: "f"], clock: FixedClock(now))
        let answer = SendResult.unavailable("FCM 500 INTERNAL", after: nil)
        #expect(health.interpret(answer, from: .fcm) == answer)
        for device in 0..<6 { health.record(.delivered(providerID: "m\(device)"), from: .fcm, device: "pixel \(device)") }
        health.record(answer, from: .fcm, device: "poisoned")
        guard case .retry(let why, nil) = health.interpret(answer, from: .fcm) else {
            Issue.record("a 5xx for one token while FCM answers others spent no attempt")
            return
        }
        #expect(why == "FCM 500 INTERNAL, while FCM answered other requests")
    }

    /// A provider over its quota (FCM's 429 for the whole project) is not asked for what it
    /// said, measured on the run's wait clock: held a second before, asked again at the end.
    @Test func aQuotasPauseIsMeasuredOnTheRunsWaitClock() {
        let waits = ManualWaitClock()
        let health = ChannelHealth(configured: [.fcm: .ready], identities: [.fcm: "f"], clock: FixedClock(now), waitClock: waits)
        health.record(.throttled("FCM QUOTA_EXCEEDED", after: 75), from: .fcm, device: "pixel")
        #expect(health.hold(.fcm)?.after == 75)
        waits.advance(by: .seconds(74))
        #expect(health.hold(.fcm)?.after == 1)
        #expect(health.hold(.fcm)?.reason == "FCM is over its quota: FCM QUOTA_EXCEEDED")
        waits.advance(by: .seconds(1))
        #expect(health.hold(.fcm) == nil)
    }

    @Test func aTokenIsBelievedUnknownOnlyOnceTheProviderTookOthers() {
        var health = ProviderHealth().applying(answers(4, unknown: 1), now: now, config: "c")
        #expect(!health.confirmsTokens(config: "c"))
        health = health.applying(answers(2), now: now.addingTimeInterval(5), config: "c")
        #expect(health.confirmsTokens(config: "c"))
    }

    @Test func theDispatcherReadsAnswersThroughTheProvidersState() {
        let health = ChannelHealth(
            configured: [.apns: .ready, .fcm: .ready], identities: [.apns: "c", .fcm: "f"],
            clock: FixedClock(now))
        for device in 0..<5 { health.record(.unavailable("APNs 503 ServiceUnavailable", after: nil), from: .apns, device: "\(device)") }
        guard case .notSent(let why, nil) = health.interpret(.unavailable("APNs 503 ServiceUnavailable", after: nil), from: .apns) else {
            Issue.record("an outage spent an attempt")
            return
        }
        #expect(why.hasPrefix("APNs is down since 2026-03-09T16:00:00Z"))
        #expect(health.hold(.apns) != nil)
        #expect(health.states()[.apns] == .down(health.hold(.apns)!.reason))
        #expect(health.hold(.fcm) == nil)
        // A lone unknown token from FCM, which has confirmed nothing yet: kept, the row waits.
        guard
            case .notSent(_, DispatchRules.providerWait?) = health.interpret(
                .invalidToken("FCM 400 INVALID_ARGUMENT", unknownToProvider: true),
                from: .fcm)
        else {
            Issue.record("deactivated a token before FCM confirmed its configuration")
            return
        }
        #expect(
            health.interpret(.invalidToken("FCM 404 UNREGISTERED", unknownToProvider: false), from: .fcm)
                == .invalidToken("FCM 404 UNREGISTERED", unknownToProvider: false))
        #expect(health.problems.isEmpty)
        #expect(health.outages.count == 1)
    }
}

@Suite struct ProviderSlotsTests {
    /// No more requests at once than the slots; a request cancelled while it waits never runs.
    @Test func slotsHoldTheirLimitAndACancelledWaitSendsNothing() async {
        let slots = ProviderSlots(limit: 2)
        final class Counts: Sendable { let state = Mutex((now: 0, most: 0, ran: 0)) }
        let box = Counts()
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<10 {
                group.addTask {
                    _ = await slots.run {
                        box.state.withLock {
                            $0.now += 1
                            $0.most = max($0.most, $0.now)
                            $0.ran += 1
                        }
                        try? await Task.sleep(for: .milliseconds(20))
                        box.state.withLock { $0.now -= 1 }
                    }
                }
            }
        }
        #expect(box.state.withLock { $0.most } == 2)
        #expect(box.state.withLock { $0.ran } == 10)
        let held = ProviderSlots(limit: 1)
        let holder = Task { await held.run { try? await Task.sleep(for: .seconds(30)) } }
        try? await Task.sleep(for: .milliseconds(50))
        let waiter = Task { await held.run { true } }
        try? await Task.sleep(for: .milliseconds(50))
        waiter.cancel()
        #expect(await waiter.value == nil)
        holder.cancel()
        _ = await holder.value
        #expect(await held.run { true } == true)
    }
}
