import Foundation
import Testing

@testable import NudgeCore

private func at(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }

private let iphone = Device(tokenID: UUID(), token: String(repeating: "ab", count: 32), platform: "ios")
private let pixel = Device(tokenID: UUID(), token: "pixel-token:APA91b", platform: "android")
private let ready: [DeliveryProvider: ProviderState] = [.apns: .ready, .fcm: .ready]
private let utc = try! LocalCalendar(identifier: "UTC")

private func row(
    _ id: Int64, _ type: String, due: String, title: String = "t", body: String = "b", payload: String = "{}",
    attempts: Int = 1, deliveredTo: Set<String> = [], deliveryID: Int64? = nil, sentAt: Date? = nil
) -> QueuedNotification {
    QueuedNotification(
        id: id, type: type, localDay: LocalDate(iso8601: String(due.prefix(10)))!, deliverAfter: at(due),
        title: title, body: body, payload: payload, attempts: attempts, deliveredTo: deliveredTo,
        deliveryID: deliveryID, sentAt: sentAt)
}

private func plan(
    _ rows: [QueuedNotification], preferences: DeliveryPreferences = .standard, devices: [Device] = [iphone, pixel],
    past: [PastDelivery] = [], providers: [DeliveryProvider: ProviderState] = ready, locale: String = "en",
    now: String = "2026-03-10T12:00:00Z", actions: UserActions = .none
) -> DispatchRules.Plan {
    DispatchRules.plan(
        rows: rows, facts: .init(preferences: preferences, devices: devices, past: past, actions: actions),
        providers: providers, locale: locale, calendar: utc, now: at(now))
}

