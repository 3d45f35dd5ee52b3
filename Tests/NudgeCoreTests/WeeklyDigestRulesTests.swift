import Foundation
import Testing

@testable import NudgeCore

private func day(_ text: String) -> LocalDate { LocalDate(iso8601: text)! }

/// Tracking of `days` consecutive days from `from`: steps by a function of the day's index,
/// checked in on the days `checkedIn` says, weight where given.
private func tracking(
    from: String, days: Int, steps: (Int) -> Int?, checkedIn: (Int) -> Bool = { _ in true },
    weight: (Int) -> Double? = { _ in nil }
) -> [LocalDate: TrackingDay] {
    Dictionary(
        uniqueKeysWithValues: (0..<days).map { index in
            let date = day(from).adding(days: index)
            let checked = checkedIn(index)
            return (
                date,
                TrackingDay(
                    date: date, mood: checked ? 4 : nil, energy: checked ? 3 : nil, steps: steps(index),
                    weight: weight(index))
            )
        })
}

@Suite struct WeeklyDigestRulesTests {
    // The week of Monday 9 March 2026, and the four before it (from 9 February).
    let monday = day("2026-03-09")

    @Test func theSeedsWeekNumbersComeFromTheUsersRows() {
        // 52,341 steps over the week; the daily goal (7,000) met on 6 days; the four weeks before met it 3 to 5 times.
        let thisWeek = [9_000, 8_000, 7_500, 7_000, 6_841, 7_000, 7_000]
        let rows = tracking(
            from: "2026-02-09", days: 35,
            steps: { index in
                index >= 28 ? thisWeek[index - 28] : (index % 7 < 3 + (index / 7) % 3 ? 7_200 : 4_000)
            }, weight: { index in index == 27 ? 181.0 : (index == 33 ? 179.8 : nil) })
        let goals = Dictionary(uniqueKeysWithValues: (0..<35).map { (day("2026-02-09").adding(days: $0), 7_000) })
        let week = WeeklyDigestRules.review(
            monday: monday, signedUpOn: day("2026-01-01"), tracking: rows, dailyStepsGoals: goals, weeklyStepsGoal: 50_000,
            settledStreak: (current: 20, through: day("2026-03-14")),
            ranks: [.init(circle: "Lunch Walkers", rank: 5), .init(circle: "Work Warriors", rank: 2)], memberships: [])
        #expect(week.steps == 52_341)
        #expect(week.stepsPercent == 104)
        #expect(week.daysGoalMet == 6 && week.daysWithGoal == 7)
        #expect(week.topAchievement == .bestWeek(daysMet: 6, of: 7))
        #expect(week.streak == 21 && week.streakHeldAllWeek)
        #expect(week.weightChange == -1.2)
        #expect(week.bestRank == .init(circle: "Work Warriors", rank: 2))
        // Next week's goal by generate-daily-goals' rules: the 7 days' average + 10 %, × 7.
        #expect(week.nextWeekStepsGoal == 57_400)

        let english = DigestCopy(locale: "en")
        #expect(english.pushBody(week) == "📅 Week in Review: 52,341 steps, 21-day streak maintained, #2 in Work Warriors")
        #expect(english.subject(week) == "Your Week in Review: 52,341 steps, 21-day streak 🔥")
        #expect(english.achievement(week.topAchievement!) == "You hit your daily goal 6 out of 7 days — your best week yet!")
        #expect(english.weight(week.weightChange!) == "-1.2 lbs")
        let french = DigestCopy(locale: "fr")
        #expect(french.pushBody(week) == "📅 Ta semaine : 52\u{202F}341 pas, série de 21 jours maintenue, #2 dans Work Warriors")
        #expect(french.subject(week) == "Ta semaine en bref : 52\u{202F}341 pas, série de 21 jours 🔥")
        // The rows hold pounds; French readers get kilograms: 1.25 lb is 0.57 kg.
        #expect(french.weight(-1.25) == "-0,6\u{00A0}kg")
        #expect(DigestCopy(locale: "de").pushBody(week) == english.pushBody(week))
    }

    @Test func aWeekThatIsNotTheBestSaysWhatItIs() {
        // Six goal days this week and the week before: not the best, still worth saying.
        let rows = tracking(from: "2026-03-02", days: 14, steps: { $0 % 7 == 6 ? 1_000 : 8_000 })
        let goals = Dictionary(uniqueKeysWithValues: (0..<14).map { (day("2026-03-02").adding(days: $0), 7_000) })
        let week = WeeklyDigestRules.review(
            monday: monday, signedUpOn: day("2026-01-01"), tracking: rows, dailyStepsGoals: goals,
            weeklyStepsGoal: nil, settledStreak: nil, ranks: [], memberships: [])
        #expect(week.topAchievement == .goalDays(daysMet: 6, of: 7))
        #expect(week.stepsPercent == nil)
        // No settled streak: counted from the check-ins, 14 days through Sunday.
        #expect(week.streak == 14 && week.streakHeldAllWeek)
    }

