import Foundation
import NIOHTTP1
import Testing

@testable import NudgeCore

@Suite struct SMSSegmentTests {
    /// The published limits (3GPP TS 23.038, Twilio's "what is the SMS character limit"): GSM-7
    /// 160 in one part, 153 per part; UCS-2 70, 67 per part.
    @Test func theCounterAgreesWithThePublishedLimits() {
        func segments(_ text: String) -> Int { SMSText(text).segments }
        let a = { (n: Int) in String(repeating: "a", count: n) }
        #expect(SMSText(a(160)).encoding == .gsm7)
        #expect(segments(a(160)) == 1)
        #expect(segments(a(161)) == 2)
        #expect(segments(a(306)) == 2)
        #expect(segments(a(307)) == 3)
        #expect(segments(a(459)) == 3)
        // One character outside GSM-7 makes the whole message UCS-2.
        let accented = { (n: Int) in "ê" + String(repeating: "a", count: n - 1) }
        #expect(SMSText(accented(70)).encoding == .ucs2)
        #expect(segments(accented(70)) == 1)
        #expect(segments(accented(71)) == 2)
        #expect(segments(accented(134)) == 2)
        #expect(segments(accented(135)) == 3)
        // An emoji is two UTF-16 code units.
        #expect(SMSText("💪").units == 2)
        #expect(segments(String(repeating: "💪", count: 35)) == 1)
        #expect(segments(String(repeating: "💪", count: 36)) == 2)
        #expect(segments("💪" + a(68)) == 1)
        #expect(segments("💪" + a(69)) == 2)
        // The extension table's characters count twice.
        for character in ["^", "{", "}", "\\", "[", "~", "]", "|", "€"] {
            #expect(SMSText(character).units == 2, "\(character)")
            #expect(SMSText(character).encoding == .gsm7, "\(character)")
        }
        #expect(segments(String(repeating: "€", count: 80)) == 1)
        #expect(segments(String(repeating: "€", count: 81)) == 2)
        #expect(segments(a(159) + "€") == 2)
        // The basic table's accented letters are one septet each.
        #expect(SMSText("éèùìòÇØøÅåÄÖÑÜäöñüàß¿¡§£¥").encoding == .gsm7)
        #expect(SMSText("éèùìòÇØøÅåÄÖÑÜäöñüàß¿¡§£¥").units == 25)
    }

    /// An SMS with an emoji and an em dash is UCS-2, so these two take two segments each (85 and
    /// 71 UTF-16 code units, against 70). That is why the SMS Nudge sends is the GSM-7 variant
    /// (docs/jobs/preview-notifications.md, "The SMS is one segment, always").
    @Test func theSeedsOwnExamplesWouldBeTwoSegments() {
        let english = SMSText("Coach Max is calling you in 5 min! 💪 Day 12 — fitness check-in. Make sure to answer!")
        #expect(english.encoding == .ucs2)
        #expect(english.segments == 2)
        let french = SMSText("Coach Max t'appelle dans 5 min ! 💪 Jour 12 — point fitness. Décroche !")
        #expect(french.encoding == .ucs2)
        #expect(french.units == 71)
        #expect(french.segments == 2)
    }

    @Test func plainTextKeepsWhatGSMHasAndRewritesTheRest() {
        #expect(SMSText.plain("fête du streak ! — « ça »") == "fete du streak ! - \" ca \"")
        #expect(SMSText.plain("pesée & bilan d’hier…") == "pesée & bilan d'hier...")
        #expect(SMSText.plain("Coach Иван 💪") == "Coach Иван 💪")
    }
}

@Suite struct PhoneNumberTests {
    @Test func e164IsAcceptedAndAnythingElseRefused() {
        #expect(PhoneNumber("+15550123456")?.e164 == "+15550123456")
        #expect(PhoneNumber(" +33 6 12 34 56 78 ")?.e164 == "+33612345678")
        #expect(PhoneNumber("+1 (555) 012-3456")?.e164 == "+15550123456")
        for bad in [
            "5550123456", "+0123456789", "+1234567", "+1234567890123456", "+1555abc4567", "", "+", "++15550123456",
            "+1555012345 6x",
        ] {
            #expect(PhoneNumber(bad) == nil, "\(bad)")
        }
    }

    @Test func aNumberIsNeverShownWhole() {
        let number = PhoneNumber("+15550123456")!
        #expect(number.masked == "+1••••••••56")
        #expect(!number.description.contains("0123456"))
        let scrubbed = PhoneNumber.scrub("Invalid 'To' Phone Number: +15550123456, or 33 6 12 34 56 78. Code 21211.")
        #expect(!scrubbed.contains("0123456"))
        #expect(!scrubbed.contains("12 34 56"))
        #expect(scrubbed.contains("21211"))
    }
}

@Suite struct PreviewPathTests {
    let phone = PhoneNumber("+15550123456")

