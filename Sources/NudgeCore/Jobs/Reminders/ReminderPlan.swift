import Foundation

/// One user's reminders at one instant: each part's decision, in the order of the table of
/// docs/jobs/reminders.md ("The parts"), with the work marks, outbox rows and milestone records it
/// implies, and the user's next instant (the earliest moment of a part still ahead). Pure: the same
/// facts and clock give the same plan.
struct ReminderPlan {
    let job: RemindersJob
    let user: UserInTime
    let facts: RemindersJob.Facts
    let now: Date
    let calendar: LocalCalendar
    let today: LocalDate
    let copy: ReminderCopy
    /// The earliest moment still caught up now (`ReminderRules.catchUpBefore`).
    let earliest: Date

    private(set) var work: [WorkMark] = []
    private(set) var notifications: [OutboxMessage] = []
    private(set) var tally: [String: Int] = [:]
    private(set) var milestones: [(UUID, Int, String)] = []
    /// The earliest instant a part is due again (a day ahead at most without one).
    private(set) var nextDue: Date

    init(
        job: RemindersJob, user: UserInTime, facts: RemindersJob.Facts, now: Date, startedAt: Date, due: DueUser,
        byEveryone: Bool = false
    ) {
        self.job = job
        self.user = user
        self.facts = facts
        self.now = now
        calendar = user.calendar
        today = calendar.localDate(at: now)
        copy = ReminderCopy(locale: user.user.locale)
        nextDue = now.addingTimeInterval(24 * 3600)
        // Read at the instant the job had set (a missed tick, an outage, `--user`): every moment of
        // the user's today is caught up. Made due by a change: the moments from a little before the
        // instant the job had set are caught up, not the older ones the change brought into the
        // past; without such an instant (a new user, one there before the job), the moments of
        // the quarter hour before the run.
        // Read before its instant by a sweep of everyone (`byEveryone`, not `--user`): as a user
        // the job had set no instant for, since a moment the catch-up rule held back is no miss.
        if !due.changed && !(byEveryone && due.dueAt > now) {
            earliest = calendar.start(of: today)
        } else if !due.changed {
            earliest = startedAt.addingTimeInterval(-ReminderRules.catchUpUnplanned)
        } else if let planned = due.plannedAt {
            earliest = planned.addingTimeInterval(-ReminderRules.catchUpBefore)
        } else {
            earliest = startedAt.addingTimeInterval(-ReminderRules.catchUpUnplanned)
        }
    }

    var userID: UUID { user.user.id }
    var canPush: Bool { facts.pushOn && facts.hasDevice }

    /// Why no push can reach the user, or nil.
    var pushRefusal: String? {
        if !facts.pushOn { return "push notifications are off (notification_preferences.push_enabled)" }
        if !facts.hasDevice { return "no active device (user_push_tokens, users.fcm_token)" }
        return nil
    }

    /// The user's address, once `emailRefusal` found it usable.
    var address: String { facts.email ?? "" }

    /// Why an email of `type` (nil: a required one) cannot go to `address`, or nil.
    func emailRefusal(_ type: EmailType?) -> String? {
        if !facts.emailOn { return "emails are off (notification_preferences.email_enabled)" }
        if let type, facts.emailSwitchedOff.contains(type) { return "\(type.rawValue) emails are off" }
        guard let address = facts.email, !address.isEmpty else { return "the user has no email address (users.email)" }
        guard isDeliverableAddress(address) else { return "users.email is not an address Nudge can send to" }
        return nil
    }

    private mutating func mark(_ part: ReminderPart, _ day: LocalDate, _ outcome: String, _ detail: String? = nil) {
        work.append(WorkMark(localDay: day, outcome: outcome, detail: detail, part: part.rawValue))
        tally["\(part.rawValue):\(outcome)", default: 0] += 1
    }

    private mutating func dueAgain(at instant: Date) {
        nextDue = min(nextDue, instant)
    }

