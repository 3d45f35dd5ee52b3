import Foundation
import Testing

@testable import NudgeCore

private func day(_ text: String) -> LocalDate { LocalDate(iso8601: text)! }
private func instant(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }

/// Tracking with the given steps on the days before `day` (most recent last).
private func steps(_ values: [Int?], before end: String) -> [LocalDate: TrackingDay] {
    var tracking: [LocalDate: TrackingDay] = [:]
    for (offset, value) in values.reversed().enumerated() {
        let date = day(end).adding(days: -1 - offset)
        tracking[date] = TrackingDay(date: date, mood: 3, energy: 3, steps: value, weight: nil)
    }
    return tracking
}

private func weightCircle(
    start: Double?, target: Double?, endsOn: String = "2026-05-31", joined: String = "2026-01-01",
    left: String? = nil
) -> FitCircleMembership {
    FitCircleMembership(
        circleID: UUID(), challenge: .weightLoss, startsOn: day("2026-01-01"), endsOn: day(endsOn), stepGoal: nil,
        joinedOn: day(joined), leftOn: left.map(day), startingWeight: start, targetWeight: target)
}

private func stepsCircle(goal: Int, joined: String = "2026-01-01", left: String? = nil) -> FitCircleMembership {
    FitCircleMembership(
        circleID: UUID(), challenge: .steps, startsOn: day("2026-01-01"), endsOn: day("2026-12-31"),
        stepGoal: goal, joinedOn: day(joined), leftOn: left.map(day), startingWeight: nil, targetWeight: nil)
}

@Suite struct GoalRulesTests {
    let signup = day("2026-03-01")

    @Test func newUsersGetTheConservativeDefaultsForSevenDays() {
        // Day 1: nothing known yet: the default, 7,000 (docs/jobs/generate-daily-goals.md).
        let first = GoalRules.dailyTargets(on: signup, signedUpOn: signup, tracking: [:], memberships: [weightCircle(start: 200, target: 180)])
        #expect(first == .init(steps: 7_000, weight: nil, basis: .newUser, stepsFromBaseline: false, reasons: []))
        // Day 4 of a sedentary start (under 5,000 a day): 5,000; a moderate one: 7,000. No weight goal yet.
        let sedentary = GoalRules.dailyTargets(
            on: day("2026-03-04"), signedUpOn: signup,
            tracking: steps([3_000, 4_000, 4_500], before: "2026-03-04"), memberships: [])
        #expect(sedentary.steps == 5_000 && sedentary.basis == .newUser && sedentary.weight == nil)
        let moderate = GoalRules.dailyTargets(
            on: day("2026-03-04"), signedUpOn: signup,
            tracking: steps([6_000, 5_000, 4_500], before: "2026-03-04"), memberships: [])
        #expect(moderate.steps == 7_000)
    }

    @Test func dayEightSwitchesToTheBaseline() {
        let week = steps([8_000, 9_000, 10_000, 8_000, 9_000, 10_000, 9_000], before: "2026-03-08")
        let day7 = GoalRules.dailyTargets(on: day("2026-03-07"), signedUpOn: signup, tracking: week, memberships: [])
        #expect(day7.basis == .newUser && day7.steps == 7_000)
        let day8 = GoalRules.dailyTargets(on: day("2026-03-08"), signedUpOn: signup, tracking: week, memberships: [])
        // average 9,000 + 10 % = 9,900
        #expect(day8 == .init(steps: 9_900, weight: nil, basis: .baseline, stepsFromBaseline: true, reasons: []))
    }

    @Test func theStepsGoalIsCappedAtFifteenThousand() {
        let tracking = steps([20_000, 18_000, 16_000, 19_000, 25_000, 14_000, 17_000], before: "2026-03-20")
        #expect(GoalRules.dailyTargets(on: day("2026-03-20"), signedUpOn: signup, tracking: tracking, memberships: []).steps == 15_000)
        let justUnder = steps([13_600, 13_600, 13_600], before: "2026-03-20")   // 14,960 -> 15,000 by rounding, not by the cap
        #expect(GoalRules.dailyTargets(on: day("2026-03-20"), signedUpOn: signup, tracking: justUnder, memberships: []).steps == 15_000)
    }