    @Test func theSeedsPathSelection() throws {
        typealias Reach = PreviewPath.Reach
        #expect(try PreviewPath.select(Reach(preference: "push_only", push: true, phone: phone)).get() == .push)
        #expect(try PreviewPath.select(Reach(preference: "push_only", push: false, phone: phone)).get() == .sms)
        #expect(try PreviewPath.select(Reach(preference: "sms_only", push: true, phone: phone)).get() == .sms)
        #expect(try PreviewPath.select(Reach(preference: "push_and_sms", push: true, phone: phone)).get() == .pushThenSMS)
        // "never miss" without a phone is the push; without push, the SMS.
        #expect(try PreviewPath.select(Reach(preference: "push_and_sms", push: true, phone: nil)).get() == .push)
        #expect(try PreviewPath.select(Reach(preference: "push_and_sms", push: false, phone: phone)).get() == .sms)
        // No channel at all, or SMS only without a phone: none, with a warning
        // (docs/jobs/preview-notifications.md).
        guard case .failure(let none) = PreviewPath.select(Reach(preference: "push_only", push: false, phone: nil)) else {
            Issue.record("expected no channel")
            return
        }
        #expect(none.description.contains("no notification channel"))
        guard case .failure(let smsOnly) = PreviewPath.select(Reach(preference: "sms_only", push: true, phone: nil, phoneUnusable: true))
        else {
            Issue.record("expected no channel")
            return
        }
        #expect(smsOnly.description.contains("SMS only"))
        #expect(smsOnly.description.contains("E.164"))
    }
}