    /// Today's moment of a part at `time`, when it has come (or is in the last quarter hour of
    /// the day and that close), is still caught up (`earliest`) and the part is not decided for
    /// today; and, either way, its next moment as the user's next instant.
    private mutating func todaysMoment(
        _ part: ReminderPart, _ days: ReminderRules.Days, at time: LocalTime,
        caughtUpFrom: Date? = nil
    ) -> Date? {
        let decided = facts.isDecided(part, today)
        let moment = calendar.instant(of: today, at: time)
        let reached =
            moment <= now
            || (moment.timeIntervalSince(now) <= ReminderRules.lateMomentLead
                && calendar.end(of: today).timeIntervalSince(moment) < ReminderRules.lateMomentLead)
        let due = days.contains(today) && reached && !decided && moment >= (caughtUpFrom ?? earliest)
        let next = ReminderRules.next(days, at: time, after: now, notOn: reached || decided ? today : nil, calendar: calendar)
        // A moment in the last quarter hour of its day is met by the run a quarter hour before it.
        let lastQuarter = calendar.end(of: calendar.localDate(at: next)).timeIntervalSince(next) < ReminderRules.lateMomentLead
        dueAgain(at: lastQuarter ? next.addingTimeInterval(-ReminderRules.lateMomentLead) : next)
        return due ? moment : nil
    }

