import Foundation
import Testing

@testable import NudgeCore

private func day(_ text: String) -> LocalDate { LocalDate(iso8601: text)! }
private func instant(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }

private let job = ValidateStreaksJob(definition: definition("validate-streaks"))

/// A user as the due index hands them over, due since 'epoch'.
private func user(_ zone: String?, signedUp: String = "2026-03-01T12:00:00Z", locale: String = "en") -> DueUser {
    DueUser(
        user: UserInTime(
            user: UserRow(id: UUID(), timezone: zone, locale: locale, createdAt: instant(signedUp)),
            calendar: try! LocalCalendar(identifier: zone)),
        dueAt: Date(timeIntervalSince1970: 0))
}

/// The decision's settlement, when it settled days.
private func settlement(_ decision: Decision<ValidateStreaksJob.Change>) -> ValidateStreaksJob.Settlement? {
    guard case .act(let change) = decision else { return nil }
    return change.change.settlement
}

private func checkIns(_ days: [String]) -> [LocalDate: TrackingDay] {
    Dictionary(uniqueKeysWithValues: days.map { (day($0), TrackingDay(date: day($0), mood: 3, energy: 3, steps: 6000, weight: nil)) })
}

private func settled(through date: String, _ state: StreakState = .fresh) -> ValidateStreaksJob.StoredStreak {
    .init(state: state, settledThrough: day(date))
}

@Suite struct ValidateStreaksDecisionTests {
    @Test func settlesTheDayThatEndedAtFiveMinutesPastMidnightLocal() throws {
        let paris = user("Europe/Paris")
        let facts = ValidateStreaksJob.Facts(streak: settled(through: "2026-03-12"), badges: [], tracking: checkIns(["2026-03-13"]))
        // 00:04 in Paris on the 14th: not yet.
        // 00:04 in Paris on the 14th: not yet, and the user is next due at 00:05.
        let early = try job.decide(for: paris, facts: facts, run: runContext("validate-streaks", now: "2026-03-13T23:04:00Z"))
        guard case .later(let waiting, let why) = early else {
            Issue.record("expected the next instant, got \(early)")
            return
        }
        #expect(why == "settled through 2026-03-12")
        #expect(waiting.change.settlement == nil && waiting.work.isEmpty && waiting.notifications.isEmpty)
        #expect(waiting.change.nextDue == instant("2026-03-13T23:05:00Z"))
        // 00:05: the 13th is settled, and the user is next due at 00:05 the day after.
        let due = try job.decide(for: paris, facts: facts, run: runContext("validate-streaks", now: "2026-03-13T23:05:00Z"))
        guard case .act(let change) = due else {
            Issue.record("expected a change")
            return
        }
        #expect(change.work == [WorkMark(localDay: day("2026-03-13"), outcome: "checked_in")])
        #expect(change.change.settlement?.settledThrough == day("2026-03-13"))
        #expect(change.change.settlement?.streakDays == [day("2026-03-13"): 1])
        #expect(change.change.nextDue == instant("2026-03-14T23:05:00Z"))
    }

    @Test func queuesStreakAtRiskForNineInTheMorningLocal() throws {
        let state = StreakState(
            currentStreak: 21, longestStreak: 21, lastCheckinDate: day("2026-03-11"),
            freezeUsedThisWeek: true, weekStartDate: day("2026-03-09"), missedDays: 0)
        let sydney = user("Australia/Sydney")
        let facts = ValidateStreaksJob.Facts(streak: settled(through: "2026-03-11", state), badges: [], tracking: [:])
        let decision = try job.decide(for: sydney, facts: facts, run: runContext("validate-streaks", now: "2026-03-12T13:10:00Z"))
        guard case .act(let change) = decision else {
            Issue.record("expected a change")
            return
        }
        #expect(change.work.map(\.outcome) == ["at_risk"])
        let message = try #require(change.notifications.first)
        #expect(message.type == "streak_at_risk")
        #expect(message.deliverAfter == instant("2026-03-12T22:00:00Z"))   // 09:00 on the 13th, AEDT
        #expect(message.title == "🔥 Your 21-day streak is at risk")
        // For the 13th, the day it asks a check-in on (the missed day is in its payload).
        #expect(message.localDay == LocalDate(iso8601: "2026-03-13"))
        #expect(message.payload.contains(#""missed_day":"2026-03-12""#))
        #expect(message.dedupeKey(job: "validate-streaks", userID: change.itemID).hasSuffix(":2026-03-13:streak_at_risk"))
    }