@Suite struct PreviewCopyTests {
    @Test func thePushSaysWhoWhenWhichDayAndWhat() {
        #expect(PreviewCopy.pushTitle(coach: "Coach Max", minutes: 5, streak: 12, locale: "en") == "Coach Max is calling in 5 min! 🔥")
        #expect(PreviewCopy.pushTitle(coach: "Mama Rosa", minutes: 5, streak: 3, locale: "fr") == "Mama Rosa t'appelle dans 5 min ! 💪")
        #expect(PreviewCopy.pushTitle(coach: nil, minutes: 10, streak: 0, locale: "en") == "Your coach is calling in 10 min! 🌱")
        #expect(PreviewCopy.pushBody(streak: 14, topicKey: "weekly_weighin", locale: "en") == "Day 14: weekly weigh-in & meal review.")
        #expect(
            PreviewCopy.pushBody(streak: 14, topicKey: "weekly_weighin", locale: "fr")
                == "Jour 14 : pesée & bilan repas de la semaine.")
        // Days 7 and 21 celebrate and still say the topic (docs/jobs/preview-notifications.md);
        // day 21 is no "final" check-in: streaks and calls go on.
        #expect(
            PreviewCopy.pushBody(streak: 7, topicKey: "mood_check", locale: "en")
                == "Day 7 — one full week! Let's celebrate. Today: mood & energy check.")
        #expect(
            PreviewCopy.pushBody(streak: 7, topicKey: "mood_check", locale: "fr")
                == "Jour 7 — une semaine complète ! On fête ça. Aujourd'hui : point humeur & énergie.")
        #expect(
            PreviewCopy.pushBody(streak: 21, topicKey: "Knee rehab: week 3", locale: "en")
                == "DAY 21! Three weeks, you made it. 🏆 Today: Knee rehab: week 3.")
        #expect(
            PreviewCopy.pushBody(streak: 21, topicKey: nil, locale: "fr")
                == "JOUR 21 ! Trois semaines, tu l'as fait. 🏆 Aujourd'hui : le point du jour.")
        #expect(!PreviewCopy.pushBody(streak: 21, topicKey: nil, locale: "en").contains("Final"))
        #expect(PreviewCopy.pushBody(streak: 0, topicKey: "streak_celebrate", locale: "en") == "Today: streak celebration!")
        // A free-text topic is shown as the app wrote it; none, or a key this table does not
        // know, reads as a neutral phrase; an unknown locale as English.
        #expect(PreviewCopy.pushBody(streak: 3, topicKey: "knee_rehab", locale: "fr") == "Jour 3 : le point du jour.")
        #expect(PreviewCopy.pushBody(streak: 3, topicKey: "Rééducation du genou", locale: "fr") == "Jour 3 : Rééducation du genou.")
        #expect(
            PreviewCopy.pushBody(streak: 3, topicKey: "Talk about\nthe marathon?", locale: "en")
                == "Day 3: Talk about the marathon?")
        #expect(PreviewCopy.pushBody(streak: 3, topicKey: "  ", locale: "fr") == "Jour 3 : le point du jour.")
        #expect(PreviewCopy.pushBody(streak: 3, topicKey: "mood_check", locale: "de") == "Day 3: mood & energy check.")
    }

    /// The day of the streak a call falls on: 6 days in a row through Saturday make Sunday day 7,
    /// whether validate-streaks has settled Saturday (08:00) or not yet (00:05).
    @Test func theStreakDayIsTodaysNumber() {
        let sunday = LocalDate(iso8601: "2026-03-15")!
        let week = Set((1...6).map { sunday.adding(days: -$0) })
        let settledSaturday = StreakState(
            currentStreak: 6, longestStreak: 6, lastCheckinDate: sunday.adding(days: -1),
            freezeUsedThisWeek: false, weekStartDate: sunday.monday, missedDays: 0)
        #expect(
            StreakRules.dayNumber(
                today: sunday, stored: settledSaturday, settledThrough: sunday.adding(days: -1),
                checkIns: week) == 7)
        let settledFriday = StreakState(
            currentStreak: 5, longestStreak: 5, lastCheckinDate: sunday.adding(days: -2),
            freezeUsedThisWeek: false, weekStartDate: sunday.monday, missedDays: 0)
        #expect(
            StreakRules.dayNumber(
                today: sunday, stored: settledFriday, settledThrough: sunday.adding(days: -2),
                checkIns: week) == 7)
        // Checked in today already: still day 7.
        #expect(
            StreakRules.dayNumber(
                today: sunday, stored: settledSaturday, settledThrough: sunday.adding(days: -1),
                checkIns: week.union([sunday])) == 7)
        // The app's own row, never settled: through yesterday, unless it counted today already.
        #expect(StreakRules.dayNumber(today: sunday, stored: settledSaturday, settledThrough: nil, checkIns: []) == 7)
        var countedToday = settledSaturday
        countedToday.currentStreak = 7
        countedToday.lastCheckinDate = sunday
        #expect(StreakRules.dayNumber(today: sunday, stored: countedToday, settledThrough: nil, checkIns: []) == 7)
        // validate-streaks a month behind: the check-ins in a row read, not a month of misses.
        #expect(
            StreakRules.dayNumber(
                today: sunday, stored: settledFriday, settledThrough: sunday.adding(days: -30),
                checkIns: week) == 7)
        // Never settled: the check-ins in a row; none: no streak.
        #expect(StreakRules.dayNumber(today: sunday, stored: nil, settledThrough: nil, checkIns: week) == 7)
        #expect(StreakRules.dayNumber(today: sunday, stored: nil, settledThrough: nil, checkIns: []) == 0)
        // Two misses in a row (Friday, Saturday) with the week's freeze used reset it.
        var frozen = settledFriday
        frozen.freezeUsedThisWeek = true
        #expect(
            StreakRules.dayNumber(
                today: sunday, stored: frozen, settledThrough: sunday.adding(days: -3),
                checkIns: week.subtracting([sunday.adding(days: -1), sunday.adding(days: -2)])) == 0)
    }

    @Test func theEmojiRotatesByMilestone() {
        #expect(
            [0, 2, 3, 6, 7, 13, 14, 20, 21, 999].map { PreviewCopy.emoji(streak: $0) }
                == ["🌱", "🌱", "💪", "💪", "🔥", "🔥", "⭐", "⭐", "🏆", "🏆"])
    }

    @Test func theSMSIsTheGSMVariant() throws {
        let english = try #require(PreviewCopy.sms(coach: "Coach Max", minutes: 5, streak: 12, topicKey: "fitness_checkin", locale: "en"))
        #expect(english.text == "Coach Max is calling you in 5 min! Day 12 - your fitness goal check-in. Answer!")
        #expect(english.encoding == .gsm7)
        let french = try #require(PreviewCopy.sms(coach: "Mama Rosa", minutes: 5, streak: 12, topicKey: "streak_celebrate", locale: "fr"))
        #expect(french.text == "Mama Rosa t'appelle dans 5 min ! Jour 12 - fete du streak ! Décroche !")
        #expect(french.encoding == .gsm7)
    }

    /// Every SMS the job can write, over every topic (and an unknown one, and none), locale, coach
    /// name of the seed data (and none), streak up to 999 and lead up to 120 minutes: one segment,
    /// GSM-7, and the topic and streak always in it.
    @Test func everySMSTheJobCanWriteIsOneSegment() throws {
        let topics: [String?] = Array(PreviewCopy.topics.keys) + ["something_new", nil]
        let coaches: [String?] = ["Coach Max", "Dr. Luna", "Mama Rosa", nil]
        var checked = 0
        var longest = 0
        for locale in ["en", "fr", "es"] {
            for coach in coaches {
                for topic in topics {
                    for minutes in [1, 5, 9, 10, 99, 120] {
                        for streak in 0...999 {
                            let sms = try #require(
                                PreviewCopy.sms(
                                    coach: coach, minutes: minutes, streak: streak, topicKey: topic,
                                    locale: locale))
                            guard sms.segments == 1, sms.encoding == .gsm7,
                                sms.text.contains(SMSText.plain(PreviewCopy.topic(topic, locale: locale)))
                            else {
                                Issue.record("\(sms.text): \(sms.units) units, \(sms.encoding)")
                                return
                            }
                            longest = max(longest, sms.units)
                            checked += 1
                        }
                    }
                }
            }
        }
        #expect(checked == 3 * 4 * 8 * 6 * 1000)
        #expect(longest <= 160)
    }

    @Test func aNameTooLongForOneSegmentShortensThenGivesUp() throws {
        // Another script makes the SMS UCS-2: 70 units. The topic goes first, then the streak.
        let cyrillic = "Тренер Иван"
        let short = try #require(PreviewCopy.sms(coach: cyrillic, minutes: 5, streak: 12, topicKey: "weekly_weighin", locale: "en"))
        #expect(short.encoding == .ucs2)
        #expect(short.segments == 1)
        #expect(!short.text.contains("weigh-in"))
        #expect(PreviewCopy.sms(coach: String(repeating: "Иван ", count: 20), minutes: 5, streak: 12, topicKey: nil, locale: "en") == nil)
    }
}

