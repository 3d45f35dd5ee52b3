import Foundation
import Testing

@testable import NudgeCore

private func day(_ text: String) -> LocalDate { LocalDate(iso8601: text)! }

/// Settles `pattern` (x = checked in, . = missed) from `start`, returning each day's outcome.
private func settle(_ pattern: String, from start: String = "2026-03-02", state: StreakState = .fresh)
    -> (StreakState, [DayOutcome])
{
    var state = state
    var outcomes: [DayOutcome] = []
    for (offset, mark) in pattern.enumerated() {
        let outcome: DayOutcome
        (state, outcome) = StreakRules.settle(state, day: day(start).adding(days: offset), checkedIn: mark == "x")
        outcomes.append(outcome)
    }
    return (state, outcomes)
}

@Suite struct StreakRulesTests {
    @Test func checkInsExtendTheStreak() {
        let (state, outcomes) = settle("xxx")
        #expect(state.currentStreak == 3)
        #expect(state.longestStreak == 3)
        #expect(state.lastCheckinDate == day("2026-03-04"))
        #expect(outcomes == [.checkedIn, .checkedIn, .checkedIn])
    }

    @Test func freezeIsUsedOnTheFirstMissedDayOfTheWeek() {
        // A 4-day streak, then day 5 is missed: the week's freeze is used (docs/jobs/validate-streaks.md).
        let (state, outcomes) = settle("xxxx.")
        #expect(outcomes.last == .freezeUsed)
        #expect(state.currentStreak == 4)
        #expect(state.freezeUsedThisWeek)
        #expect(state.missedDays == 0)
        // The day counts as kept: checking in the next day continues the streak.
        let (after, _) = settle("xxxx.x")
        #expect(after.currentStreak == 5)
    }

    @Test func aMissWithTheFreezeSpentPutsTheStreakAtRisk() {
        let (state, outcomes) = settle("xx.x.")
        #expect(outcomes == [.checkedIn, .checkedIn, .freezeUsed, .checkedIn, .atRisk])
        #expect(state.currentStreak == 3)
        #expect(state.missedDays == 1)
    }

    @Test func neverMissTwice() {
        let (state, outcomes) = settle("xx...")
        #expect(outcomes == [.checkedIn, .checkedIn, .freezeUsed, .atRisk, .reset])
        #expect(state.currentStreak == 0)
        #expect(state.longestStreak == 2)
        // A check-in after a single miss at risk recovers.
        let (recovered, _) = settle("xx..x")
        #expect(recovered.currentStreak == 3)
        #expect(recovered.missedDays == 0)
    }

    @Test func theFreezeResetsOnTheLocalMonday() {
        // 2026-03-07 is a Saturday: the freeze is spent that week, and Monday's miss gets a new one.
        let (state, outcomes) = settle("xxxxx.x.", from: "2026-03-02")
        #expect(outcomes[5] == .freezeUsed)   // Sat 03-07
        #expect(outcomes[7] == .freezeUsed)   // Mon 03-09: a new week
        #expect(state.weekStartDate == day("2026-03-09"))
        #expect(state.currentStreak == 6)
    }

    @Test func aMissWithNoStreakLosesNothing() {
        let (state, outcomes) = settle("..")
        #expect(outcomes == [.inactive, .inactive])
        #expect(state.currentStreak == 0)
        #expect(!state.freezeUsedThisWeek)
    }

    @Test func theLongestStreakIsKept() {
        let (state, _) = settle("xxxxx..." + "xx")
        #expect(state.longestStreak == 5)
        #expect(state.currentStreak == 2)
    }

    @Test func badgesAtSevenThirtyAndAHundredDays() {
        #expect(StreakBadge.earned(at: 7) == .weekWarrior)
        #expect(StreakBadge.earned(at: 30) == .monthlyMaster)
        #expect(StreakBadge.earned(at: 100) == .centurion)
        #expect(StreakBadge.earned(at: 8) == nil)
    }

    @Test func inconsistentRowsAreNamed() {
        var state = StreakState.fresh
        #expect(StreakRules.inconsistency(in: state, settledThrough: nil) == nil)
        state.currentStreak = 10
        state.longestStreak = 3
        #expect(StreakRules.inconsistency(in: state, settledThrough: nil) == "longest_streak 3 is below current_streak 10")
        state = .fresh
        state.currentStreak = -1
        #expect(StreakRules.inconsistency(in: state, settledThrough: nil) == "current_streak -1 is negative")
        state = .fresh
        state.weekStartDate = day("2026-03-10")
        #expect(StreakRules.inconsistency(in: state, settledThrough: nil) == "week_start_date 2026-03-10 is not a Monday")
    }

    @Test func impossibleTrackingValuesAreNamed() {
        #expect(TrackingDay(date: day("2026-03-02"), mood: 9, energy: 3, steps: 10, weight: nil).impossibility == "mood 9 is outside 1-5")
        #expect(TrackingDay(date: day("2026-03-02"), mood: nil, energy: nil, steps: -5, weight: nil).impossibility == "steps -5 is outside 0-150000")
        #expect(TrackingDay(date: day("2026-03-02"), mood: nil, energy: nil, steps: nil, weight: 0).impossibility == "weight 0.0 is outside 0-1500 lb")
        #expect(TrackingDay(date: day("2026-03-02"), mood: 3, energy: 4, steps: 8000, weight: 180).impossibility == nil)
        #expect(!TrackingDay(date: day("2026-03-02"), mood: 3, energy: nil, steps: nil, weight: nil).isCheckedIn)
    }
}