    @Test func writesInFrenchForFrenchUsers() throws {
        let state = StreakState(
            currentStreak: 4, longestStreak: 4, lastCheckinDate: day("2026-03-12"),
            freezeUsedThisWeek: false, weekStartDate: day("2026-03-09"), missedDays: 0)
        let paris = user("Europe/Paris", locale: "fr")
        let facts = ValidateStreaksJob.Facts(streak: settled(through: "2026-03-12", state), badges: [], tracking: [:])
        let decision = try job.decide(for: paris, facts: facts, run: runContext("validate-streaks", now: "2026-03-14T00:00:00Z"))
        guard case .act(let change) = decision else {
            Issue.record("expected a change")
            return
        }
        #expect(change.notifications.map(\.type) == ["streak_freeze_used"])
        #expect(change.notifications.first?.title == "💎 Gel de série utilisé")
    }

    @Test func catchesUpEveryEndedDayInOrderButOnlyTellsAboutYesterday() throws {
        let state = StreakState(
            currentStreak: 5, longestStreak: 5, lastCheckinDate: day("2026-03-08"),
            freezeUsedThisWeek: false, weekStartDate: day("2026-03-02"), missedDays: 0)
        let utc = user(nil)
        let facts = ValidateStreaksJob.Facts(streak: settled(through: "2026-03-08", state), badges: [], tracking: [:])
        let decision = try job.decide(for: utc, facts: facts, run: runContext("validate-streaks", now: "2026-03-12T06:00:00Z"))
        guard case .act(let change) = decision else {
            Issue.record("expected a change")
            return
        }
        #expect(change.work.map(\.outcome) == ["freeze_used", "at_risk", "reset"])
        #expect(change.notifications.isEmpty)   // the freeze and the risk were days ago
        #expect(change.change.settlement?.state.currentStreak == 0)
    }

    @Test func grantsABadgeOnceWhenTheStreakReachesSeven() throws {
        let state = StreakState(
            currentStreak: 6, longestStreak: 12, lastCheckinDate: day("2026-03-12"),
            freezeUsedThisWeek: false, weekStartDate: day("2026-03-09"), missedDays: 0)
        let utc = user(nil)
        let fresh = ValidateStreaksJob.Facts(streak: settled(through: "2026-03-12", state), badges: [], tracking: checkIns(["2026-03-13"]))
        let run = runContext("validate-streaks", now: "2026-03-14T00:05:00Z")
        guard case .act(let first) = try job.decide(for: utc, facts: fresh, run: run) else {
            Issue.record("expected a change")
            return
        }
        #expect(first.change.settlement?.badges == [.weekWarrior: instant("2026-03-14T00:05:00Z")])
        let already = ValidateStreaksJob.Facts(
            streak: settled(through: "2026-03-12", state), badges: ["week_warrior"],
            tracking: checkIns(["2026-03-13"]))
        guard case .act(let second) = try job.decide(for: utc, facts: already, run: run) else {
            Issue.record("expected a change")
            return
        }
        #expect(second.change.settlement?.badges.isEmpty == true)
    }

    @Test func aNewUserIsSettledFromTheirLocalSignUpDay() throws {
        // Signed up at 23:30 UTC on the 10th, which is already the 11th in Kolkata.
        let kolkata = user("Asia/Kolkata", signedUp: "2026-03-10T23:30:00Z")
        let decision = try job.decide(for: kolkata, facts: nil, run: runContext("validate-streaks", now: "2026-03-11T18:40:00Z"))
        guard case .act(let change) = decision else {
            Issue.record("expected a change")
            return
        }
        #expect(change.work.map(\.localDay) == [day("2026-03-11")])
        #expect(change.change.settlement?.expectedSettledThrough == nil)
    }

