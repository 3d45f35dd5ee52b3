import Foundation
import Testing

@testable import NudgeCore

private func at(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }
private func time(_ text: String) -> LocalTime { LocalTime(text)! }
private func day(_ text: String) -> LocalDate { LocalDate(iso8601: text)! }

private func days(_ times: [LocalTime]) -> [ReminderRules.LearningDay] { times.map { ReminderRules.LearningDay(time: $0) } }
private func days(_ text: String, count: Int) -> [ReminderRules.LearningDay] { days(Array(repeating: time(text), count: count)) }

/// No quiet hours, to see the learned time alone.
private let awake = QuietHours(start: LocalTime(hour: 0, minute: 0)!, end: LocalTime(hour: 0, minute: 0)!, pauseWeekends: false)

struct ReminderTimeTests {
    @Test func theUsersOwnTimeWinsOverWhatTheirCheckInsSay() {
        let learned = ReminderRules.reminderTime(chosen: time("19:30"), checkIns: days("07:10", count: 20))
        #expect(learned.time == time("19:30") && learned.source == .chosen)
        #expect(learned.why == "19:30: the user's own reminder time")
        // A time the user chose inside their quiet hours is theirs: it stands.
        #expect(ReminderRules.reminderTime(chosen: time("06:30"), checkIns: []).time == time("06:30"))
    }

    @Test func fourteenCheckInDaysAreNeededToLearnATime() {
        let few = ReminderRules.reminderTime(chosen: nil, checkIns: days("09:10", count: 13))
        #expect(few.time == time("20:00") && few.source == .standard)
        #expect(few.why == "20:00: the default (13 of the 14 check-in days needed to learn the user's time)")
        let enough = ReminderRules.reminderTime(chosen: nil, checkIns: days("09:10", count: 14))
        #expect(enough.time == time("08:25") && enough.source == .learned)
        #expect(enough.why == "08:25: 45 min before the user's median check-in 09:10 over 14 days")
    }

    @Test func theMedianCheckInLessFortyFiveMinutesWithinSixToTwentyTwo() {
        // An odd day out does not move the median.
        let mornings = (0..<15).map { LocalTime(hour: 7, minute: 5 + $0 % 10)! } + [time("23:50")]
        #expect(ReminderRules.reminderTime(chosen: nil, checkIns: days(mornings), quietHours: awake).time == time("06:23"))
        #expect(ReminderRules.reminderTime(chosen: nil, checkIns: days("06:20", count: 14), quietHours: awake).time == time("06:00"))
        #expect(ReminderRules.reminderTime(chosen: nil, checkIns: days("23:30", count: 14), quietHours: awake).time == time("22:00"))
        // An even count: the middle two's mean, to the minute below.
        let even = days("07:00", count: 7) + days("07:11", count: 7)
        #expect(ReminderRules.reminderTime(chosen: nil, checkIns: even, quietHours: awake).time == time("06:20"))
    }