@Suite struct PreviewDispatchRulesTests {
    let utc = try! LocalCalendar(identifier: "UTC")
    let call = UUID(uuidString: "0c2f9a54-6b1e-4d3a-9f07-5e8c1b2a7d40")!
    let callAt = ISO8601DateFormatter().date(from: "2026-03-29T07:00:00Z")!

    func row(
        _ id: Int64, type: String, channel: DeliveryChannel, due: Date, body: String = "Coach Max is calling you in 5 min! Answer!",
        extra: String = "", requestLeftAt: Date? = nil
    ) -> QueuedNotification {
        QueuedNotification(
            id: id, type: type, channel: channel, localDay: LocalDate(iso8601: "2026-03-29")!, deliverAfter: due,
            title: channel == .push ? "Coach Max is calling in 5 min! 🔥" : "", body: body,
            payload: #"{"call_id":"\#(call.uuidString.lowercased())","scheduled_at":"2026-03-29T07:00:00Z"\#(extra)}"#,
            requestLeftAt: requestLeftAt)
    }

    func plan(
        _ rows: [QueuedNotification], call status: String = "pending", at scheduledAt: Date? = nil, phone: String? = "+15550123456",
        push: DispatchRules.PushState? = nil, now: Date
    ) -> DispatchRules.Plan {
        let facts = DispatchRules.UserFacts(
            devices: [Device(tokenID: UUID(), token: "a1b2c3d4e5f6", platform: "ios")], phone: phone,
            calls: [call: DispatchRules.CallState(status: status, scheduledAt: scheduledAt ?? callAt)],
            pushes: push.map { ["the-push": $0] } ?? [:])
        return DispatchRules.plan(
            rows: rows, facts: facts, providers: [.apns: .ready, .twilio: .ready], locale: "en", calendar: utc,
            now: now)
    }

    var previewAt: Date { callAt.addingTimeInterval(-300) }

    @Test func aPreviewGoesOnlyWhileItsCallIsPendingAtItsTime() {
        let push = row(1, type: "preview_push", channel: .push, due: previewAt)
        #expect(plan([push], now: previewAt).outcomes[1] == .deliver(0))
        for (status, moved, now, words) in [
            ("cancelled", nil as Date?, previewAt, "cancelled"), ("completed", nil, previewAt, "completed"),
            ("pending", callAt.addingTimeInterval(1800), previewAt, "moved"),
            ("pending", nil, callAt.addingTimeInterval(5), "began"),
        ] {
            guard case .suppressed(let step, let reason)? = plan([push], call: status, at: moved, now: now).outcomes[1] else {
                Issue.record("\(status) \(words): not suppressed")
                continue
            }
            #expect(step == "call")
            #expect(reason.contains(words), "\(reason)")
        }
        // Quiet hours (22:00–08:00 by default) do not hold it: the call is at 07:00 UTC.
        #expect(plan([push], now: previewAt).outcomes[1] == .deliver(0))
    }

    /// An offline device keeps a preview at most until its call begins: planned on time, it is
    /// kept until the call; what APNs and FCM are told is what is left of that when the push
    /// leaves (five minutes on time; two when it waited for its turn until two minutes before
    /// the call; a second at the least), not what was left when it was planned.
    @Test func anOfflineDeviceKeepsAPreviewOnlyUntilItsCallBegins() throws {
        let push = row(1, type: "preview_push", channel: .push, due: previewAt)
        let planned = try #require(plan([push], now: previewAt).deliveries.first)
        #expect(planned.keepUntil == callAt)
        let device = Device(tokenID: nil, token: String(repeating: "ab", count: 32), platform: "ios")
        let request = PushRequest(delivery: planned, device: device, timeCritical: true)
        #expect(request.keepFor(at: previewAt) == 300)
        #expect(request.keepFor(at: callAt.addingTimeInterval(-120.4)) == 120)
        #expect(request.keepFor(at: callAt.addingTimeInterval(-0.2)) == 1)
        #expect(request.keepFor(at: callAt.addingTimeInterval(60)) == 1)
        // Another push is kept until its shelf life ends (a day after its time, by default).
        let other = QueuedNotification(
            id: 2, type: "streak_at_risk", channel: .push, localDay: LocalDate(iso8601: "2026-03-29")!,
            deliverAfter: previewAt, title: "Streak at risk", body: "Check in today", payload: "{}")
        let later = callAt.addingTimeInterval(5 * 3600)
        #expect(plan([other], now: later).deliveries.map(\.keepUntil) == [previewAt.addingTimeInterval(24 * 3600)])
        #expect(DispatchRules.keepFor(until: previewAt.addingTimeInterval(24 * 3600), at: later) == 24 * 3600 - 300 - 5 * 3600)
    }