    @Test func aBackfillSettlesOnlyItsWindow() throws {
        let utc = user(nil)
        let facts = ValidateStreaksJob.Facts(streak: settled(through: "2026-03-04"), badges: [], tracking: checkIns(["2026-03-05", "2026-03-06"]))
        let window = try DayWindow(from: day("2026-03-05"), to: day("2026-03-06"))
        let decision = try job.decide(for: utc, facts: facts, run: runContext("validate-streaks", now: "2026-03-20T00:00:00Z", window: window))
        guard case .act(let change) = decision else {
            Issue.record("expected a change")
            return
        }
        #expect(change.work.map(\.localDay) == [day("2026-03-05"), day("2026-03-06")])
    }

    @Test func aBackfillAfterUnsettledDaysSaysWhereToStart() {
        let utc = user(nil)
        let facts = ValidateStreaksJob.Facts(streak: settled(through: "2026-03-02"), badges: [], tracking: [:])
        let window = try! DayWindow(from: day("2026-03-06"), to: day("2026-03-06"))
        #expect(throws: NudgeError.self) {
            try job.decide(for: utc, facts: facts, run: runContext("validate-streaks", now: "2026-03-20T00:00:00Z", window: window))
        }
        do {
            _ = try job.decide(for: utc, facts: facts, run: runContext("validate-streaks", now: "2026-03-20T00:00:00Z", window: window))
        } catch {
            #expect("\(error)" == "days 2026-03-03 to 2026-03-05 are not settled yet; backfill from 2026-03-03")
        }
    }

    @Test func aBackfillOfSettledDaysHasNothingToDo() throws {
        let utc = user(nil)
        let facts = ValidateStreaksJob.Facts(streak: settled(through: "2026-03-10"), badges: [], tracking: [:])
        let window = try DayWindow(from: day("2026-03-05"), to: day("2026-03-06"))
        let decision = try job.decide(for: utc, facts: facts, run: runContext("validate-streaks", now: "2026-03-20T00:00:00Z", window: window))
        guard case .later(let change, _) = decision else {
            Issue.record("expected the next instant")
            return
        }
        #expect(change.change.settlement == nil && change.work.isEmpty)
        // The days after the 10th are not settled: the user stays due for the next run.
        #expect(change.change.nextDue == instant("2026-03-12T00:05:00Z"))
    }

    @Test func aUserTheIndexCouldNotPlaceFailsWithTheReason() {
        let placed = user(nil)
        let unplaced = DueUser(user: placed.user, dueAt: placed.dueAt, problem: "the user's time zone 'Mars/Olympus' is unknown")
        #expect(throws: NudgeError.self) {
            try job.decide(for: unplaced, facts: nil, run: runContext("validate-streaks", now: "2026-03-12T06:00:00Z"))
        }
    }

    @Test func corruptRowsAndImpossibleValuesFailTheUserWithTheReason() {
        let utc = user(nil)
        let corrupt = StreakState(
            currentStreak: 10, longestStreak: 3, lastCheckinDate: nil, freezeUsedThisWeek: false,
            weekStartDate: nil, missedDays: 0)
        let run = runContext("validate-streaks", now: "2026-03-12T06:00:00Z")
        #expect(throws: NudgeError.self) {
            try job.decide(for: utc, facts: .init(streak: settled(through: "2026-03-10", corrupt), badges: [], tracking: [:]), run: run)
        }
        let impossible = [day("2026-03-11"): TrackingDay(date: day("2026-03-11"), mood: 3, energy: 3, steps: -40, weight: nil)]
        #expect(throws: NudgeError.self) {
            try job.decide(for: utc, facts: .init(streak: settled(through: "2026-03-10"), badges: [], tracking: impossible), run: run)
        }
    }
}