@Suite struct DispatchRulesTests {
    @Test func theMasterSwitchHoldsEveryTypeAndATypesSwitchOnlyOptionalOnes() {
        var off = DeliveryPreferences()
        off.pushEnabled = false
        #expect(
            plan([row(1, "daily_checkin", due: "2026-03-10T12:00:00Z")], preferences: off).outcomes[1]
                == .suppressed(step: "preferences", reason: "push notifications are off (notification_preferences.push_enabled)"))
        var picky = DeliveryPreferences()
        picky.pushSwitchedOff = ["push_leaderboard_change", "push_challenge_milestone"]
        let result = plan(
            [
                row(1, "leaderboard_change", due: "2026-03-10T12:00:00Z"),
                row(2, "challenge_milestone", due: "2026-03-10T12:00:00Z"),
            ], preferences: picky)
        #expect(
            result.outcomes[1]
                == .suppressed(
                    step: "preferences",
                    reason: "leaderboard_change pushes are off (notification_preferences.push_leaderboard_change)"))
        #expect(result.outcomes[2] == .deliver(0))
    }

    @Test func quietHoursDeferOptionalTypesAndLetCriticalOnesThrough() {
        let result = plan(
            [row(1, "streak_at_risk", due: "2026-03-10T23:00:00Z"), row(2, "daily_checkin", due: "2026-03-10T23:00:00Z")],
            now: "2026-03-10T23:00:30Z")
        #expect(result.outcomes[1] == .deferred(until: at("2026-03-11T08:00:00Z"), reason: "quiet hours 22:00–08:00"))
        #expect(result.outcomes[2] == .deliver(0))
    }

    @Test func oneGroupsNotificationsWithinFiveMinutesGoOutAsOneDeliveryCountedOnce() {
        let result = plan([
            row(1, "leaderboard_change", due: "2026-03-10T11:57:00Z", title: "📈 #5", body: "You moved up to #5"),
            row(2, "leaderboard_change", due: "2026-03-10T11:59:00Z", title: "📈 #3", body: "You moved up to #3"),
            row(3, "leaderboard_change", due: "2026-03-10T12:01:30Z", title: "📈 #2", body: "You moved up to #2"),
            row(4, "streak_at_risk", due: "2026-03-10T11:58:00Z"),
            row(5, "social_engagement", due: "2026-03-10T12:04:00Z"),
        ])
        #expect(result.deliveries.count == 2)
        let board = result.deliveries.first { $0.content.group == "leaderboard_change" }!
        #expect(board.rows == [1, 2, 3])
        #expect(board.id == 1)
        #expect(board.collapseID == "nudge-1")
        #expect(board.content.title == "📈 #2")
        #expect(board.content.body == "You moved up to #2\n(+2 more)")
        #expect(board.content.data["grouped"] == "3")
        #expect(result.outcomes[5] == .released)   // due later, and no delivery of its group now
        // One delivery against "3 a day, 1 an hour": the next one in the hour is refused.
        let later = plan(
            [row(6, "leaderboard_change", due: "2026-03-10T12:30:00Z")],
            past: [PastDelivery(type: "leaderboard_change", sentAt: at("2026-03-10T12:00:00Z"))], now: "2026-03-10T12:30:00Z")
        #expect(later.outcomes[6] == .suppressed(step: "caps", reason: "leaderboard_change cap: 1 already sent (at most 1 an hour)"))
    }

    @Test func theDailyTotalSuppressesTheFourthWithItsReason() {
        let past = ["social_engagement", "proactive_push", "leaderboard_change"].enumerated().map {
            PastDelivery(type: $0.element, sentAt: at("2026-03-10T0\($0.offset + 7):00:00Z"))
        }
        let result = plan(
            [row(1, "streak_at_risk", due: "2026-03-10T12:00:00Z"), row(2, "daily_checkin", due: "2026-03-10T12:00:00Z")],
            past: past)
        #expect(
            result.outcomes[1]
                == .suppressed(
                    step: "caps",
                    reason: "daily cap: 3 notifications already sent for 2026-03-10 (at most 3 a day)"))
        #expect(result.outcomes[2] == .deliver(0))
    }

    /// Sunday 2026-03-15: three leaderboard moves and a call preview went out before 20:00; the
    /// week's digest still goes (it counts towards the day, it is not held by it).
    @Test func theWeeksDigestIsNotLostToTheDaysOtherTraffic() {
        let past = ["leaderboard_change", "leaderboard_change", "leaderboard_change", "preview_push"].enumerated().map {
            PastDelivery(type: $0.element, sentAt: at("2026-03-15T1\($0.offset + 2):00:00Z"), localDay: LocalDate(iso8601: "2026-03-15"))
        }
        let result = plan(
            [row(1, "weekly_digest", due: "2026-03-15T20:00:00Z"), row(2, "streak_at_risk", due: "2026-03-15T20:00:00Z")],
            past: past, now: "2026-03-15T20:01:00Z")
        #expect(result.outcomes[1] == .deliver(0))
        #expect(
            result.outcomes[2]
                == .suppressed(
                    step: "caps",
                    reason: "daily cap: 5 notifications already sent for 2026-03-15 (at most 3 a day)"))
    }

    /// The weekly cap counts the week a digest tells: last week's, delivered late on Monday,
    /// does not hold this Sunday's; a second one for the same week is held.
    @Test func theWeeklyCapCountsTheDigestsOwnWeek() {
        let late = PastDelivery(type: "weekly_digest", sentAt: at("2026-03-16T08:00:00Z"), localDay: LocalDate(iso8601: "2026-03-15"))
        #expect(
            plan([row(1, "weekly_digest", due: "2026-03-22T20:00:00Z")], past: [late], now: "2026-03-22T20:01:00Z")
                .outcomes[1] == .deliver(0))
        let again = QueuedNotification(
            id: 2, type: "weekly_digest", localDay: LocalDate(iso8601: "2026-03-15")!,
            deliverAfter: at("2026-03-16T09:00:00Z"), title: "t", body: "b", payload: "{}", attempts: 1,
            deliveredTo: [], deliveryID: nil, sentAt: nil)
        #expect(
            plan([again], past: [late], now: "2026-03-16T09:00:00Z").outcomes[2]
                == .suppressed(step: "caps", reason: "weekly_digest cap: 1 already sent (at most 1 a week)"))
    }

    @Test func aRetryGoesToTheDevicesThatLackItUnderItsOwnCollapseIDWithoutCountingAgain() {
        let past = (0..<3).map { PastDelivery(type: "social_engagement", sentAt: at("2026-03-10T0\($0 + 6):00:00Z")) }
        let result = plan(
            [
                row(
                    7, "streak_at_risk", due: "2026-03-10T12:00:00Z", attempts: 2, deliveredTo: [iphone.key], deliveryID: 5,
                    sentAt: at("2026-03-10T11:59:00Z"))
            ],
            past: past)
        #expect(result.outcomes[7] == .deliver(0))
        #expect(result.deliveries[0].targets == [pixel])
        #expect(result.deliveries[0].collapseID == "nudge-5")
        // A retry that reached no device yet was never counted: the caps hold it like a new one.
        let unsent = plan([row(8, "streak_at_risk", due: "2026-03-10T12:00:00Z", attempts: 2, deliveryID: 8)], past: past)
        guard case .suppressed(step: "caps", _)? = unsent.outcomes[8] else {
            Issue.record("not held by the cap")
            return
        }
    }

    @Test func aRowOneDeviceHasEndsSentWhenTheOtherDevicesProviderIsGone() {
        let apnsMissing: [DeliveryProvider: ProviderState] = [.apns: .unavailable("APNs is not configured"), .fcm: .ready]
        let retry = row(
            1, "streak_at_risk", due: "2026-03-10T12:00:00Z", attempts: 2, deliveredTo: [pixel.key], deliveryID: 1,
            sentAt: at("2026-03-10T11:59:00Z"))
        let planned = plan([retry], providers: apnsMissing)
        #expect(planned.outcomes[1] == .deliver(0))
        #expect(planned.deliveries[0].targets.isEmpty)
        let settled = DispatchRules.settle(retry, delivery: planned.deliveries[0], results: [:], now: at("2026-03-10T12:00:00Z"), jitter: 0)
        #expect(settled.status == .sent)
    }

    /// A user with an iPhone and an Android phone while APNs is down (for every dispatcher): the
    /// Android phone gets the notification, and it waits, parked for APNs, for the iPhone; once
    /// APNs is back the iPhone gets it and it is sent. Had APNs not come back before its shelf
    /// life ended, it would stand sent, with why, the iPhone never getting a stale push.
    @Test func aNotificationWaitsForEveryDeviceWhileTheirProviderIsDown() {
        let apnsDown: [DeliveryProvider: ProviderState] = [.apns: .down("APNs is down"), .fcm: .ready]
        let first = row(1, "streak_at_risk", due: "2026-03-10T12:00:00Z")
        let planned = plan([first], providers: apnsDown)
        #expect(planned.deliveries[0].targets == [pixel] && planned.deliveries[0].waitsForReturn)
        let waiting = DispatchRules.settle(
            first, delivery: planned.deliveries[0],
            results: [pixel.key: .delivered(providerID: "projects/x/messages/1")],
            now: at("2026-03-10T12:00:00Z"), jitter: 0)
        #expect(waiting.status == .pending && waiting.deliveredTo == [pixel.key] && waiting.parkedFor == .apns)
        #expect(waiting.sentAt == at("2026-03-10T12:00:00Z"))

        // Still down at its next look: it keeps waiting; no device is asked twice.
        let again = row(
            1, "streak_at_risk", due: "2026-03-10T12:00:00Z", attempts: 2, deliveredTo: [pixel.key], deliveryID: 1,
            sentAt: at("2026-03-10T12:00:00Z"))
        #expect(
            plan([again], providers: apnsDown, now: "2026-03-10T12:10:00Z").outcomes[1]
                == .waiting(until: at("2026-03-11T12:00:00Z"), reason: "APNs is down", parkedFor: .apns))
        // Back: the iPhone alone gets it, and it is sent.
        let back = plan([again], now: "2026-03-10T12:10:00Z")
        #expect(back.deliveries[0].targets == [iphone])
        let sent = DispatchRules.settle(
            again, delivery: back.deliveries[0], results: [iphone.key: .delivered(providerID: "a")],
            now: at("2026-03-10T12:10:00Z"), jitter: 0)
        #expect(sent.status == .sent && sent.deliveredTo == [pixel.key, iphone.key])
        // Past its shelf life with APNs still down: it stands sent (the Android phone has it).
        guard case .reached(let why)? = plan([again], providers: apnsDown, now: "2026-03-11T12:00:00Z").outcomes[1] else {
            Issue.record("not reached")
            return
        }
        #expect(why.hasPrefix("1 of its devices had it;"))
        // Found down mid-batch (the iPhone's send held as APNs went down): it waits too.
        let midBatch = DispatchRules.settle(
            first, delivery: plan([first]).deliveries[0],
            results: [pixel.key: .delivered(providerID: "b"), iphone.key: .notSent("APNs is down", after: nil)],
            now: at("2026-03-10T12:00:00Z"), jitter: 0)
        #expect(midBatch.status == .pending && midBatch.parkedFor == .apns)

        // While it waits, the user checks in: it ends there, standing sent; the iPhone never
        // says "check in" after the check-in.
        let checkIn = row(
            1, "daily_checkin", due: "2026-03-10T12:00:00Z", attempts: 2, deliveredTo: [pixel.key], deliveryID: 1,
            sentAt: at("2026-03-10T12:00:00Z"))
        let checkedIn = UserActions(checkIns: [LocalDate(iso8601: "2026-03-10")!: at("2026-03-10T12:05:00Z")])
        guard case .reached(let answered)? = plan([checkIn], now: "2026-03-10T13:00:00Z", actions: checkedIn).outcomes[1] else {
            Issue.record("not reached after the check-in")
            return
        }
        #expect(answered.hasPrefix("1 of its devices had it; answered: the user checked in"))
        // APNs back during the user's quiet hours: the iPhone does not get it in the morning.
        guard case .reached(let late)? = plan([again], now: "2026-03-10T22:30:00Z").outcomes[1] else {
            Issue.record("not reached in quiet hours")
            return
        }
        #expect(late.hasPrefix("1 of its devices had it; the others' would come late:"))
        // A call's preview does not wait for the iPhone: late, it is worth nothing.
        let preview = plan([row(1, "preview_push", due: "2026-03-10T12:00:00Z")], providers: apnsDown)
        #expect(!preview.deliveries[0].waitsForReturn)
        let previewSent = DispatchRules.settle(
            row(1, "preview_push", due: "2026-03-10T12:00:00Z"), delivery: preview.deliveries[0],
            results: [pixel.key: .delivered(providerID: "c")], now: at("2026-03-10T12:00:00Z"), jitter: 0)
        #expect(previewSent.status == .sent)
        // One device's 5xx from a provider that is not down is not waited for once another has it.
        let oneFiveHundred = DispatchRules.settle(
            first, delivery: plan([first]).deliveries[0],
            results: [
                pixel.key: .delivered(providerID: "d"),
                iphone.key: .unavailable("APNs 500 InternalServerError", after: nil),
            ],
            now: at("2026-03-10T12:00:00Z"), jitter: 0)
        #expect(oneFiveHundred.status == .sent)
    }

    @Test func aProviderHeldByItsQuotaMakesItsNotificationsWaitThatLong() {
        let held: [DeliveryProvider: ProviderState] = [.apns: .ready, .fcm: .held("FCM is over its quota", for: 75)]
        let result = plan([row(1, "preview_push", due: "2026-03-10T12:00:00Z")], devices: [pixel], providers: held)
        #expect(result.outcomes[1] == .waiting(until: at("2026-03-10T12:01:15Z"), reason: "FCM is over its quota"))
    }

    @Test func aDeliveryStampedInTheFutureDoesNotHoldTheHourlyCap() {
        let future = [PastDelivery(type: "leaderboard_change", sentAt: at("2026-03-10T12:30:00Z"))]
        #expect(
            FrequencyCaps.refusal(
                for: .of("leaderboard_change"), challenge: nil, at: at("2026-03-10T12:00:00Z"),
                calendar: utc, past: future) == nil)
    }

    @Test func aCallPreviewTooLateToMatterIsNotSent() {
        let result = plan([row(1, "preview_push", due: "2026-03-10T11:45:00Z"), row(2, "preview_push", due: "2026-03-10T11:58:00Z")])
        guard case .suppressed(step: "expired", _)? = result.outcomes[1] else {
            Issue.record("sent late")
            return
        }
        #expect(result.outcomes[2] == .deliver(0))
    }

    @Test func aDeliveryReachingOneDeviceIsSentThoughAnotherProviderIsMissing() {
        let apnsMissing: [DeliveryProvider: ProviderState] = [.apns: .unavailable("APNs is not configured"), .fcm: .ready]
        let planned = plan([row(1, "streak_at_risk", due: "2026-03-10T12:00:00Z")], providers: apnsMissing)
        let settled = DispatchRules.settle(
            row(1, "streak_at_risk", due: "2026-03-10T12:00:00Z"), delivery: planned.deliveries[0],
            results: [pixel.key: .delivered(providerID: "projects/x/messages/1")],
            now: at("2026-03-10T12:00:00Z"), jitter: 0)
        #expect(settled.status == .sent)
        #expect(settled.deliveredTo == [pixel.key])
    }

    @Test func withoutADeviceItIsSuppressedAndWithoutAProviderItWaits() {
        #expect(
            plan([row(1, "streak_at_risk", due: "2026-03-10T12:00:00Z")], devices: []).outcomes[1]
                == .suppressed(step: "devices", reason: "no active device (user_push_tokens, users.fcm_token)"))
        let apnsMissing: [DeliveryProvider: ProviderState] = [.apns: .unavailable("APNs is not configured (…)"), .fcm: .ready]
        let onlyIPhone = plan([row(1, "streak_at_risk", due: "2026-03-10T12:00:00Z")], devices: [iphone], providers: apnsMissing)
        // Parked for APNs until its shelf life ends (a day, by default), unless APNs is configured sooner.
        #expect(onlyIPhone.outcomes[1] == .waiting(until: at("2026-03-11T12:00:00Z"), reason: "APNs is not configured (…)", parkedFor: .apns))
        let both = plan([row(1, "streak_at_risk", due: "2026-03-10T12:00:00Z")], providers: apnsMissing)
        #expect(both.deliveries[0].targets == [pixel])
        #expect(both.deliveries[0].waiting == [iphone])
    }

    @Test func aPayloadOverFourKilobytesAndARowThatKeptKillingItsDispatcherFail() {
        let huge = #"{"note":"\#(String(repeating: "x", count: 5000))"}"#
        let result = plan([
            row(1, "streak_at_risk", due: "2026-03-10T12:00:00Z", payload: huge),
            row(2, "social_engagement", due: "2026-03-10T12:00:00Z", attempts: 5),
            row(3, "social_engagement", due: "2026-03-10T12:00:00Z", payload: "[1, 2]"),
        ])
        guard case .failed(let reason)? = result.outcomes[1] else {
            Issue.record("not failed")
            return
        }
        #expect(reason.contains("over APNs' limit of 4096"))
        #expect(result.outcomes[2] == .failed("gave up: its last 4 attempts ended without a result (the dispatcher stopped while sending)"))
        #expect(result.outcomes[3] == .failed("its payload is not a JSON object"))
    }

    @Test func frenchGroupsSayHowManyMoreInFrench() {
        let result = plan(
            [
                row(1, "social_engagement", due: "2026-03-10T12:00:00Z", body: "Bravo"),
                row(2, "social_engagement", due: "2026-03-10T12:00:00Z", body: "Super"),
                row(3, "social_engagement", due: "2026-03-10T12:00:00Z", body: "Génial"),
            ], locale: "fr")
        #expect(result.deliveries[0].content.body == "Génial\n(+2 autres)")
    }
}

