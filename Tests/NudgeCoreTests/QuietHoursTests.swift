import Foundation
import Testing

@testable import NudgeCore

private func at(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }
private func time(_ text: String) -> LocalTime { LocalTime(text)! }
private func calendar(_ zone: String) -> LocalCalendar { try! LocalCalendar(identifier: zone) }

@Suite struct QuietHoursTests {
    @Test func aWindowOfEqualTimesIsNoWindow() {
        let hours = QuietHours(start: time("22:00"), end: time("22:00"), pauseWeekends: false)
        #expect(hours.release(at: at("2026-03-10T23:00:00Z"), calendar: calendar("UTC")) == nil)
    }

    @Test(arguments: [("21:59", false), ("22:00", true), ("03:00", true), ("07:59", true), ("08:00", false), ("12:00", false)])
    func theStandardWindowRunsOvernight(_ clock: String, _ quiet: Bool) {
        #expect(QuietHours.standard.isQuiet(time(clock)) == quiet)
    }

    @Test func aDaytimeWindowEndsTheSameDay() {
        let hours = QuietHours(start: time("13:00"), end: time("14:30"), pauseWeekends: false)
        #expect(hours.release(at: at("2026-03-10T13:15:00Z"), calendar: calendar("UTC"))?.until == at("2026-03-10T14:30:00Z"))
        #expect(hours.release(at: at("2026-03-10T14:30:00Z"), calendar: calendar("UTC")) == nil)
    }

    /// New York springs forward on 2026-03-08: the night before is 23 hours long.
    @Test func newYorksShortNightEndsAtEightEDT() {
        let release = QuietHours.standard.release(at: at("2026-03-08T04:00:00Z"), calendar: calendar("America/New_York"))
        #expect(release?.until == at("2026-03-08T12:00:00Z"))   // 08:00 EDT
        #expect(release?.reason == "quiet hours 22:00–08:00")
        // 21:59 EST the evening before is not quiet.
        #expect(QuietHours.standard.release(at: at("2026-03-08T02:59:00Z"), calendar: calendar("America/New_York")) == nil)
    }

    /// Paris springs forward on 2026-03-29; on 2026-10-25 it falls back (a 25-hour night).
    @Test(arguments: [
        ("2026-03-28T21:30:00Z", "2026-03-29T06:00:00Z"), ("2026-10-24T21:00:00Z", "2026-10-25T07:00:00Z"),
        ("2026-10-25T01:30:00Z", "2026-10-25T07:00:00Z"),
    ])
    func parisNightsAcrossBothChanges(_ due: String, _ end: String) {
        #expect(QuietHours.standard.release(at: at(due), calendar: calendar("Europe/Paris"))?.until == at(end))
    }

    /// Lord Howe moves its clocks by half an hour: on 2026-04-05 at 02:00 they go back to 01:30.
    @Test func lordHowesHalfHourChange() {
        let release = QuietHours.standard.release(at: at("2026-04-04T12:30:00Z"), calendar: calendar("Australia/Lord_Howe"))
        #expect(release?.until == at("2026-04-04T21:30:00Z"))   // 08:00 at +10:30
        let before = QuietHours.standard.release(at: at("2026-04-03T12:30:00Z"), calendar: calendar("Australia/Lord_Howe"))
        #expect(before?.until == at("2026-04-03T21:00:00Z"))   // 08:00 at +11
    }

    /// A window whose end the clocks skip ends when the clocks show the first time after it.
    @Test func anEndInTheSpringGapMovesForward() {
        let hours = QuietHours(start: time("22:00"), end: time("02:30"), pauseWeekends: false)
        let release = hours.release(at: at("2026-03-08T05:00:00Z"), calendar: calendar("America/New_York"))
        #expect(release?.until == at("2026-03-08T07:30:00Z"))   // 03:30 EDT
    }

    @Test func theWeekendPauseHoldsUntilMondayAfterTheNight() {
        let hours = QuietHours(start: time("22:00"), end: time("08:00"), pauseWeekends: true)
        // Saturday 10:00 in Paris (CET) → Monday 08:00.
        let release = hours.release(at: at("2026-03-14T09:00:00Z"), calendar: calendar("Europe/Paris"))
        #expect(release?.until == at("2026-03-16T07:00:00Z"))
        #expect(release?.reason == "weekend pause and quiet hours 22:00–08:00")
        // Friday 21:00 is a weekday evening outside the window.
        #expect(hours.release(at: at("2026-03-13T20:00:00Z"), calendar: calendar("Europe/Paris")) == nil)
    }

    /// The weekend is the user's own: Kiritimati's Saturday starts while it is still Friday in UTC.
    @Test func theWeekendIsLocal() {
        let hours = QuietHours(start: time("23:00"), end: time("06:00"), pauseWeekends: true)
        let release = hours.release(at: at("2026-03-13T12:00:00Z"), calendar: calendar("Pacific/Kiritimati"))   // Sat 02:00 +14
        #expect(release?.until == at("2026-03-15T16:00:00Z"))   // Mon 06:00 +14
    }
}

@Suite struct FrequencyCapsTests {
    let paris = calendar("Europe/Paris")