    /// Twilio's `ValidityPeriod` is what is left of the SMS's shelf life when the request
    /// leaves: an SMS planned five minutes before its call that waited 100 seconds for a
    /// connection is kept 200 seconds, not 300; one without an end, Twilio's longest.
    @Test func anSMSsValidityPeriodIsCountedWhenItLeaves() async throws {
        let configuration = try #require(
            try TwilioConfiguration(
                environment: Environment([
                    "TWILIO_ACCOUNT_SID": "AC" + String(repeating: "0", count: 32), "TWILIO_AUTH_TOKEN": "t", "TWILIO_FROM": "+15550100000",
                ])))
        let client = try TwilioClient(configuration: configuration, http: ProviderHTTP(extraTrustedRoots: nil, timeout: .seconds(5)))
        let phone = try #require(PhoneNumber("+15551230001"))
        let sms = SMSRequest(to: phone, body: "Coach Max is calling you in 5 min!", outboxID: 1, validUntil: callAt)
        func validity(_ request: SMSRequest, at now: Date) -> String? {
            client.fields(for: request, at: now).first { $0.0 == "ValidityPeriod" }?.1
        }
        #expect(validity(sms, at: previewAt) == "300")
        #expect(validity(sms, at: previewAt.addingTimeInterval(100)) == "200")
        #expect(validity(sms, at: callAt.addingTimeInterval(30)) == "1")
        #expect(validity(SMSRequest(to: phone, body: "Hi", outboxID: 2), at: previewAt) == "36000")
        await client.shutdown()
    }

    /// Two calls' previews due within the grouping window go as two pushes, each its own.
    @Test func twoCallsPreviewsAreNeverOnePush() {
        let other = UUID(uuidString: "5d1e0b7a-2c4f-4e8a-9b6d-0a1b2c3d4e5f")!
        let first = row(1, type: "preview_push", channel: .push, due: previewAt)
        let second = QueuedNotification(
            id: 2, type: "preview_push", channel: .push, localDay: LocalDate(iso8601: "2026-03-29")!,
            deliverAfter: previewAt, title: "Dr. Luna is calling in 5 min! 🌱", body: "Today: goals.",
            payload: #"{"call_id":"\#(other.uuidString.lowercased())","scheduled_at":"2026-03-29T07:00:00Z"}"#)
        let facts = DispatchRules.UserFacts(
            devices: [Device(tokenID: UUID(), token: "a1b2c3d4e5f6", platform: "ios")], phone: nil,
            calls: [
                call: DispatchRules.CallState(status: "pending", scheduledAt: callAt),
                other: DispatchRules.CallState(status: "pending", scheduledAt: callAt),
            ])
        let planned = DispatchRules.plan(
            rows: [first, second], facts: facts, providers: [.apns: .ready], locale: "en", calendar: utc,
            now: previewAt)
        #expect(planned.deliveries.map(\.rows) == [[1], [2]])
    }

    /// A preview's key names its call and the call's time, not the user's local day: a user who
    /// changes time zone between two decisions of the same call time cannot get two.
    @Test func aPreviewsKeyIsItsCallAndTimeWhateverTheDay() {
        func message(_ day: String, _ occasion: OutboxMessage.Occasion) -> OutboxMessage {
            OutboxMessage(
                type: "preview_push", localDay: LocalDate(iso8601: day)!, deliverAfter: previewAt, title: "", body: "",
                payload: "{}", occasion: occasion)
        }
        let user = UUID(uuidString: "00000000-0000-4000-8000-000000000001")!
        #expect(
            message("2026-03-29", .alone("c:1")).dedupeKey(job: "preview-notifications", userID: user)
                == message("2026-03-28", .alone("c:1")).dedupeKey(job: "preview-notifications", userID: user))
        #expect(
            message("2026-03-29", .alone("c:1")).dedupeKey(job: "preview-notifications", userID: user)
                == "preview-notifications:00000000-0000-4000-8000-000000000001:preview_push:c:1")
        // An occasion within a day (leaderboard-refresh's hour) keeps the day.
        #expect(
            message("2026-03-29", .withinDay("h09")).dedupeKey(job: "j", userID: user)
                != message("2026-03-28", .withinDay("h09")).dedupeKey(job: "j", userID: user))
    }

    @Test func anSMSGoesToAnE164NumberInOneSegmentAndNeverTwice() {
        let sms = row(2, type: "preview_sms", channel: .sms, due: previewAt)
        let planned = plan([sms], now: previewAt)
        #expect(planned.outcomes[2] == .sms(0))
        #expect(planned.texts.first?.request.to.e164 == "+15550123456")
        guard case .suppressed(step: "phone", _)? = plan([sms], phone: "555-0123", now: previewAt).outcomes[2] else {
            Issue.record("a number that is not E.164 was not refused")
            return
        }
        guard case .suppressed(step: "phone", _)? = plan([sms], phone: nil, now: previewAt).outcomes[2] else {
            Issue.record("no number was not refused")
            return
        }
        let long = row(2, type: "preview_sms", channel: .sms, due: previewAt, body: String(repeating: "a", count: 161))
        guard case .failed(let why)? = plan([long], now: previewAt).outcomes[2] else {
            Issue.record("a two-segment SMS was not refused")
            return
        }
        #expect(why.contains("2 segments"))
        // Its request left without a clear answer: Twilio is asked about that request (nothing is
        // sent), before anything else, its attempts spent or not.
        let unknown = row(2, type: "preview_sms", channel: .sms, due: previewAt, requestLeftAt: previewAt)
        let asked = plan([unknown], now: previewAt.addingTimeInterval(60))
        #expect(asked.outcomes[2] == .sms(0))
        #expect(asked.texts.first?.leftAt == previewAt)
        #expect(asked.texts.first?.shownBy == previewAt.addingTimeInterval(TwilioClient.listShowsAfter))
        // Claimed ahead of its time with its mark set: put back as it is, mark and all.
        let early = row(2, type: "preview_sms", channel: .sms, due: previewAt.addingTimeInterval(60), requestLeftAt: previewAt)
        #expect(plan([early], now: previewAt).outcomes[2] == .released)
    }

    @Test func aFallbackGoesOnlyWhenItsPushDidNotReachTheUser() {
        let unconfirmed = row(
            3, type: "fallback_sms", channel: .sms, due: previewAt.addingTimeInterval(30),
            extra: #","fallback_for":"the-push","send_when":"unconfirmed""#)
        let whenFailed = row(
            4, type: "fallback_sms", channel: .sms, due: previewAt.addingTimeInterval(30),
            extra: #","fallback_for":"the-push","send_when":"push_failed""#)
        let now = previewAt.addingTimeInterval(30)
        let confirmed = DispatchRules.PushState(status: "sent", confirmedAt: previewAt.addingTimeInterval(2))
        let sent = DispatchRules.PushState(status: "sent", confirmedAt: nil)
        let failed = DispatchRules.PushState(status: "failed", confirmedAt: nil)
        let trying = DispatchRules.PushState(status: "pending", confirmedAt: nil)
        // Path C: no SMS once the device confirmed the push; the SMS when it did not, within 30 s.
        #expect(
            plan([unconfirmed], push: confirmed, now: now).outcomes[3]
                == .suppressed(
                    step: "fallback", reason: "the push was confirmed delivered at 2026-03-29T06:55:02Z"))
        #expect(plan([unconfirmed], push: sent, now: now).outcomes[3] == .sms(0))
        #expect(plan([unconfirmed], push: trying, now: now).outcomes[3] == .sms(0))
        // Path A: only when the push failed (an expired token); it waits while the push is tried.
        #expect(plan([whenFailed], push: failed, now: now).outcomes[4] == .sms(0))
        guard case .suppressed(step: "fallback", _)? = plan([whenFailed], push: sent, now: now).outcomes[4] else {
            Issue.record("a push that reached its provider still had its SMS")
            return
        }
        #expect(
            plan([whenFailed], push: trying, now: now).outcomes[4]
                == .waiting(until: now.addingTimeInterval(DispatchRules.fallbackPoll), reason: "waiting for the push's outcome"))
        // A push still held 30 s after the fallback's time has not reached the user: the SMS goes.
        #expect(plan([whenFailed], push: trying, now: now.addingTimeInterval(30)).outcomes[4] == .sms(0))
        // A push refused for its call: its fallback waits for it to be queued again, on either path.
        let refused = DispatchRules.PushState(status: "suppressed", confirmedAt: nil, refusedForCall: true)
        for fallback in [unconfirmed, whenFailed] {
            guard case .waiting? = plan([fallback], push: refused, now: now.addingTimeInterval(60)).outcomes[fallback.id] else {
                Issue.record("a fallback went in place of a push refused for its call")
                continue
            }
        }
    }

    @Test func anSMSIsSettledWithoutEverRepeatingAnUnknownOutcome() {
        let sms = row(2, type: "preview_sms", channel: .sms, due: previewAt)
        #expect(
            DispatchRules.settleSMS(sms, result: .delivered(providerID: "SM1"), now: previewAt, expiresAt: previewAt.addingTimeInterval(600), jitter: 0).status
                == .sent)
        let unknown = DispatchRules.settleSMS(
            sms, result: .rejected(TwilioClient.unknownOutcome("no answer")), now: previewAt, expiresAt: previewAt.addingTimeInterval(600), jitter: 0)
        #expect(unknown.status == .failed)
        // Never left: tried again within seconds, since the call is minutes away.
        let retry = DispatchRules.settleSMS(
            sms, result: .unavailable("refused", after: nil), now: previewAt, expiresAt: previewAt.addingTimeInterval(600), jitter: 1)
        #expect(retry.status == .pending)
        #expect(retry.nextAttemptAt == previewAt.addingTimeInterval(DispatchRules.timeCriticalRetry))
        #expect(!retry.countsAsAttempt)
        let throttled = DispatchRules.settleSMS(
            sms, result: .throttled("20429", after: 2), now: previewAt, expiresAt: previewAt.addingTimeInterval(600), jitter: 0)
        #expect(throttled.status == .pending)
        #expect(!throttled.countsAsAttempt)
    }
}