@Suite struct SettlementTests {
    let delivery = DispatchRules.plan(
        rows: [row(1, "streak_at_risk", due: "2026-03-10T12:00:00Z")],
        facts: .init(devices: [iphone, pixel]), providers: ready, locale: "en", calendar: utc,
        now: at("2026-03-10T12:00:00Z")
    ).deliveries[0]
    let now = at("2026-03-10T12:00:00Z")

    @Test func deliveredEverywhereIsSent() {
        let settled = DispatchRules.settle(
            row(1, "streak_at_risk", due: "2026-03-10T12:00:00Z"), delivery: delivery,
            results: [iphone.key: .delivered(providerID: "a"), pixel.key: .delivered(providerID: "b")],
            now: now, jitter: 0)
        #expect(settled.status == .sent)
        #expect(settled.deliveredTo == [iphone.key, pixel.key])
        #expect(settled.sentAt == now)
    }

    @Test func aRetryableFailureBacksOffAndKeepsWhatWasDelivered() {
        let settled = DispatchRules.settle(
            row(1, "streak_at_risk", due: "2026-03-10T12:00:00Z"), delivery: delivery,
            results: [iphone.key: .delivered(providerID: "a"), pixel.key: .retry("FCM 503 UNAVAILABLE", after: 90)],
            now: now, jitter: 0)
        #expect(settled.status == .pending)
        #expect(settled.nextAttemptAt == now.addingTimeInterval(90))   // retry-after beats the 15-30 s backoff
        #expect(settled.deliveredTo == [iphone.key])
        #expect(settled.sentAt == now)
        #expect(settled.countsAsAttempt)
    }