    @Test func aBrokenStreakAndAFirstWeek() {
        // Checked in every day but Wednesday; goals only this week (a first week is nobody's best).
        let rows = tracking(from: "2026-03-09", days: 7, steps: { _ in 8_000 }, checkedIn: { $0 != 2 })
        let goals = Dictionary(uniqueKeysWithValues: (0..<7).map { (day("2026-03-09").adding(days: $0), 7_000) })
        let week = WeeklyDigestRules.review(
            monday: monday, signedUpOn: day("2026-03-09"), tracking: rows, dailyStepsGoals: goals,
            weeklyStepsGoal: 50_000, settledStreak: (current: 3, through: day("2026-03-14")),
            ranks: [], memberships: [])
        #expect(week.streak == 4 && !week.streakHeldAllWeek)
        #expect(week.topAchievement == .goalDays(daysMet: 7, of: 7))
        #expect(DigestCopy(locale: "en").pushBody(week) == "📅 Week in Review: 56,000 steps, 4-day streak")
    }

    @Test func aQuietWeekGetsAShortKindDigestWithNoMadeUpNumbers() {
        let week = WeeklyDigestRules.review(
            monday: monday, signedUpOn: day("2026-01-01"), tracking: [:], dailyStepsGoals: [:],
            weeklyStepsGoal: 50_000, settledStreak: (current: 0, through: day("2026-03-14")),
            ranks: [], memberships: [])
        #expect(!week.hadActivity)
        #expect(week.steps == nil && week.weightChange == nil && week.topAchievement == nil)
        #expect(week.nextWeekStepsGoal == 50_000)
        #expect(
            DigestCopy(locale: "en").pushBody(week)
                == "📅 Week in Review: a quiet week. A fresh one starts on Monday, with a goal of 50,000 steps.")
        #expect(DigestCopy(locale: "fr").subject(week) == "Ta semaine en bref : une nouvelle semaine t'attend")
    }

    @Test func oneGoodDayOfSevenIsNobodysBestWeek() {
        // The four weeks before had no goal day at all; this one has one.
        let rows = tracking(from: "2026-02-09", days: 35, steps: { $0 == 30 ? 9_000 : 1_000 })
        let goals = Dictionary(uniqueKeysWithValues: (0..<35).map { (day("2026-02-09").adding(days: $0), 7_000) })
        let week = WeeklyDigestRules.review(
            monday: monday, signedUpOn: day("2026-01-01"), tracking: rows, dailyStepsGoals: goals,
            weeklyStepsGoal: nil, settledStreak: nil, ranks: [], memberships: [])
        #expect(week.daysGoalMet == 1)
        #expect(week.topAchievement != .bestWeek(daysMet: 1, of: 7))
        // Four days beat three: that is a best week.
        let better = tracking(from: "2026-02-09", days: 35, steps: { ($0 >= 28 && $0 < 32) || $0 % 7 < 3 ? 9_000 : 1_000 })
        #expect(
            WeeklyDigestRules.review(
                monday: monday, signedUpOn: day("2026-01-01"), tracking: better, dailyStepsGoals: goals,
                weeklyStepsGoal: nil, settledStreak: nil, ranks: [], memberships: []
            ).topAchievement
                == .bestWeek(daysMet: 4, of: 7))
    }

    @Test func quietWeeksInARowCountOnlyWeeksTheUserHadADigestFor() {
        // Active in the week of 9 February only.
        let rows = tracking(from: "2026-02-09", days: 7, steps: { _ in 5_000 })
        #expect(WeeklyDigestRules.quietWeeks(before: day("2026-03-16"), since: day("2026-01-05"), tracking: rows) == 4)
        #expect(WeeklyDigestRules.quietWeeks(before: day("2026-03-09"), since: day("2026-01-05"), tracking: rows) == 3)
        // Signed up on the 2 March week: only that week and the next count.
        #expect(WeeklyDigestRules.quietWeeks(before: day("2026-03-16"), since: day("2026-03-02"), tracking: rows) == 2)
    }

    @Test func numbersAsEachLocaleWritesThem() {
        let english = DigestCopy(locale: "en")
        let french = DigestCopy(locale: "fr")
        #expect(english.number(0) == "0")
        #expect(english.number(999) == "999")
        #expect(english.number(1_000) == "1,000")
        #expect(english.number(1_234_567) == "1,234,567")
        #expect(french.number(52_341) == "52\u{202F}341")
        #expect(english.weight(0.04) == "0.0 lbs")
        #expect(english.weight(2) == "+2.0 lbs")
    }
}