    @Test func missingAndZeroDaysAreLeftOutOfTheAverage() {
        // Four days with steps out of seven (two missing rows, one zero): average 6,000.
        let tracking = steps([6_000, nil, 5_000, 0, 7_000, 6_000], before: "2026-03-20")
        let targets = GoalRules.dailyTargets(on: day("2026-03-20"), signedUpOn: signup, tracking: tracking, memberships: [])
        #expect(targets.steps == 6_600 && targets.basis == .baseline)
        // Two days are not a baseline: the default, with the reason.
        let thin = GoalRules.dailyTargets(
            on: day("2026-03-20"), signedUpOn: signup,
            tracking: steps([9_000, nil, nil, 0, 12_000], before: "2026-03-20"), memberships: [])
        #expect(
            thin
                == .init(
                    steps: 7_000, weight: nil, basis: .defaults, stepsFromBaseline: false,
                    reasons: ["steps on only 2 of the 7 days before 2026-03-20"]))
    }

    @Test func corruptTrackingGivesTheDefaultsAndSaysWhy() {
        var tracking = steps([8_000, 9_000, 10_000, 8_000, 9_000, 10_000, 9_000], before: "2026-03-20")
        tracking[day("2026-03-17")] = TrackingDay(date: day("2026-03-17"), mood: 3, energy: 3, steps: -500, weight: nil)
        let negative = GoalRules.dailyTargets(
            on: day("2026-03-20"), signedUpOn: signup, tracking: tracking,
            memberships: [weightCircle(start: 200, target: 180)])
        #expect(
            negative
                == .init(
                    steps: 7_000, weight: nil, basis: .defaults, stepsFromBaseline: false,
                    reasons: ["daily_tracking 2026-03-17: steps -500 is outside 0-150000"]))
        tracking[day("2026-03-17")] = TrackingDay(date: day("2026-03-17"), mood: 3, energy: 3, steps: 8_000, weight: 0)
        let zeroWeight = GoalRules.dailyTargets(on: day("2026-03-20"), signedUpOn: signup, tracking: tracking, memberships: [])
        #expect(zeroWeight.basis == .defaults && zeroWeight.reasons == ["daily_tracking 2026-03-17: weight 0.0 is outside 0-1500 lb"])
    }

    @Test func theWeightGoalIsTheCirclesDailyShareWithinATenthToThreeTenthsOfAPound() {
        let tracking = steps([8_000, 9_000, 10_000], before: "2026-03-20")
        func weight(_ circle: FitCircleMembership) -> Double? {
            GoalRules.dailyTargets(on: day("2026-03-20"), signedUpOn: signup, tracking: tracking, memberships: [circle]).weight
        }
        // 2026-03-16 (that week's Monday) to 2026-05-31 is 11 weeks: 14 lb / 11 / 7 = 0.18 lb a day.
        #expect(weight(weightCircle(start: 200, target: 186)) == -0.18)
        #expect(weight(weightCircle(start: 250, target: 150)) == -0.3)   // 1.3 a day, held at 0.3
        #expect(weight(weightCircle(start: 200, target: 199)) == -0.1)   // 0.013 a day, raised to 0.1
        // No weight goal outside a weight-loss circle, before joining, after leaving, or from absurd weights.
        #expect(weight(weightCircle(start: 200, target: 186, joined: "2026-03-21")) == nil)
        #expect(weight(weightCircle(start: 200, target: 186, left: "2026-03-19")) == nil)
        let absurd = GoalRules.dailyTargets(
            on: day("2026-03-20"), signedUpOn: signup, tracking: tracking,
            memberships: [weightCircle(start: 180, target: 190)])
        #expect(absurd.weight == nil && absurd.basis == .defaults && absurd.reasons.count == 1)
        #expect(absurd.steps == 9_900 && absurd.stepsFromBaseline)   // the steps goal is unaffected
    }

    @Test func ofTwoCirclesAskingTheSameLossTheLowerIdWins() {
        // 10.2 lb each, though 180.3 - 170.1 and 190.2 - 180.0 differ in their last binary digits.
        let first = FitCircleMembership(
            circleID: UUID(uuidString: "00000000-0000-0000-0000-000000000001")!, challenge: .weightLoss,
            startsOn: day("2026-01-01"), endsOn: day("2026-05-31"), stepGoal: nil, joinedOn: day("2026-01-01"),
            leftOn: nil, startingWeight: 190.2, targetWeight: 180.0)
        let second = FitCircleMembership(
            circleID: UUID(uuidString: "00000000-0000-0000-0000-000000000002")!, challenge: .weightLoss,
            startsOn: day("2026-01-01"), endsOn: day("2026-05-31"), stepGoal: nil, joinedOn: day("2026-01-01"),
            leftOn: nil, startingWeight: 180.3, targetWeight: 170.1)
        for order in [[first, second], [second, first]] {
            guard case .circle(let chosen, _) = GoalRules.weightCircle(on: day("2026-03-20"), memberships: order) else {
                Issue.record("expected a circle")
                return
            }
            #expect(chosen.circleID == first.circleID)
        }
    }

    @Test func closingADayMeasuresItAgainstItsTarget() {
        var tracking = steps([8_000], before: "2026-03-20")
        tracking[day("2026-03-20")] = TrackingDay(date: day("2026-03-20"), mood: 4, energy: nil, steps: 9_100, weight: 180.2)
        tracking[day("2026-03-17")] = TrackingDay(date: day("2026-03-17"), mood: nil, energy: nil, steps: nil, weight: 180.6)
        #expect(GoalRules.close(.steps, target: 9_000, on: day("2026-03-20"), tracking: tracking) == .init(actual: 9_100, completed: true))
        // Mood without energy is not a check-in.
        #expect(GoalRules.close(.checkin, target: 1, on: day("2026-03-20"), tracking: tracking) == .init(actual: 0, completed: false))
        // 180.2 against the last weigh-in before (180.6): -0.4, at or under -0.2.
        #expect(GoalRules.close(.weight, target: -0.2, on: day("2026-03-20"), tracking: tracking) == .init(actual: -0.4, completed: true))
        // A day without a row: no steps, no check-in, no weight change.
        #expect(GoalRules.close(.steps, target: 9_000, on: day("2026-03-21"), tracking: tracking) == .init(actual: 0, completed: false))
        #expect(GoalRules.close(.weight, target: -0.2, on: day("2026-03-21"), tracking: tracking) == .init(actual: nil, completed: false))
    }

    @Test func weeklyTargetsFollowTheCirclesAndTheBaseline() {
        let monday = day("2026-03-16")
        let week = steps([8_000, 9_000, 10_000, 8_000, 9_000, 10_000, 9_000], before: "2026-03-16")
        let plain = GoalRules.weeklyTargets(monday: monday, asOf: monday, signedUpOn: signup, tracking: week, memberships: [])
        #expect(plain[.steps] == .init(target: 69_300, circleID: nil))   // Monday's 9,900 x 7
        #expect(plain[.weight] == .init(target: 0, circleID: nil))   // maintenance
        #expect(plain[.streak]?.target == 7 && plain[.activeDays]?.target == 5)
        // A new user's week: the 50,000 default.
        let fresh = GoalRules.weeklyTargets(monday: monday, asOf: monday, signedUpOn: day("2026-03-12"), tracking: [:], memberships: [])
        #expect(fresh[.steps] == .init(target: 50_000, circleID: nil))
        let circle = stepsCircle(goal: 70_000)
        let loss = weightCircle(start: 200, target: 178)
        let member = GoalRules.weeklyTargets(monday: monday, asOf: monday, signedUpOn: signup, tracking: week, memberships: [circle, loss])
        #expect(member[.steps] == .init(target: 70_000, circleID: circle.circleID))
        #expect(member[.weight] == .init(target: -2, circleID: loss.circleID))   // 22 lb over 11 weeks
    }

    @Test func weeklyProgressCountsTheDaysThatAreOver() {
        let monday = day("2026-03-16")
        var tracking: [LocalDate: TrackingDay] = [:]
        for (offset, stepCount) in [4_000, 2_000, 9_000].enumerated() {
            let date = monday.adding(days: offset)
            tracking[date] = TrackingDay(date: date, mood: offset == 1 ? nil : 3, energy: 3, steps: stepCount, weight: offset == 2 ? 181 : nil)
        }
        tracking[day("2026-03-14")] = TrackingDay(date: day("2026-03-14"), mood: nil, energy: nil, steps: nil, weight: 182.5)
        let lastEnded = day("2026-03-18")
        func progress(_ goal: GoalRules.WeeklyGoal, _ target: Double) -> GoalRules.WeeklyProgress {
            GoalRules.weeklyProgress(goal, target: target, monday: monday, signedUpOn: signup, lastEnded: lastEnded, tracking: tracking)
        }
        #expect(progress(.steps, 50_000) == .init(actual: 15_000, breakdown: ["Mon": 4_000, "Tue": 2_000, "Wed": 9_000], completed: false))
        #expect(progress(.streak, 7) == .init(actual: 2, breakdown: ["Mon": 1, "Tue": 0, "Wed": 1], completed: false))
        #expect(progress(.activeDays, 2) == .init(actual: 2, breakdown: ["Mon": 1, "Tue": 0, "Wed": 1], completed: true))
        #expect(progress(.weight, -1) == .init(actual: -1.5, breakdown: ["Wed": 181], completed: true))
    }

    @Test func roundingMatchesPostgreSQLsNumericRound() {
        #expect(GoalRules.rounded(0.145) == 0.15)   // held in binary as 0.14499999999999999
        #expect(GoalRules.rounded(-0.125) == -0.13)
        #expect(GoalRules.rounded(2.0 / 7) == 0.29)
    }
}