    /// An early riser checking in at 07:10 with the default quiet hours (22:00–08:00): 45 minutes
    /// before is 06:25, inside them, so the reminder is at their end, 08:00.
    @Test func aLearnedTimeInsideQuietHoursMovesToTheirEnd() {
        let riser = ReminderRules.reminderTime(chosen: nil, checkIns: days("07:10", count: 20))
        #expect(riser.time == time("08:00") && riser.source == .learned)
        #expect(
            riser.why == "08:00: the end of the user's quiet hours (22:00–08:00); 45 min before the user's median check-in 07:10 "
                + "over 20 days is 06:25, inside them")
        // A user's own quiet hours: 13:00–15:00 holds a learned 14:00 until 15:00.
        let nap = QuietHours(start: time("13:00"), end: time("15:00"), pauseWeekends: false)
        #expect(ReminderRules.reminderTime(chosen: nil, checkIns: days("14:45", count: 14), quietHours: nap).time == time("15:00"))
        // The end itself is outside them.
        #expect(ReminderRules.reminderTime(chosen: nil, checkIns: days("08:45", count: 14)).time == time("08:00"))
    }

    /// A learned time in the evening part of the quiet hours (which end the next morning): no
    /// time after them is left in the day, so the default.
    @Test func aLearnedTimeWhoseQuietHoursOutlastTheDayIsTheDefault() {
        let owl = ReminderRules.reminderTime(chosen: nil, checkIns: days("22:50", count: 14))
        #expect(owl.time == time("20:00") && owl.source == .standard)
        #expect(
            owl.why == "20:00: the default; 45 min before the user's median check-in 22:50 over 14 days is 22:00, inside the "
                + "user's quiet hours (22:00–08:00), which last until the day is over")
        let early = QuietHours(start: time("21:00"), end: time("07:00"), pauseWeekends: false)
        #expect(ReminderRules.reminderTime(chosen: nil, checkIns: days("22:00", count: 14), quietHours: early).time == time("20:00"))
        #expect(ReminderRules.reminderTime(chosen: nil, checkIns: days("21:40", count: 14), quietHours: early).time == time("20:55"))
    }

    /// Quiet hours from 19:00: after a learned 21:15 inside them, 20:00 is inside them too, so the
    /// last quarter hour before they begin, which quiet hours then hold as a learned time.
    @Test func whenTheDefaultIsQuietTooTheReminderGoesBeforeTheQuietHours() {
        let evening = QuietHours(start: time("19:00"), end: time("07:00"), pauseWeekends: false)
        let late = ReminderRules.reminderTime(chosen: nil, checkIns: days("22:00", count: 14), quietHours: evening)
        #expect(late.time == time("18:45") && late.source == .learned)
        #expect(!evening.isQuiet(late.time))
        #expect(late.why.hasPrefix("18:45: before the user's quiet hours, the default 20:00 inside them too; 45 min before"))
    }

    /// Check-ins either side of midnight have their median at midnight, not at noon.
    @Test func theMedianOfCheckInsAroundMidnightWrapsTheClock() {
        let midnight = days("23:50", count: 7) + days("00:10", count: 7) + days("23:58", count: 1)
        #expect(ReminderRules.circularMedian(midnight.map(\.time.minutes)) == 23 * 60 + 58)
        #expect(ReminderRules.circularMedian([23 * 60 + 50, 10]) == 0)
        #expect(ReminderRules.circularMedian([23 * 60 + 40, 20, 40]) == 20)
        // A day's spread keeps its plain median.
        #expect(ReminderRules.circularMedian([7 * 60, 8 * 60, 9 * 60]) == 8 * 60)
        // 45 minutes before midnight is 23:15, kept within the day at 22:00 (the nearer bound).
        #expect(ReminderRules.reminderTime(chosen: nil, checkIns: midnight, quietHours: awake).time == time("22:00"))
        // A median of 04:45: 04:00 is nearer 06:00.
        #expect(ReminderRules.reminderTime(chosen: nil, checkIns: days("04:45", count: 14), quietHours: awake).time == time("06:00"))
    }

    /// A day the reminder prompted counts at the time the reminder aimed at plus the lead: a user
    /// who answers within minutes keeps their time where it was.
    @Test func promptedDaysHoldTheLearnedTime() {
        let natural = days("21:00", count: 14)
        let learned = ReminderRules.reminderTime(chosen: nil, checkIns: natural, quietHours: awake)
        #expect(learned.time == time("20:15"))
        let prompted = (0..<14).map { _ in
            ReminderRules.LearningDay(time: LocalTime(minutes: learned.time.minutes + ReminderRules.learnedLead), prompted: true)
        }
        let after = ReminderRules.reminderTime(chosen: nil, checkIns: prompted, quietHours: awake)
        #expect(after.time == learned.time)
        #expect(after.why.hasSuffix("(14 prompted by the reminder, counted at the time it aimed at)"))
    }

}

struct ReminderMomentTests {
    let paris = try! LocalCalendar(identifier: "Europe/Paris")

    /// Paris leaves summer time on 25 October 2026: 20:00 is 18:00 UTC before, 19:00 UTC on the day.
    @Test func momentsFollowTheUsersClockAcrossADaylightSavingChange() {
        #expect(ReminderRules.next(.every, at: time("20:00"), after: at("2026-10-24T17:30:00Z"), calendar: paris) == at("2026-10-24T18:00:00Z"))
        #expect(ReminderRules.next(.every, at: time("20:00"), after: at("2026-10-24T18:30:00Z"), calendar: paris) == at("2026-10-25T19:00:00Z"))
        // Decided today: tomorrow's, even before today's moment.
        #expect(
            ReminderRules.next(.every, at: time("20:00"), after: at("2026-10-25T10:00:00Z"), notOn: day("2026-10-25"), calendar: paris)
                == at("2026-10-26T19:00:00Z"))
    }

    /// Paris springs forward on 29 March 2026 at 02:00: a reminder time of 02:30 that night comes
    /// at 03:30 summer time, as the clocks do; 20:00 is 19:00 UTC the day before and 18:00 UTC after.
    @Test func aMomentTheClocksSkipComesWhenTheyMoveOn() {
        #expect(ReminderRules.next(.every, at: time("02:30"), after: at("2026-03-28T23:00:00Z"), calendar: paris) == at("2026-03-29T01:30:00Z"))
        #expect(ReminderRules.next(.every, at: time("20:00"), after: at("2026-03-28T19:30:00Z"), calendar: paris) == at("2026-03-29T18:00:00Z"))
    }

    @Test func weeklyAndMonthlyMomentsFallOnTheirDays() {
        #expect(ReminderRules.next(.weekday(3), at: time("18:00"), after: at("2026-11-12T10:00:00Z"), calendar: paris) == at("2026-11-18T17:00:00Z"))
        #expect(ReminderRules.next(.firstOfMonth, at: time("09:00"), after: at("2026-11-12T10:00:00Z"), calendar: paris) == at("2026-12-01T08:00:00Z"))
        #expect(ReminderRules.next(.firstOfMonth, at: time("09:00"), after: at("2026-12-01T07:59:00Z"), calendar: paris) == at("2026-12-01T08:00:00Z"))
    }
}