    @Test func theDailyTotalCountsTheLocalDayOnly() {
        let now = at("2026-03-10T10:00:00Z")   // 11:00 in Paris
        let kind = NotificationKind.of("streak_at_risk")
        let yesterdayLate = PastDelivery(type: "weekly_digest", sentAt: at("2026-03-09T22:30:00Z"))   // 23:30 on the 9th
        let today = (0..<2).map { PastDelivery(type: "social_engagement", sentAt: at("2026-03-10T0\($0 + 7):00:00Z")) }
        #expect(FrequencyCaps.refusal(for: kind, challenge: nil, at: now, calendar: paris, past: today + [yesterdayLate]) == nil)
        let third = PastDelivery(type: "proactive_push", sentAt: at("2026-03-10T09:00:00Z"))
        let refusal = FrequencyCaps.refusal(for: kind, challenge: nil, at: now, calendar: paris, past: today + [third])
        #expect(refusal?.hasPrefix("daily cap: 3 notifications already sent for 2026-03-10") == true)
    }

    /// A user who flew east since yesterday's 20:00 reminder (sent 19:00 UTC, 04:00 today in
    /// Tokyo): it counts on the day it was for, so today's required reminder is not "1 already
    /// sent", and three deliveries for yesterday hold nothing today.
    @Test func aMoveEastDoesNotCountYesterdaysSendsOnToday() {
        let tokyo = calendar("Asia/Tokyo")
        let yesterday = LocalDate(iso8601: "2026-03-09")!
        let today = LocalDate(iso8601: "2026-03-10")!
        let reminder = PastDelivery(type: "daily_checkin", sentAt: at("2026-03-09T19:00:00Z"), localDay: yesterday)
        let now = at("2026-03-10T11:00:00Z")   // 20:00 in Tokyo on the 10th
        #expect(
            FrequencyCaps.refusal(
                for: .of("daily_checkin"), challenge: nil, localDay: today, at: now, calendar: tokyo,
                past: [reminder]) == nil)
        let evening = (0..<3).map { PastDelivery(type: "social_engagement", sentAt: at("2026-03-09T2\($0):00:00Z"), localDay: yesterday) }
        #expect(
            FrequencyCaps.refusal(
                for: .of("data_submission"), challenge: nil, localDay: today, at: now, calendar: tokyo,
                past: evening) == nil)
        // The same deliveries for today do hold it.
        let sameDay = [PastDelivery(type: "daily_checkin", sentAt: at("2026-03-10T01:00:00Z"), localDay: today)]
        #expect(
            FrequencyCaps.refusal(
                for: .of("daily_checkin"), challenge: nil, localDay: today, at: now, calendar: tokyo,
                past: sameDay) == "daily_checkin cap: 1 already sent (at most 1 a day)")
    }

    @Test func criticalTypesAreNeverHeldByTheDailyTotal() {
        let past = (0..<3).map { PastDelivery(type: "social_engagement", sentAt: at("2026-03-10T0\($0 + 6):00:00Z")) }
        #expect(
            FrequencyCaps.refusal(
                for: .of("daily_checkin"), challenge: nil, at: at("2026-03-10T19:00:00Z"),
                calendar: paris, past: past) == nil)
        #expect(
            FrequencyCaps.refusal(
                for: .of("preview_push"), challenge: nil, at: at("2026-03-10T19:00:00Z"),
                calendar: paris, past: past) == nil)
    }

    @Test func leaderboardChangesAreThrottledToOneAnHourAndThreeADay() {
        let kind = NotificationKind.of("leaderboard_change")
        let one = [PastDelivery(type: "leaderboard_change", sentAt: at("2026-03-10T09:10:00Z"))]
        #expect(
            FrequencyCaps.refusal(for: kind, challenge: nil, at: at("2026-03-10T10:05:00Z"), calendar: paris, past: one)
                == "leaderboard_change cap: 1 already sent (at most 1 an hour)")
        #expect(FrequencyCaps.refusal(for: kind, challenge: nil, at: at("2026-03-10T10:10:00Z"), calendar: paris, past: one) == nil)
    }

    @Test func theWeeklyDigestOnceALocalWeekFromMonday() {
        let kind = NotificationKind.of("weekly_digest")
        let sunday = [PastDelivery(type: "weekly_digest", sentAt: at("2026-03-15T19:00:00Z"))]   // Sunday 20:00 in Paris
        #expect(FrequencyCaps.refusal(for: kind, challenge: nil, at: at("2026-03-15T21:00:00Z"), calendar: paris, past: sunday) != nil)
        // Monday 00:30 in Paris is a new week.
        #expect(FrequencyCaps.refusal(for: kind, challenge: nil, at: at("2026-03-15T23:30:00Z"), calendar: paris, past: sunday) == nil)
    }

    @Test func fourMilestonesPerChallenge() {
        let kind = NotificationKind.of("challenge_milestone")
        let past = (0..<4).map { PastDelivery(type: "challenge_milestone", sentAt: at("2026-02-0\($0 + 1)T10:00:00Z"), challenge: "c1") }
        #expect(FrequencyCaps.refusal(for: kind, challenge: "c1", at: at("2026-03-10T10:00:00Z"), calendar: paris, past: past) != nil)
        #expect(FrequencyCaps.refusal(for: kind, challenge: "c2", at: at("2026-03-10T10:00:00Z"), calendar: paris, past: past) == nil)
    }
}