private let goalsJob = GenerateDailyGoalsJob(definition: definition("generate-daily-goals"))

/// A user as the due index hands them over, due since 'epoch'.
private func user(_ zone: String?, signedUp: String) -> DueUser {
    DueUser(
        user: UserInTime(
            user: UserRow(id: UUID(), timezone: zone, locale: "en", createdAt: instant(signedUp)),
            calendar: try! LocalCalendar(identifier: zone)),
        dueAt: Date(timeIntervalSince1970: 0))
}

private func change(_ decision: Decision<GenerateDailyGoalsJob.Change>) -> GenerateDailyGoalsJob.Change? {
    if case .act(let planned) = decision { return planned.change }
    return nil
}

@Suite struct GenerateDailyGoalsDecisionTests {
    @Test func aDaysGoalsAppearOnceItsLocalMidnightHasPassedAcrossDaylightSaving() throws {
        let paris = user("Europe/Paris", signedUp: "2026-03-01T08:00:00Z")
        // 2026-03-29 has 23 hours in Paris; it begins at 23:00Z on the 28th.
        let before = try goalsJob.decide(for: paris, facts: nil, run: runContext("generate-daily-goals", now: "2026-03-28T22:59:00Z"))
        #expect(change(before)?.daily.map(\.date).max() == day("2026-03-28"))
        let after = try goalsJob.decide(for: paris, facts: nil, run: runContext("generate-daily-goals", now: "2026-03-28T23:00:00Z"))
        #expect(change(after)?.daily.map(\.date).max() == day("2026-03-29"))
        // Each decision leaves the user due at their next midnight: Paris's, in summer time.
        #expect(change(after)?.nextDue == instant("2026-03-29T22:00:00Z"))
        // 2026-10-25 has 25 hours: it ends at 23:00Z, not 22:00Z.
        let late = try goalsJob.decide(for: paris, facts: nil, run: runContext("generate-daily-goals", now: "2026-10-25T22:30:00Z"))
        #expect(change(late)?.daily.map(\.date).max() == day("2026-10-25"))
        let next = try goalsJob.decide(for: paris, facts: nil, run: runContext("generate-daily-goals", now: "2026-10-25T23:00:00Z"))
        #expect(change(next)?.daily.map(\.date).max() == day("2026-10-26"))
    }