    @Test func theFourthFailedAttemptEndsIt() {
        let settled = DispatchRules.settle(
            row(1, "streak_at_risk", due: "2026-03-10T12:00:00Z", attempts: 4), delivery: delivery,
            results: [
                iphone.key: .unavailable("APNs 500 InternalServerError", after: nil),
                pixel.key: .invalidToken("FCM 404 UNREGISTERED", unknownToProvider: false),
            ],
            now: now, jitter: 0.5)
        #expect(settled.status == .failed)
        #expect(settled.lastError != nil)
    }

    /// Parked for its one provider until its shelf life ends, unless the provider is back first
    /// and wakes it; waiting for two, it looks again every minute (either may come back first).
    @Test func aConfigurationErrorParksTheRowWithoutSpendingAnAttempt() {
        let iPhoneOnly = DispatchRules.plan(
            rows: [row(1, "streak_at_risk", due: "2026-03-10T12:00:00Z")], facts: .init(devices: [iphone]),
            providers: ready, locale: "en", calendar: utc, now: at("2026-03-10T12:00:00Z")
        ).deliveries[0]
        let one = DispatchRules.settle(
            row(1, "streak_at_risk", due: "2026-03-10T12:00:00Z"), delivery: iPhoneOnly,
            results: [iphone.key: .configuration("APNs 403 InvalidProviderToken")], now: now, jitter: 0)
        #expect(one.status == .pending && !one.countsAsAttempt)
        #expect(one.nextAttemptAt == iPhoneOnly.expiresAt)
        #expect(one.parkedFor == .apns)
        let two = DispatchRules.settle(
            row(1, "streak_at_risk", due: "2026-03-10T12:00:00Z"), delivery: delivery,
            results: [
                iphone.key: .configuration("APNs 403 InvalidProviderToken"),
                pixel.key: .notSent("FCM is paused", after: nil),
            ],
            now: now, jitter: 0)
        #expect(two.status == .pending && !two.countsAsAttempt)
        #expect(two.nextAttemptAt == now.addingTimeInterval(DispatchRules.providersWait))
        #expect(two.parkedFor == nil)
    }