struct ChallengeMilestoneTests {
    func progress(_ submissions: [(String, Int?, Double?, String)], challenge: FitCircleMembership.Challenge = .steps)
        -> ReminderRules.CircleProgress
    {
        ReminderRules.CircleProgress(
            circleID: UUID(), name: "Work Warriors", challenge: challenge,
            stepsGoal: ReminderRules.CircleProgress.stepsGoal(weekly: 10_000, startsOn: day("2026-11-02"), endsOn: day("2026-11-29")),
            startingWeight: 200, targetWeight: 190,
            submissions: submissions.map { .init(day: day($0.0), steps: $0.1, weight: $0.2, at: at($0.3)) })
    }

    @Test func aStepsCirclesGoalIsItsWeeklyGoalOverTheChallenge() {
        #expect(ReminderRules.CircleProgress.stepsGoal(weekly: 10_000, startsOn: day("2026-11-02"), endsOn: day("2026-11-29")) == 40_000)
        #expect(ReminderRules.CircleProgress.stepsGoal(weekly: nil, startsOn: day("2026-11-02"), endsOn: day("2026-11-29")) == nil)
    }

    @Test func eachMilestoneIsReachedByTheSubmissionThatCrossesIt() {
        let reached = ReminderRules.reached(
            progress([
                ("2026-11-02", 9_000, nil, "2026-11-02T20:00:00Z"),
                ("2026-11-03", 12_000, nil, "2026-11-03T20:00:00Z"),
                ("2026-11-04", nil, nil, "2026-11-04T20:00:00Z"),
            ]))
        #expect(reached == [25: at("2026-11-03T20:00:00Z"), 50: at("2026-11-03T20:00:00Z")])
        let weight = ReminderRules.reached(
            progress(
                [
                    ("2026-11-02", nil, 197, "2026-11-02T08:00:00Z"),
                    ("2026-11-05", nil, 199, "2026-11-05T08:00:00Z"),
                    ("2026-11-09", nil, 192.5, "2026-11-09T08:00:00Z"),
                ], challenge: .weightLoss))
        #expect(weight == [25: at("2026-11-02T08:00:00Z"), 50: at("2026-11-09T08:00:00Z"), 75: at("2026-11-09T08:00:00Z")])
    }

    @Test func aJumpTellsTheHighestByPushAndTheHighestEmailMilestone() {
        let now = at("2026-11-10T09:15:00Z")
        let reached = [25: at("2026-11-03T09:00:00Z"), 50: at("2026-11-10T09:00:00Z"), 75: at("2026-11-10T09:00:00Z")]
        let decision = ReminderRules.milestones(reached: reached, decided: [25], now: now)
        #expect(decision.newlyReached == [50, 75])
        #expect(decision.push == 75)
        #expect(decision.email == 50)
        #expect(ReminderRules.milestones(reached: reached, decided: [25, 50, 75], now: now).newlyReached.isEmpty)
        // Reached more than a day ago (the job was down, or has just been deployed): not told.
        let late = ReminderRules.milestones(reached: reached, decided: [25], now: at("2026-11-11T09:01:00Z"))
        #expect(late.push == nil && late.email == nil && late.tooLate == at("2026-11-10T09:00:00Z"))
    }
}