    @Test func weeklyGoalsBeginOnTheLocalMondayOfUsersWhoHadSignedUpByThen() throws {
        let kolkata = user("Asia/Kolkata", signedUp: "2026-03-01T08:00:00Z")
        // Monday 2026-03-16 00:30 in Kolkata is 19:00Z on Sunday the 15th.
        let monday = try goalsJob.decide(for: kolkata, facts: nil, run: runContext("generate-daily-goals", now: "2026-03-15T19:00:00Z"))
        let weeks = Set(change(monday)?.weekly.map(\.weekStart) ?? [])
        #expect(weeks == [day("2026-03-09"), day("2026-03-16")])   // last week (its Sunday closes) and this one
        // Signed up on Wednesday the 11th: no goals for that week, the next one's from its Monday.
        let late = user("Asia/Kolkata", signedUp: "2026-03-11T08:00:00Z")
        let first = try goalsJob.decide(for: late, facts: nil, run: runContext("generate-daily-goals", now: "2026-03-12T08:00:00Z"))
        #expect(change(first)?.weekly.isEmpty == true)
        let next = try goalsJob.decide(for: late, facts: nil, run: runContext("generate-daily-goals", now: "2026-03-15T19:00:00Z"))
        #expect(Set(change(next)?.weekly.map(\.weekStart) ?? []) == [day("2026-03-16")])
    }