@Suite struct TwilioWireTests {
    @Test func answersMapToOutcomes() {
        let headers = HTTPHeaders()
        #expect(
            TwilioClient.classify(status: 201, headers: headers, body: Data(#"{"sid":"SMabc","status":"queued"}"#.utf8))
                == .delivered(providerID: "SMabc"))
        guard
            case .throttled = TwilioClient.classify(
                status: 429, headers: headers,
                body: Data(#"{"code":20429,"message":"Too Many Requests","status":429}"#.utf8))
        else {
            Issue.record("20429 is not a wait")
            return
        }
        guard
            case .configuration = TwilioClient.classify(
                status: 401, headers: headers,
                body: Data(#"{"code":20003,"message":"Authenticate"}"#.utf8))
        else {
            Issue.record("401 is not configuration")
            return
        }
        guard
            case .rejected(let invalid) = TwilioClient.classify(
                status: 400, headers: headers, body: Data(#"{"code":21211,"message":"Invalid 'To' Phone Number: +15550123456"}"#.utf8))
        else {
            Issue.record("21211 is not a refusal")
            return
        }
        #expect(invalid.contains("21211"))
        #expect(!invalid.contains("0123456"))
        // A 500: Twilio's trouble, no attempt spent; whether it took the SMS is asked before it goes again.
        guard case .unavailable(let unclear, _) = TwilioClient.classify(status: 500, headers: headers, body: Data())
        else {
            Issue.record("a 500 spent an attempt or failed the SMS")
            return
        }
        #expect(unclear.contains("Twilio is asked before it goes again"))
    }

    @Test func theFormAndTheSignatureAreTwilios() throws {
        let fields = [("Body", "Coach Max t'appelle dans 5 min ! Décroche & +1"), ("To", "+15550123456")]
        let encoded = FormEncoding.encode(fields)
        #expect(encoded == "Body=Coach%20Max%20t%27appelle%20dans%205%20min%20%21%20D%C3%A9croche%20%26%20%2B1&To=%2B15550123456")
        let decoded = try #require(FormEncoding.decode(encoded))
        #expect(decoded.map(\.0) == fields.map(\.0))
        #expect(decoded.map(\.1) == fields.map(\.1))
        #expect(FormEncoding.decode("a=%ZZ") == nil)
        // Twilio's documented example (webhooks security): this URL, these fields, auth token 12345.
        let url = "https://mycompany.com/myapp.php?foo=1&bar=2"
        let example = [
            ("CallSid", "CA1234567890ABCDE"), ("Caller", "+12349013030"), ("Digits", "1234"), ("From", "+12349013030"),
            ("To", "+18005551212"),
        ]
        #expect(TwilioWebhook.signature(url: url, fields: example, authToken: "12345") == "0/KCTR6DLpKmkAf8muzZqo1nDgQ=")
        #expect(TwilioWebhook.isGenuine(signature: "0/KCTR6DLpKmkAf8muzZqo1nDgQ=", url: url, fields: example, authToken: "12345"))
        #expect(!TwilioWebhook.isGenuine(signature: "0/KCTR6DLpKmkAf8muzZqo1nDgQ=", url: url + "&x=1", fields: example, authToken: "12345"))
        #expect(!TwilioWebhook.isGenuine(signature: nil, url: url, fields: example, authToken: "12345"))
        #expect(!TwilioWebhook.isGenuine(signature: "junk", url: url, fields: example, authToken: "12345"))
    }

    @Test func theConfigurationNamesWhatIsWrong() throws {
        #expect(try TwilioConfiguration(environment: Environment([:])) == nil)
        let sid = "AC" + String(repeating: "0", count: 32)
        #expect(throws: NudgeError.self) { try TwilioConfiguration(environment: Environment(["TWILIO_ACCOUNT_SID": sid])) }
        #expect(throws: NudgeError.self) {
            try TwilioConfiguration(environment: Environment(["TWILIO_ACCOUNT_SID": sid, "TWILIO_AUTH_TOKEN": "t", "TWILIO_FROM": "5550100"]))
        }
        let configured = try #require(
            try TwilioConfiguration(
                environment: Environment([
                    "TWILIO_ACCOUNT_SID": sid, "TWILIO_AUTH_TOKEN": "t", "TWILIO_FROM": "+15005550006",
                    "NUDGE_PUBLIC_URL": "https://nudge.example.com/",
                ])))
        #expect(configured.statusCallback == "https://nudge.example.com/webhooks/twilio")
    }

    /// A number that replied STOP takes no SMS: previews go by push when they can, whatever the
    /// preference; dispatch suppresses an SMS to it; Twilio's 21610 and the replies are read as such.
    @Test func aNumberThatRepliedStopGetsNoSMS() throws {
        let phone = try #require(PhoneNumber("+15550100001"))
        for preference in ["sms_only", "push_and_sms", "push_only"] {
            #expect(PreviewPath.select(.init(preference: preference, push: true, phone: phone, smsOptedOut: true)) == .success(.push))
        }
        guard case .failure(let none) = PreviewPath.select(.init(preference: "push_only", push: false, phone: phone, smsOptedOut: true))
        else {
            Issue.record("a STOP number without push got a path")
            return
        }
        #expect(none.description.contains("replied STOP"))
        #expect(
            TwilioClient.isOptOut(
                TwilioClient.classify(
                    status: 400, headers: [:],
                    body: Data(
                        #"{"code":21610,"message":"Attempt to send to unsubscribed recipient","status":400}"#.utf8))))
        #expect(!TwilioClient.isOptOut(TwilioClient.classify(status: 400, headers: [:], body: Data(#"{"code":21211,"message":"x"}"#.utf8))))
        #expect(SMSStatus.optOut(["SmsStatus": "received", "Body": " stop. "]) == true)
        #expect(SMSStatus.optOut(["SmsStatus": "received", "Body": "Unstop"]) == false)
        // Twilio's current list: REVOKE and OPTOUT opt out too.
        #expect(SMSStatus.optOut(["SmsStatus": "received", "Body": "revoke"]) == true)
        #expect(SMSStatus.optOut(["SmsStatus": "received", "Body": "OptOut"]) == true)
        #expect(SMSStatus.optOut(["SmsStatus": "received", "Body": "stop calling me at 6"]) == nil)
        #expect(SMSStatus.optOut(["SmsStatus": "received", "Body": "x", "OptOutType": "STOP"]) == true)
        #expect(SMSStatus.optOut(["MessageStatus": "delivered", "Body": "STOP"]) == nil)
        let row = QueuedNotification(
            id: 1, type: "preview_sms", channel: .sms, localDay: LocalDate(year: 2026, month: 3, day: 29)!,
            deliverAfter: Date(timeIntervalSince1970: 1_774_764_900), title: "", body: "Coach Max is calling")
        let plan = DispatchRules.plan(
            rows: [row], facts: .init(devices: [], phone: "+15550100001", smsOptedOut: true),
            providers: [.twilio: .ready], locale: "en",
            calendar: try LocalCalendar(identifier: "UTC"),
            now: Date(timeIntervalSince1970: 1_774_764_930))
        guard case .suppressed(let step, let reason)? = plan.outcomes[1] else {
            Issue.record("\(plan.outcomes)")
            return
        }
        #expect(step == "preferences" && reason.contains("STOP"))
    }
}

/// Reading Twilio's message list for an SMS whose request left without a clear answer.
@Suite struct TwilioMessageListTests {
    let phone = PhoneNumber("+15551230001")!
    let leftAt = ISO8601DateFormatter().date(from: "2026-03-29T06:15:02Z")!

    func page(_ messages: [[String: String]]) -> Data {
        try! JSONSerialization.data(withJSONObject: ["messages": messages, "next_page_uri": NSNull()])
    }

    /// Found only with its number, its body, outbound, and created since it left (less the
    /// clocks' two minutes); an inbound reply, another body, an older message are not it.
    @Test func onlyItsOwnMessageSinceItLeftIsFound() {
        let sms = SMSRequest(to: phone, body: "Coach Max is calling you in 5 min!", outboxID: 7)
        let since = leftAt.addingTimeInterval(-120)
        func message(
            _ sid: String, body: String = "Coach Max is calling you in 5 min!", direction: String = "outbound-api",
            created: String = "Sun, 29 Mar 2026 06:15:03 +0000", to: String = "+15551230001"
        ) -> [String: String] {
            ["sid": sid, "to": to, "body": body, "direction": direction, "date_created": created]
        }
        #expect(TwilioClient.find(sms, since: since, in: page([message("SM1")])) == .sent("SM1"))
        #expect(
            TwilioClient.find(
                sms, since: since,
                in: page([
                    message("SM2", body: "Another"), message("SM3", direction: "inbound"), message("SM4", created: "Sun, 29 Mar 2026 06:12:00 +0000"),
                    message("SM5", to: "+15551230002"),
                ])) == .absent)
        // Two minutes early by Twilio's clock is still it.
        #expect(TwilioClient.find(sms, since: since, in: page([message("SM6", created: "Sun, 29 Mar 2026 06:13:30 +0000")])) == .sent("SM6"))
        guard case .unanswered = TwilioClient.find(sms, since: since, in: Data("<html>".utf8)) else {
            Issue.record("a page that is not JSON is no answer")
            return
        }
    }

    /// A 5xx or a 200 without a SID is an unclear answer (the list soon shows it); a time-out or
    /// a request that never left is not one.
    @Test func anUnclearAnswerIsToldFromNoAnswer() {
        let fiveHundred = TwilioClient.classify(status: 503, headers: [:], body: Data(#"{"code":20500,"message":"down"}"#.utf8))
        #expect(TwilioClient.answeredUnclearly(fiveHundred))
        #expect(TwilioClient.answeredUnclearly(TwilioClient.classify(status: 201, headers: [:], body: Data("{}".utf8))))
        #expect(!TwilioClient.answeredUnclearly(.unavailable("Twilio: no answer within the time-out" + TwilioClient.askedBeforeAgain, after: nil)))
        #expect(!TwilioClient.answeredUnclearly(.unavailable("Twilio: refused" + TwilioClient.neverLeftNote, after: nil)))
        guard case .unavailable = fiveHundred else {
            Issue.record("a 5xx spends no attempt: \(fiveHundred)")
            return
        }
    }
}