    private func push(
        _ type: String, _ text: (title: String, body: String), day: LocalDate, at instant: Date, deepLink: String,
        extra: String = "", occasion: OutboxMessage.Occasion? = nil
    ) -> OutboxMessage {
        OutboxMessage(
            type: type, localDay: day, deliverAfter: instant, title: text.title, body: text.body,
            payload: #"{"type":"\#(type)","deep_link":"\#(deepLink)"\#(extra)}"#, occasion: occasion)
    }

    /// The check-in days of the 28 local days before today, each at the local time it was made in
    /// the zone the user was in then; a check-in made within the hour after that day's reminder
    /// reached the user (which the reminder may have prompted) no earlier than the time the
    /// reminder aimed at plus the lead (`ReminderRules.LearningDay`). A check-in made in a zone
    /// Nudge cannot read is left out.
    var learningDays: [ReminderRules.LearningDay] {
        facts.checkedInAt.filter { $0.key < today && $0.key >= today.adding(days: -ReminderRules.learningWindowDays) }
            .sorted { $0.key < $1.key }
            .compactMap { day, checkedInAt in
                if let reminder = facts.reminded[day], checkedInAt >= reminder.reachedAt,
                    checkedInAt.timeIntervalSince(reminder.reachedAt) <= ReminderRules.promptedWithin
                {
                    // No earlier than the time the reminder aimed at: a later one is the user's own.
                    let held = max(checkedInAt, reminder.aimedAt.addingTimeInterval(TimeInterval(ReminderRules.learnedLead * 60)))
                    return zone(at: held).map { ReminderRules.LearningDay(time: $0.localTime(at: held), prompted: held > checkedInAt) }
                }
                return zone(at: checkedInAt).map { ReminderRules.LearningDay(time: $0.localTime(at: checkedInAt)) }
            }
    }

    /// The calendar of the zone the user was in at `instant`: the first zone they left after it,
    /// or the one they are in now; nil when that zone is one Nudge cannot read.
    func zone(at instant: Date) -> LocalCalendar? {
        guard let former = facts.formerZones.first(where: { $0.until > instant }) else { return calendar }
        return former.calendar
    }

    /// Today's day of the streak (`StreakRules.dayNumber`).
    var dayNumber: Int {
        let checkIns = Set(facts.tracking.filter { $0.value.isCheckedIn && $0.key >= today.adding(days: -StreakRules.checkInsRead) }.keys)
        return StreakRules.dayNumber(
            today: today, stored: facts.streak?.state, settledThrough: facts.streak?.settledThrough,
            checkIns: checkIns)
    }

    // MARK: The parts

    /// At the reminder time, without a check-in today: a push; with no push to reach the user,
    /// the email at 21:00 (or at their time, if later), which also follows a push that ended
    /// without reaching a device.
    mutating func dailyCheckin() {
        let reminder = ReminderRules.reminderTime(chosen: facts.chosenTime, checkIns: learningDays, quietHours: facts.quietHours)
        let emailTime = max(ReminderRules.checkinEmailTime, reminder.time)
        let time = canPush ? reminder.time : emailTime
        if facts.isDecided(.dailyCheckin, today) { checkinEmailAfterPush(at: emailTime, reminder: reminder) }
        guard let moment = todaysMoment(.dailyCheckin, .every, at: time) else { return }
        // A user who signed up after today's moment starts tomorrow.
        guard moment >= user.user.createdAt else { return }
        // (A check-in counts once it is made: a row the app wrote ahead, stamped later, does not.)
        if facts.tracking[today]?.isCheckedIn == true, facts.checkedInAt[today].map({ $0 <= now }) ?? true {
            let at = facts.checkedInAt[today].map { " at \(calendar.localTime(at: $0))" } ?? ""
            mark(.dailyCheckin, today, "not_needed", "checked in\(at) before the reminder (\(reminder.why))")
            return
        }
        let day = dayNumber
        let longest = facts.streak?.state.longestStreak ?? 0
        if canPush {
            // (The payload says where the time came from: quiet hours hold a learned one.)
            notifications.append(
                push(
                    "daily_checkin", copy.checkin(dayNumber: day, longestStreak: longest), day: today, at: moment,
                    deepLink: "fitcircle://checkin",
                    extra: #","streak_day":\#(day),"reminder_time":"\#(reminder.source.rawValue)""#))
            mark(.dailyCheckin, today, "push", reminder.why)
            return
        }
        if let refusal = emailRefusal(.dailyCheckinReminder) {
            mark(.dailyCheckin, today, "no_channel", "push: \(pushRefusal ?? "-"); email: \(refusal)")
            return
        }
        queueCheckinEmail(at: moment)
        mark(.dailyCheckin, today, "email", "\(time) instead of the push: \(pushRefusal ?? "-"); \(reminder.why)")
    }

    /// Today's push ended without reaching a device (refused for a preference, no device left,
    /// every device refused it, past its shelf life): the email at 21:00 (or at the reminder time,
    /// if later), as for a user no push can reach, once its moment has come and while today lasts.
    /// Not after a push the caps held (a reminder reached the user today) or one the check-in made
    /// pointless. Dispatch's update of the push makes the user due (migration 0020).
    private mutating func checkinEmailAfterPush(at time: LocalTime, reminder: ReminderRules.ReminderTime) {
        // (Not after one given up while its dispatcher was sending: it may have reached a device.)
        guard case .ended(let why)? = facts.todaysPush, !why.hasPrefix("caps:"),
            !why.hasPrefix(DispatchRules.answeredStep + ":"), !why.hasPrefix(DispatchRules.gaveUpPrefix)
        else { return }
        // Owed since the push ended, whenever that was today: caught up from the day's start.
        guard let moment = todaysMoment(.checkinEmailAfterPush, .every, at: time, caughtUpFrom: calendar.start(of: today))
        else { return }
        if facts.tracking[today]?.isCheckedIn == true, facts.checkedInAt[today].map({ $0 <= now }) ?? true {
            mark(.checkinEmailAfterPush, today, "not_needed", "checked in before the email, after a push that reached no device")
            return
        }
        if let refusal = emailRefusal(.dailyCheckinReminder) {
            mark(.checkinEmailAfterPush, today, "no_channel", "the push reached no device (\(why)); email: \(refusal)")
            return
        }
        queueCheckinEmail(at: moment)
        mark(.checkinEmailAfterPush, today, "email", "\(time) after the push reached no device (\(why)); \(reminder.why)")
    }

    /// Today's check-in reminder by email, to go at `moment`, with its one-click unsubscribe.
    private mutating func queueCheckinEmail(at moment: Date) {
        let text = copy.checkinEmail(dayNumber: dayNumber, longestStreak: facts.streak?.state.longestStreak ?? 0)
        notifications.append(
            job.emailMessage(
                text, type: "daily_checkin", emailType: EmailType.dailyCheckinReminder.rawValue,
                footer: .unsubscribe(
                    type: .dailyCheckinReminder,
                    url: job.email.links.url(user: userID, type: .dailyCheckinReminder)),
                user: user, facts: facts, address: address, day: today, deliverAfter: moment))
    }

    /// When validate-streaks found yesterday a miss without a freeze (its push goes at 09:00):
    /// the email beside it, queued for 09:00, "as the push". Met when validate-streaks settles
    /// the day (its write makes the user due), or at any read that day.
    mutating func streakRiskEmail() {
        let yesterday = today.adding(days: -1)
        guard facts.yesterdayOutcome == DayOutcome.atRisk.rawValue, !facts.isDecided(.streakRiskEmail, today) else { return }
        // (Late only when validate-streaks was: its push goes then too.)
        let at = max(calendar.instant(of: today, at: ReminderRules.morning), now)
        if let refusal = emailRefusal(.streakAtRisk) {
            mark(.streakRiskEmail, today, "no_channel", refusal)
            return
        }
        let streak = facts.streak?.state.currentStreak ?? 0
        notifications.append(
            job.emailMessage(
                copy.streakRiskEmail(streak: streak), type: "streak_at_risk",
                emailType: EmailType.streakAtRisk.rawValue,
                footer: .unsubscribe(type: .streakAtRisk, url: job.email.links.url(user: userID, type: .streakAtRisk)),
                user: user, facts: facts, address: address, day: today, deliverAfter: at))
        mark(.streakRiskEmail, today, "email", "\(streak)-day streak at risk after a miss on \(yesterday)")
    }

    /// Wednesday 18:00, behind the share of the week's steps goal the week has used by then (39 %
    /// of it, Monday 00:00 to Wednesday 18:00); nothing for a user with no steps this week.
    mutating func weeklyGoal() {
        guard let moment = todaysMoment(.weeklyGoal, .weekday(3), at: ReminderRules.weeklyGoalTime) else { return }
        guard let goal = facts.weeklyStepsGoal, goal > 0 else {
            mark(.weeklyGoal, today, "no_goal", "no steps goal for the week of \(today.monday)")
            return
        }
        let week = (0...today.days(since: today.monday)).compactMap { facts.tracking[today.monday.adding(days: $0)] }
            .filter { $0.impossibility == nil }
        let steps = week.reduce(0) { $0 + max(0, $1.steps ?? 0) }
        // Without a step this week, Nudge has nothing true to say about the pace.
        guard steps > 0 else {
            mark(.weeklyGoal, today, "no_steps", "no steps recorded this week (since \(today.monday))")
            return
        }
        let elapsed = ReminderRules.weekElapsed(at: moment, calendar: calendar)
        let percent = steps * 100 / goal
        let pace = Int((elapsed * 100).rounded())
        let progress = "\(percent)% of \(goal) steps with \(pace)% of the week gone"
        guard Double(steps) < Double(goal) * elapsed else {
            mark(.weeklyGoal, today, "not_needed", "on pace: \(progress)")
            return
        }
        guard canPush else {
            mark(.weeklyGoal, today, "no_channel", pushRefusal)
            return
        }
        notifications.append(
            push(
                "weekly_goal_progress", copy.weeklyGoal(percent: percent, weekGone: pace), day: today, at: moment,
                deepLink: "fitcircle://goals",
                extra: #","percent":\#(percent),"pace":\#(pace),"steps":\#(steps),"goal":\#(goal)"#))
        mark(.weeklyGoal, today, "push", "behind: \(progress)")
    }

    /// 20:00, in a running circle, nothing submitted today.
    mutating func dataSubmission() {
        let circles = facts.circles.filter { $0.membership.leftOn == nil && $0.membership.endsOn >= today }
        guard !circles.isEmpty else { return }
        let running = circles.filter { $0.membership.isActive(on: today) }
        guard !running.isEmpty, let moment = todaysMoment(.dataSubmission, .every, at: ReminderRules.submissionTime) else {
            // A circle that starts later: its first 20:00 is looked at then.
            dueAgain(at: ReminderRules.next(.every, at: ReminderRules.submissionTime, after: now, calendar: calendar))
            return
        }
        if running.contains(where: { $0.progress.submissions.contains { $0.day == today } }) {
            mark(.dataSubmission, today, "not_needed", "submitted today")
            return
        }
        guard canPush else {
            mark(.dataSubmission, today, "no_channel", pushRefusal)
            return
        }
        let row = facts.tracking[today]
        let steps = row?.impossibility == nil ? row?.steps : nil
        let weightOnly = running.allSatisfy { $0.membership.challenge == .weightLoss }
        notifications.append(
            push(
                "data_submission", weightOnly ? copy.weightSubmission : copy.dataSubmission(steps: steps), day: today,
                at: moment, deepLink: "fitcircle://submit",
                extra: weightOnly ? "" : steps.map { #","steps":\#($0)"# } ?? ""))
        mark(.dataSubmission, today, "push", "\(running.count) running circle(s), nothing submitted today")
    }

    /// 09:00 on the day validate-streaks granted a 7/30/100-day badge (the morning after the day
    /// that earned it): queued at once, for then.
    mutating func streakMilestone() {
        for (badge, earnedAt) in facts.badges.sorted(by: { $0.value < $1.value }) where calendar.localDate(at: earnedAt) == today {
            guard !facts.isDecided(.streakMilestone, today) else { return }
            guard canPush else {
                mark(.streakMilestone, today, "no_channel", "\(badge.rawValue): \(pushRefusal ?? "-")")
                return
            }
            let at = max(calendar.instant(of: today, at: ReminderRules.morning), earnedAt)
            notifications.append(
                push(
                    "streak_milestone", copy.streakMilestone(badge), day: today, at: at, deepLink: "fitcircle://streak",
                    extra: #","badge":"\#(badge.rawValue)","streak":\#(badge.days)"#, occasion: .alone(badge.rawValue)))
            mark(.streakMilestone, today, "push", "\(badge.rawValue) (\(badge.days)-day streak)")
        }
    }

    /// The 1st, 09:00, when the month before had any activity.
    mutating func monthlyReport() {
        guard let moment = todaysMoment(.monthlyReport, .firstOfMonth, at: ReminderRules.morning) else { return }
        let (year, month, _) = today.components
        let first = month == 1 ? LocalDate(year: year - 1, month: 12, day: 1)! : LocalDate(year: year, month: month - 1, day: 1)!
        if calendar.localDate(at: user.user.createdAt) >= today { return }
        let summary = ReminderRules.month(first, tracking: facts.tracking)
        guard summary.hadActivity else {
            mark(.monthlyReport, today, "quiet_month", "no activity in the month of \(first)")
            return
        }
        if let refusal = emailRefusal(.monthlyReport) {
            mark(.monthlyReport, today, "no_channel", refusal)
            return
        }
        let streak = facts.streak?.state.currentStreak ?? 0
        notifications.append(
            job.emailMessage(
                copy.monthlyReport(summary, streak: streak), type: "monthly_report",
                emailType: EmailType.monthlyReport.rawValue,
                footer: .unsubscribe(type: .monthlyReport, url: job.email.links.url(user: userID, type: .monthlyReport)),
                user: user, facts: facts, address: address, day: today, deliverAfter: moment,
                tags: ["month": first.description]))
        mark(.monthlyReport, today, "email", "\(summary.steps) steps, \(summary.activeDays) active days in the month of \(first)")
    }

    /// Once, within its window after sign-up.
    mutating func welcome() {
        let signedUp = user.user.createdAt
        let day = calendar.localDate(at: signedUp)
        guard !facts.isDecided(.welcome, day), now < signedUp.addingTimeInterval(ReminderRules.welcomeWindow) else { return }
        // A sign-up stamped ahead of the run's clock is welcomed when its time comes.
        guard now >= signedUp else {
            dueAgain(at: signedUp)
            return
        }
        // Without an address (yet: the app may write it a minute later, which makes the user due),
        // nothing is decided; the email master switch off is a decision.
        if let refusal = emailRefusal(nil) {
            if facts.emailOn { tally["welcome:waiting_for_address", default: 0] += 1 } else { mark(.welcome, day, "no_channel", refusal) }
            return
        }
        notifications.append(
            job.emailMessage(
                copy.welcome, type: "welcome", emailType: "welcome", footer: .required(.welcome), user: user,
                facts: facts, address: address, day: day, deliverAfter: now, occasion: .alone("welcome")))
        mark(.welcome, day, "email", "signed up at \(signedUp.formatted(.iso8601))")
    }

    /// Each circle's milestones reached by the user's submissions and not told before.
    mutating func challengeMilestones() {
        var told: [String] = []
        for circle in facts.circles {
            let progress = circle.progress
            let decision = ReminderRules.milestones(reached: ReminderRules.reached(progress), decided: circle.decidedMilestones, now: now)
            guard !decision.newlyReached.isEmpty else { continue }
            let id = progress.circleID
            // For the ledger (`nudge runs`): what a terminal would not show, or would obey, left out.
            let name = String(CopyChecks.withoutHidden(progress.name).prefix(60))
            if let late = decision.tooLate {
                for percent in decision.newlyReached {
                    milestones.append((id, percent, "missed: reached at \(late.formatted(.iso8601)), more than 24 h ago"))
                }
                told.append("\(name) \(decision.newlyReached.last!)% reached too long ago")
                continue
            }
            var channels: [Int: [String]] = [:]
            if let percent = decision.push {
                if canPush {
                    notifications.append(
                        push(
                            "challenge_milestone", copy.milestone(percent, challenge: progress.challenge, circle: name),
                            day: today, at: now, deepLink: "fitcircle://circles/\(id.uuidString.lowercased())",
                            extra: #","fitcircle_id":"\#(id.uuidString.lowercased())","percent":\#(percent)"#,
                            occasion: .alone("\(id.uuidString.lowercased()):\(percent)")))
                    channels[percent, default: []].append("push")
                } else {
                    channels[percent, default: []].append("no push: \(pushRefusal ?? "-")")
                }
            }
            if let percent = decision.email {
                if emailRefusal(nil) == nil {
                    let text = copy.milestoneEmail(percent, challenge: progress.challenge, circle: name)
                    notifications.append(
                        job.emailMessage(
                            text, type: "challenge_milestone", emailType: "challenge_milestone",
                            footer: .required(.milestone), user: user, facts: facts, address: address,
                            day: today, deliverAfter: now, occasion: .alone("\(id.uuidString.lowercased()):\(percent)"),
                            tags: ["fitcircle_id": id.uuidString.lowercased(), "percent": String(percent)]))
                    channels[percent, default: []].append("email")
                } else {
                    channels[percent, default: []].append("no email: \(emailRefusal(nil)!)")
                }
            }
            let highest = decision.newlyReached.last!
            for percent in decision.newlyReached {
                milestones.append((id, percent, channels[percent].map { "told: " + $0.joined(separator: ", ") } ?? "covered by \(highest)%"))
            }
            told.append("\(name) \(highest)%")
        }
        if !told.isEmpty {
            mark(.challengeMilestone, today, "decided", told.joined(separator: "; "))
        }
    }
}