    /// Three retries with exponential backoff (docs/jobs/dispatch.md, "Retries and waits"): 30 s,
    /// 2 min, 8 min, each between half and all.
    @Test(arguments: [(1, 0.0, 15.0), (1, 1.0, 30.0), (2, 0.0, 60.0), (2, 1.0, 120.0), (3, 1.0, 480.0)])
    func backoffQuadruplesWithJitter(_ attempts: Int, _ jitter: Double, _ delay: Double) {
        #expect(DispatchRules.retryDelay(afterAttempt: attempts, retryAfter: nil, jitter: jitter) == delay)
    }
}

@Suite struct PushPayloadTests {
    let content = DispatchRules.plan(
        rows: [
            row(
                1, "streak_at_risk", due: "2026-03-10T12:00:00Z", title: "🔥 Streak", body: "Check in",
                payload: #"{"deep_link":"fitcircle://checkin","streak":12,"bonus":true,"meta":{"a":1}}"#)
        ],
        facts: .init(devices: [iphone]), providers: ready, locale: "en", calendar: utc, now: at("2026-03-10T12:00:00Z")
    ).deliveries[0].content

    /// A call's preview breaks through a Focus (APNs `interruption-level: time-sensitive`); a
    /// streak reminder does not ask to.
    @Test func aPreviewIsTimeSensitiveAndAReminderIsNot() throws {
        let preview = row(2, "preview_push", due: "2026-03-10T12:00:00Z", title: "Coach Max is calling in 5 min!", body: "Answer!")
        let previewContent = PushContent(lead: preview, newest: preview, count: 1, kind: preview.kind, locale: "en")
        for (content, level) in [(previewContent, "time-sensitive" as String?), (content, nil)] {
            let object = try #require(JSONSerialization.jsonObject(with: content.apnsPayload()) as? [String: Any])
            let aps = try #require(object["aps"] as? [String: Any])
            #expect(aps["interruption-level"] as? String == level)
        }
    }

    @Test func apnsCarriesTheAlertInApsAndTheDeepLinkInData() throws {
        let object = try #require(JSONSerialization.jsonObject(with: content.apnsPayload()) as? [String: Any])
        let aps = try #require(object["aps"] as? [String: Any])
        #expect((aps["alert"] as? [String: String]) == ["title": "🔥 Streak", "body": "Check in"])
        #expect(aps["sound"] as? String == "default")
        #expect(aps["thread-id"] as? String == "streak")
        let data = try #require(object["data"] as? [String: String])
        #expect(data["deep_link"] == "fitcircle://checkin")
        #expect(data["type"] == "streak_at_risk")
        #expect(data["streak"] == "12")
        #expect(data["bonus"] == "true")
        #expect(data["meta"] == #"{"a":1}"#)
        #expect(data["notification_id"] == "1")
    }

    @Test func fcmTakesStringsOnlyWithAnAndroidBlock() throws {
        let body = content.fcmRequest(token: "tok", collapseKey: "nudge-1", timeToLive: 3600)
        let object = try #require(JSONSerialization.jsonObject(with: body) as? [String: Any])
        let message = try #require(object["message"] as? [String: Any])
        #expect(message["token"] as? String == "tok")
        #expect((message["notification"] as? [String: String]) == ["title": "🔥 Streak", "body": "Check in"])
        #expect((message["data"] as? [String: Any])?.values.allSatisfy { $0 is String } == true)
        let android = try #require(message["android"] as? [String: Any])
        #expect(android["priority"] as? String == "high")
        #expect(android["collapse_key"] as? String == "nudge-1")
        #expect(android["ttl"] as? String == "3600s")
        #expect((android["notification"] as? [String: String])?["tag"] == "streak")
    }
}

/// A notification whose reason is gone when its turn comes is not sent (docs/jobs/dispatch.md).
@Suite struct ReasonGoneTests {
    let day = LocalDate(iso8601: "2026-03-10")!