struct ReminderCopyTests {
    @Test func theFirstWeekSpeaksAsSeed003Flow1Does() {
        let en = ReminderCopy(locale: "en")
        #expect(en.checkin(dayNumber: 0, longestStreak: 0).body == "Complete your check-in to start your streak!")
        #expect(en.checkin(dayNumber: 2, longestStreak: 1).body == "Keep it going! Complete your check-in for a 2-day streak.")
        #expect(en.checkin(dayNumber: 15, longestStreak: 20).body == "Complete your check-in to keep your 14-day streak alive!")
        #expect(en.checkin(dayNumber: 1_001, longestStreak: 1_000).body == "Complete your check-in to keep your 1,000-day streak alive!")
    }

    @Test func aLostStreakIsNeverShamed() {
        let en = ReminderCopy(locale: "en")
        let fr = ReminderCopy(locale: "fr")
        #expect(en.checkin(dayNumber: 2, longestStreak: 9).body == "You're back! Complete your check-in for a 2-day streak.")
        #expect(fr.checkin(dayNumber: 2, longestStreak: 9).body == "Te revoilà ! Fais ton check-in pour une série de 2 jours.")
        let fresh = en.checkin(dayNumber: 0, longestStreak: 9).body
        #expect(fresh == "A fresh start is one check-in away. Complete today's check-in to start a new streak!")
        for word in ["lost", "missed", "failed", "broke"] { #expect(!fresh.lowercased().contains(word)) }
    }

    @Test func numbersAreWrittenAsTheLanguageWritesThem() {
        #expect(ReminderCopy(locale: "en").dataSubmission(steps: 8_234).body == "Submit today's 8,234 steps to your FitCircles before midnight!")
        #expect(ReminderCopy(locale: "fr").dataSubmission(steps: 8_234).body == "Envoie tes 8\u{202F}234 pas du jour à tes FitCircles avant minuit !")
        #expect(ReminderCopy(locale: "en").dataSubmission(steps: nil).body == "Submit today's steps to your FitCircles before midnight!")
        #expect(
            ReminderCopy(locale: "en").weeklyGoal(percent: 35, weekGone: 39).body
                == "The week is 39% gone and you're at 35% of your step goal. You've got this!")
        #expect(
            ReminderCopy(locale: "fr").weeklyGoal(percent: 35, weekGone: 39).body
                == "39\u{00A0}% de la semaine est passée et tu en es à 35\u{00A0}% de ton objectif de pas. Tu peux le faire !")
        #expect(
            ReminderCopy(locale: "en").milestone(50, challenge: .weightLoss, circle: "Work Warriors").body
                == "You're 50% to your weight loss goal in “Work Warriors”.")
        #expect(
            ReminderCopy(locale: "en").streakMilestone(.weekWarrior).body
                == "You did it! 7-day streak complete. Your daily goals are now personalized based on your baseline.")
    }

    /// French takes the singular for 0 and 1 ("1 jour"), everywhere a count meets a noun.
    @Test func aCountAndItsNounAgreeInFrench() {
        let fr = ReminderCopy(locale: "fr")
        #expect(fr.streakRiskEmail(streak: 1).subject == "⚠️ Ta série de 1 jour est en danger !")
        #expect(fr.streakRiskEmail(streak: 1).paragraphs[0] == "Tu as manqué le check-in d'hier. Ta série de 1 jour est en danger !")
        #expect(fr.streakRiskEmail(streak: 12).subject == "⚠️ Ta série de 12 jours est en danger !")
        #expect(StreakMessages.title(.atRisk, streak: 1, locale: "fr") == "🔥 Ta série de 1 jour est en danger")
        #expect(StreakMessages.body(.freezeUsed, streak: 1, locale: "fr").contains("ta série de 1 jour."))
        #expect(StreakMessages.title(.atRisk, streak: 3, locale: "fr") == "🔥 Ta série de 3 jours est en danger")
        let quiet = ReminderRules.Month(first: day("2026-10-01"))
        #expect(fr.monthlyReport(quiet, streak: 1).stats.last?.value == "1 jour")
        #expect(fr.monthlyReport(quiet, streak: 0).stats.last?.value == "0 jour")
        for streak in [0, 1] {
            let texts = [
                fr.streakRiskEmail(streak: streak).subject, StreakMessages.title(.atRisk, streak: streak, locale: "fr"),
                StreakMessages.body(.freezeUsed, streak: streak, locale: "fr"),
            ]
            for text in texts { #expect(!text.contains("\(streak) jours"), "\(text)") }
        }
    }

    /// A month with check-ins and no steps is not "0 steps": the subject names what the user did.
    @Test func theMonthlyReportsSubjectNamesWhatTheUserDid() {
        var checkIns = ReminderRules.Month(first: day("2026-10-01"))
        checkIns.checkInDays = 12
        checkIns.activeDays = 12
        #expect(ReminderCopy(locale: "en").monthlyReport(checkIns, streak: 3).subject == "📅 Your October 2026 report: 12 check-ins")
        #expect(ReminderCopy(locale: "fr").monthlyReport(checkIns, streak: 3).subject == "📅 Ton bilan de octobre 2026 : 12 check-ins")
        checkIns.checkInDays = 1
        #expect(ReminderCopy(locale: "en").monthlyReport(checkIns, streak: 3).subject == "📅 Your October 2026 report: 1 check-in")
        var weighIns = ReminderRules.Month(first: day("2026-10-01"))
        weighIns.activeDays = 1
        #expect(ReminderCopy(locale: "en").monthlyReport(weighIns, streak: 0).subject == "📅 Your October 2026 report: 1 active day")
        #expect(ReminderCopy(locale: "fr").monthlyReport(weighIns, streak: 0).subject == "📅 Ton bilan de octobre 2026 : 1 jour actif")
        var steps = ReminderRules.Month(first: day("2026-10-01"))
        steps.steps = 182_340
        steps.checkInDays = 20
        #expect(ReminderCopy(locale: "en").monthlyReport(steps, streak: 0).subject == "📅 Your October 2026 report: 182,340 steps")
        for month in [checkIns, weighIns] {
            #expect(!ReminderCopy(locale: "en").monthlyReport(month, streak: 0).subject.contains("0 steps"))
        }
    }

    @Test func theMonthlyReportCountsTheMonthBefore() {
        var tracking: [LocalDate: TrackingDay] = [:]
        tracking[day("2026-10-31")] = TrackingDay(date: day("2026-10-31"), mood: nil, energy: nil, steps: 9_000, weight: nil)
        tracking[day("2026-11-01")] = TrackingDay(date: day("2026-11-01"), mood: 3, energy: 3, steps: 4_000, weight: 180)
        tracking[day("2026-11-02")] = TrackingDay(date: day("2026-11-02"), mood: nil, energy: nil, steps: 0, weight: 179.5)
        tracking[day("2026-11-03")] = TrackingDay(date: day("2026-11-03"), mood: 9, energy: 3, steps: 1_000, weight: nil)
        tracking[day("2026-12-01")] = TrackingDay(date: day("2026-12-01"), mood: 3, energy: 3, steps: 7_000, weight: nil)
        let month = ReminderRules.month(day("2026-11-01"), tracking: tracking)
        #expect(month.steps == 4_000 && month.activeDays == 2 && month.checkInDays == 1 && month.weightChange == -0.5)
        #expect(!ReminderRules.month(day("2026-09-01"), tracking: tracking).hadActivity)
    }
}