    @Test func existingGoalsKeepTheirTargetsAndAnUpToDateUserIsNothingDue() throws {
        let utc = user(nil, signedUp: "2026-03-01T08:00:00Z")
        let run = runContext("generate-daily-goals", now: "2026-03-18T09:00:00Z")
        guard let first = change(try goalsJob.decide(for: utc, facts: nil, run: run)) else {
            Issue.record("expected goals")
            return
        }
        var facts = GenerateDailyGoalsJob.Facts()
        for write in first.daily {
            facts.daily[write.date, default: [:]][write.goal.rawValue] = .init(target: write.target, actual: write.actual, completed: write.completed)
        }
        for write in first.weekly {
            facts.weekly[write.weekStart, default: [:]][write.goal.rawValue] = .init(
                target: write.target, actual: write.actual, breakdown: write.breakdown, completed: write.completed, circleID: write.circleID)
        }
        guard case .later(let waiting, _) = try goalsJob.decide(for: utc, facts: facts, run: run) else {
            Issue.record("a second decision over its own writes should change nothing")
            return
        }
        #expect(waiting.change.daily.isEmpty && waiting.change.weekly.isEmpty)
        #expect(waiting.change.nextDue == instant("2026-03-19T00:00:00Z"))
        // Joining a steps circle mid-week recalculates that week's steps target.
        let circle = stepsCircle(goal: 80_000, joined: "2026-03-18")
        facts.memberships = [circle]
        let joined = change(try goalsJob.decide(for: utc, facts: facts, run: run))
        #expect(joined?.daily.isEmpty == true)
        #expect(joined?.weekly.map { "\($0.goal.rawValue) \($0.target) \($0.circleID == circle.circleID)" } == ["steps 80000.0 true"])

        // Leaving a weight-loss circle mid-week puts that week's weight goal back to maintenance.
        let loss = weightCircle(start: 200, target: 178, joined: "2026-03-01", left: "2026-03-17")
        facts.memberships = [loss]
        facts.weekly[day("2026-03-16")]!["weight"] = .init(
            target: -2, actual: nil, breakdown: [:], completed: false,
            circleID: loss.circleID)
        let left = change(try goalsJob.decide(for: utc, facts: facts, run: run))
        #expect(left?.weekly.map { "\($0.goal.rawValue) \($0.target) \($0.circleID == nil)" } == ["weight 0.0 true"])
    }
}