    /// A reminder decided at 20:00 and held (an outage, a retry): the check-in at 20:05 ends it.
    @Test func aCheckInBeforeTheSendEndsEveryNotificationThatAsksForIt() {
        let done = UserActions(checkIns: [day: at("2026-03-10T07:30:00Z")])
        let rows = [
            row(1, "daily_checkin", due: "2026-03-10T09:00:00Z"), row(2, "streak_at_risk", due: "2026-03-10T09:00:00Z"),
            row(3, "streak_freeze_used", due: "2026-03-10T09:00:00Z"), row(4, "weekly_goal_progress", due: "2026-03-10T09:00:00Z"),
        ]
        let result = plan(rows, actions: done)
        for id: Int64 in [1, 2, 3] {
            #expect(
                result.outcomes[id]
                    == .suppressed(
                        step: "answered",
                        reason: "the user checked in for 2026-03-10 at 2026-03-10T07:30:00Z, which it asks for"))
        }
        #expect(result.outcomes[4] == .deliver(0))
        // A check-in recorded without its instant counts too; yesterday's does not.
        #expect(
            plan([rows[0]], actions: UserActions(checkIns: [day: nil])).outcomes[1]
                == .suppressed(step: "answered", reason: "the user checked in for 2026-03-10, which it asks for"))
        #expect(plan([rows[0]], actions: UserActions(checkIns: [day.adding(days: -1): nil])).outcomes[1] == .deliver(0))
    }

    @Test func aSubmissionEndsTheSubmissionReminderOfItsDay() {
        let submitted = UserActions(submissions: [day: at("2026-03-10T11:58:00Z")])
        let result = plan(
            [row(1, "data_submission", due: "2026-03-10T12:00:00Z"), row(2, "daily_checkin", due: "2026-03-10T12:00:00Z")],
            actions: submitted)
        #expect(
            result.outcomes[1]
                == .suppressed(
                    step: "answered",
                    reason:
                        "the user submitted their data for 2026-03-10 at 2026-03-10T11:58:00Z, which it asks for"))
        #expect(result.outcomes[2] == .deliver(0))
    }

    /// The streak-at-risk email too: the rule holds whatever the channel.
    @Test func theRuleHoldsForEmailsToo() {
        let email = QueuedNotification(
            id: 7, type: "streak_at_risk", channel: .email, localDay: day, deliverAfter: at("2026-03-10T09:00:00Z"),
            title: "⚠️", body: "b", payload: #"{"email_type":"streak_at_risk","html":"<p>b</p>"}"#)
        let result = DispatchRules.plan(
            rows: [email],
            facts: .init(
                devices: [], address: "a@example.com",
                actions: UserActions(checkIns: [day: at("2026-03-10T08:00:00Z")])),
            providers: [.resend: .ready], locale: "en", calendar: utc, now: at("2026-03-10T09:00:00Z"))
        #expect(
            result.outcomes[7]
                == .suppressed(
                    step: "answered",
                    reason: "the user checked in for 2026-03-10 at 2026-03-10T08:00:00Z, which it asks for"))
    }

    /// A delivery a device already has is not taken back, and its other devices never say "check
    /// in" after the check-in: it stands sent, with why.
    @Test func aDeliveryThatReachedADeviceIsNotTakenBack() {
        let retry = row(
            1, "daily_checkin", due: "2026-03-10T12:00:00Z", deliveredTo: [iphone.key], deliveryID: 1,
            sentAt: at("2026-03-10T11:59:00Z"))
        #expect(
            plan([retry], actions: UserActions(checkIns: [day: at("2026-03-10T11:59:30Z")])).outcomes[1]
                == .reached("1 of its devices had it; answered: the user checked in for 2026-03-10 at 2026-03-10T11:59:30Z, which it asks for"))
    }

    /// The check-in reminder at a time Nudge learned is held by quiet hours (not by the weekend
    /// pause); at a time the user chose, or the default, it passes them.
    @Test func quietHoursHoldALearnedReminderTimeOnly() {
        var preferences = DeliveryPreferences()
        preferences.quietHours = QuietHours(start: LocalTime("22:00")!, end: LocalTime("08:00")!, pauseWeekends: true)
        let learned = row(1, "daily_checkin", due: "2026-03-10T06:25:00Z", payload: #"{"reminder_time":"learned"}"#)
        let chosen = row(2, "daily_checkin", due: "2026-03-10T06:25:00Z", payload: #"{"reminder_time":"chosen"}"#)
        let early = plan([learned, chosen], preferences: preferences, now: "2026-03-10T06:25:00Z")
        #expect(early.outcomes[1] == .deferred(until: at("2026-03-10T08:00:00Z"), reason: "quiet hours 22:00–08:00"))
        #expect(early.outcomes[2] == .deliver(0))
        // A Saturday at 09:00 under the weekend pause: the learned one goes (it is still required).
        let saturday = row(3, "daily_checkin", due: "2026-03-14T09:00:00Z", payload: #"{"reminder_time":"learned"}"#)
        #expect(plan([saturday], preferences: preferences, now: "2026-03-14T09:00:00Z").outcomes[3] == .deliver(0))
        // Held past the end of its day (a learned 21:30 that an outage kept until 22:10): not sent.
        let late = row(4, "daily_checkin", due: "2026-03-10T21:30:00Z", payload: #"{"reminder_time":"learned"}"#)
        let held = DispatchRules.plan(
            rows: [late], facts: .init(preferences: preferences, devices: [iphone]), providers: ready,
            locale: "en", calendar: utc, now: at("2026-03-10T22:10:00Z"),
            shelfLife: ShelfLife(rules: ["daily_checkin": .endOfLocalDay]))
        guard case .suppressed(step: "expired", _)? = held.outcomes[4] else {
            Issue.record("a learned reminder held past its day was not ended")
            return
        }
    }
}