struct ReminderPreferenceTests {
    /// The check-in reminder and challenge milestones cannot be turned off (docs/jobs/reminders.md,
    /// "The parts"); the optional types obey their switches; every email type but the required ones
    /// obeys its own.
    @Test func requiredTypesIgnoreTheirSwitchAndOptionalOnesObeyIt() {
        var off = DeliveryPreferences()
        off.pushSwitchedOff = ["push_daily_checkin", "push_challenge_milestone", "push_weekly_goal", "push_data_submission"]
        off.emailSwitchedOff = [
            "email_daily_checkin", "email_preferences.streak_at_risk", "email_monthly_report",
            "email_challenge_milestone", "email_preferences.challenge_milestones",
        ]
        #expect(off.pushRefusal(for: .of("daily_checkin")) == nil)
        #expect(off.pushRefusal(for: .of("challenge_milestone")) == nil)
        #expect(off.pushRefusal(for: .of("weekly_goal_progress")) != nil)
        #expect(off.pushRefusal(for: .of("data_submission")) != nil)
        #expect(off.emailRefusal(for: "welcome") == nil)
        #expect(off.emailRefusal(for: "challenge_milestone") == nil)
        #expect(off.emailRefusal(for: "daily_checkin") != nil)
        #expect(off.emailRefusal(for: "streak_at_risk") != nil)
        #expect(off.emailRefusal(for: "monthly_report") != nil)
        // Quiet hours: the required reminder goes through them; the optional ones wait
        // (docs/jobs/reminders.md, "What dispatch does with them").
        #expect(NotificationKind.of("daily_checkin").passesQuietHours)
        #expect(!NotificationKind.of("weekly_goal_progress").passesQuietHours)
        #expect(!NotificationKind.of("streak_milestone").passesQuietHours)
    }
}
