import Foundation
import Logging
import PostgresNIO

/// reminders (docs/jobs/reminders.md): the daily check-in reminder at each
/// user's own time, and the other parts that page lists (`ReminderPart`), each decided at most
/// once per its period from the user's data at its moment, and queued for dispatch.
///
/// It reads only what is due (`DueSource`): each user's next instant for this job is in
/// `job_due`, set by the batch's write to the earliest moment still ahead of any part, and made
/// due at once by triggers when an input changes (a sign-up, a time zone, a reminder time, a
/// device, a submission, a badge). A run at 20:00 in Paris reads the Paris users whose moment has
/// come; one after a gap in cron reads what the gap left due, and sends each part only while it
/// is still inside its local day.
///
/// Each part's decision is marked in `job_work` under `reminders:<part>` on its local day, with
/// the outcome and why (the reminder time used, the check-in that made it unneeded…), in the
/// batch's one transaction with the outbox rows, so a rerun decides nothing twice.
public struct RemindersJob: RegisteredJob {
    public static let jobName = "reminders"

    public typealias Source = DueSource

    public let definition: JobDefinition
    /// The templates, unsubscribe links, postal address and dashboard link its emails carry.
    let email: EmailSetup

    public init(definition: JobDefinition, email: EmailSetup) {
        self.definition = definition
        self.email = email
    }

    /// Built with its email setup (templates, unsubscribe links, the postal address).
    public static func withJob<Result: Sendable>(_ setup: JobSetup, _ body: (any Job) async throws -> Result) async throws -> Result {
        try await body(RemindersJob(definition: setup.definition, email: try EmailSetup(setup.environment, template: ReminderEmail.template)))
    }

    public var source: DueSource { DueSource(job: definition.name) }

    /// The users' rows, their tracking, their circles.
    public var readStatements: Int { 3 }

    /// How many local days of tracking a decision reads: the month before (the report on the
    /// 1st) and the 28 days the reminder time is learned from.
    static let trackingDays = 35

    public struct Facts: Sendable {
        public var name: String?
        public var email: String?
        /// A device a push can reach (`user_push_tokens`, `users.fcm_token`).
        public var hasDevice = false
        /// `notification_preferences.push_enabled`.
        public var pushOn = true
        public var emailOn = true
        /// The optional emails' own switches (both tables), by email type.
        public var emailSwitchedOff: Set<EmailType> = []
        /// The reminder time the user chose (`reminder_time_set_at` set), if they did.
        public var chosenTime: LocalTime?
        /// Their quiet hours (`dnd_start`–`dnd_end`; 22:00–08:00 without a row): a time Nudge
        /// learned lies outside them.
        public var quietHours = QuietHours.standard
        /// The zones the user was in before their current one, each with the instant they left it
        /// (`user_timezone_history`), oldest first; nil where Nudge cannot read the zone.
        public var formerZones: [(calendar: LocalCalendar?, until: Date)] = []
        /// The check-in reminders that reached the user, by the local day they were for: the
        /// instant each aimed at (`deliver_after`) and the one it first reached them at.
        public var reminded: [LocalDate: (aimedAt: Date, reachedAt: Date)] = [:]
        /// Today's check-in push, once queued: whether it reached a device, and, if it ended
        /// without, why (`notification_outbox.last_error`).
        public var todaysPush: PushFate?
        public var tracking: [LocalDate: TrackingDay] = [:]
        public var checkedInAt: [LocalDate: Date] = [:]
        public var streak: ValidateStreaksJob.StoredStreak?
        /// validate-streaks' outcome for yesterday (`job_work`), once it has settled it.
        public var yesterdayOutcome: String?
        public var badges: [StreakBadge: Date] = [:]
        /// The parts decided before, as `part|local day`.
        public var decided: Set<String> = []
        /// This week's steps goal (`weekly_goals`).
        public var weeklyStepsGoal: Int?
        public var circles: [Circle] = []

        public init() {}

        public func isDecided(_ part: ReminderPart, _ day: LocalDate) -> Bool { decided.contains("\(part.rawValue)|\(day)") }
    }

    /// What became of today's check-in push.
    public enum PushFate: Sendable, Equatable {
        /// Still on its way (waiting for its time, a provider, a retry).
        case pending
        /// A device has it.
        case reached
        /// It ended without reaching a device; the reason dispatch gave (`step: why`).
        case ended(String)
    }

    /// A circle the user is in that runs, will run, or ended yesterday.
    public struct Circle: Sendable {
        public let membership: FitCircleMembership
        public let progress: ReminderRules.CircleProgress
        /// The milestones recorded before (`reminder_milestones`).
        public let decidedMilestones: Set<Int>
    }

    public struct Change: Sendable {
        public let expectedDue: Date
        public let nextDue: Date
        /// (circle, percent, outcome) to record in `reminder_milestones`.
        public let milestones: [(UUID, Int, String)]
    }

    // MARK: Reading

    public func loadFacts(for users: [DueUser], run: RunContext, on connection: PostgresConnection) async throws -> [UUID: Facts] {
        let placed = users.filter { $0.problem == nil }
        guard !placed.isEmpty else { return [:] }
        let ids = placed.map(\.user.user.id)
        let todays = placed.map { $0.user.calendar.localDate(at: run.now) }
        let parts = ReminderPart.allCases.map { "\(definition.name):\($0.rawValue)" }
        let rows = try await connection.query(
            """
            select u.id, u.display_name, u.email, coalesce(np.push_enabled, true),
                   (\(unescaped: PushDevices.anyOf("u"))),
                   coalesce(np.email_enabled, true),
                   coalesce(np.email_daily_checkin, true) and coalesce(ep.daily_checkin_reminder, true),
                   coalesce(np.email_streak_risk, true) and coalesce(ep.streak_at_risk, true),
                   coalesce(np.email_monthly_report, true) and coalesce(ep.monthly_report, true),
                   case when np.reminder_time_set_at is not null then to_char(np.daily_reminder_time, 'HH24:MI') end,
                   s.user_id is not null, coalesce(s.current_streak, 0), coalesce(s.longest_streak, 0), s.last_checkin_date,
                   coalesce(s.freeze_used_this_week, false), s.week_start_date, s.settled_through, coalesce(s.missed_days, 0),
                   (select w.outcome from job_work w where w.job = 'validate-streaks' and w.user_id = u.id and w.local_day = r.today - 1),
                   coalesce((select array_agg(b.badge order by b.badge) from user_badges b where b.user_id = u.id), '{}'),
                   coalesce((select array_agg(b.earned_at order by b.badge) from user_badges b where b.user_id = u.id), '{}'),
                   coalesce((select array_agg(substr(w.job, \(Int32(definition.name.count + 2))) || '|' || to_char(w.local_day, 'YYYY-MM-DD'))
                               from job_work w
                              where w.job = any(\(parts)) and w.user_id = u.id and w.local_day >= r.today - \(Int32(Self.trackingDays))), '{}'),
                   (select round(g.target_value)::int8 from weekly_goals g
                     where g.user_id = u.id and g.goal_type = 'steps' and g.week_start = r.today - (extract(isodow from r.today)::int - 1)),
                   coalesce(to_char(np.dnd_start, 'HH24:MI'), '22:00'), coalesce(to_char(np.dnd_end, 'HH24:MI'), '08:00'),
                   coalesce(z.zones, '{}'), coalesce(z.untils, '{}'),
                   coalesce(k.days, '{}'), coalesce(k.aimed, '{}'), coalesce(k.reached, '{}'),
                   p.status, coalesce(p.last_error, ''), p.sent_at is not null or p.delivered_to <> '{}'
              from unnest(\(ids), \(todays)) as r(user_id, today)
              join users u on u.id = r.user_id
              left join notification_preferences np on np.user_id = u.id
              left join email_preferences ep on ep.user_id = u.id
              left join user_streaks s on s.user_id = u.id
              -- The zones left since the learning window began.
              left join lateral (
                  select array_agg(coalesce(h.timezone, '') order by h.valid_until) as zones,
                         array_agg(h.valid_until order by h.valid_until) as untils
                    from user_timezone_history h
                   where h.user_id = u.id and h.valid_until >= r.today - \(Int32(Self.trackingDays + 2))) z on true
              -- The check-in reminders that reached the user in the learning window (idx_outbox_user_type),
              -- for a time to learn: none for a user who chose theirs.
              left join lateral (
                  select array_agg(o.local_day order by o.sent_at) as days, array_agg(o.deliver_after order by o.sent_at) as aimed,
                         array_agg(o.sent_at order by o.sent_at) as reached
                    from notification_outbox o
                   where np.reminder_time_set_at is null
                     and o.user_id = u.id and o.notification_type = 'daily_checkin' and o.job = \(definition.name)
                     and o.deliver_after >= r.today - \(Int32(Self.trackingDays + 2)) and o.sent_at is not null) k on true
              -- Today's check-in push, once queued.
              left join notification_outbox p
                     on p.dedupe_key = \(definition.name) || ':' || u.id || ':' || to_char(r.today, 'YYYY-MM-DD') || ':daily_checkin'
            """, logger: run.logger)
        var facts: [UUID: Facts] = [:]
        for try await (
            id, name, email, pushOn, hasDevice, emailOn, checkinEmail, streakEmail, monthlyEmail, chosen,
            hasStreak, current, longest, lastCheckin, freezeUsed, weekStart, settled, missed, yesterday,
            badgeNames, badgeTimes, decided, weeklyGoal, dndStart, dndEnd, zones, untils,
            remindedDays, aimedAts, reachedAts, pushStatus, pushError, pushReached
        )
            in rows.decode(
                (
                    UUID, String?, String?, Bool, Bool, Bool, Bool, Bool, Bool, String?, Bool, Int, Int, LocalDate?,
                    Bool, LocalDate?, LocalDate?, Int, String?, [String], [Date], [String], Int?, String, String,
                    [String], [Date], [LocalDate], [Date], [Date], String?, String, Bool?
                ).self)
        {
            var fact = Facts()
            fact.name = name
            fact.email = email?.trimmingCharacters(in: .whitespaces)
            fact.pushOn = pushOn
            fact.hasDevice = hasDevice
            fact.emailOn = emailOn
            if !checkinEmail { fact.emailSwitchedOff.insert(.dailyCheckinReminder) }
            if !streakEmail { fact.emailSwitchedOff.insert(.streakAtRisk) }
            if !monthlyEmail { fact.emailSwitchedOff.insert(.monthlyReport) }
            fact.chosenTime = chosen.flatMap { LocalTime($0) }
            if hasStreak {
                fact.streak = ValidateStreaksJob.StoredStreak(
                    state: StreakState(
                        currentStreak: current, longestStreak: longest, lastCheckinDate: lastCheckin,
                        freezeUsedThisWeek: freezeUsed, weekStartDate: weekStart, missedDays: missed),
                    settledThrough: settled)
            }
            fact.yesterdayOutcome = yesterday
            guard badgeNames.count == badgeTimes.count else { throw MalformedData("the user's badges changed while they were read") }
            for (name, time) in zip(badgeNames, badgeTimes) {
                if let badge = StreakBadge(rawValue: name) { fact.badges[badge] = time }
            }
            fact.decided = Set(decided)
            fact.weeklyStepsGoal = weeklyGoal
            fact.quietHours = try QuietHours(reading: dndStart, dndEnd, pauseWeekends: false)
            guard zones.count == untils.count, remindedDays.count == aimedAts.count, aimedAts.count == reachedAts.count
            else { throw MalformedData("the user's zones or reminders changed while they were read") }
            fact.formerZones = zip(zones, untils).map { zone, until in
                ((try? LocalCalendar(identifier: zone.isEmpty ? nil : zone)), until)
            }
            // (Read in the order they reached the user: a day's first one stands.)
            for index in remindedDays.indices where fact.reminded[remindedDays[index]] == nil {
                fact.reminded[remindedDays[index]] = (aimedAts[index], reachedAts[index])
            }
            if let pushStatus {
                fact.todaysPush =
                    if pushReached == true { .reached } else if ["failed", "suppressed", "cancelled"].contains(pushStatus) { .ended(pushError) } else {
                        .pending
                    }
            }
            facts[id] = fact
        }

        let tracking = try await connection.query(
            """
            select t.user_id, t.date, t.mood, t.energy, t.steps, t.weight::float8, t.checked_in_at
              from unnest(\(ids), \(todays.map { $0.adding(days: -Self.trackingDays) }), \(todays)) as r(user_id, first_day, last_day)
              join daily_tracking t on t.user_id = r.user_id and t.date between r.first_day and r.last_day
            """, logger: run.logger)
        for try await (id, date, mood, energy, steps, weight, checkedInAt)
            in tracking.decode((UUID, LocalDate, Int?, Int?, Int?, Double?, Date?).self)
        {
            let day = TrackingDay(date: date, mood: mood, energy: energy, steps: steps, weight: weight)
            facts[id]?.tracking[date] = day
            if day.isCheckedIn, let checkedInAt { facts[id]?.checkedInAt[date] = checkedInAt }
        }

        let calendars = Dictionary(uniqueKeysWithValues: placed.map { ($0.user.user.id, $0.user.calendar) })
        let circles = try await connection.query(
            """
            select m.user_id, c.id, c.name, c.challenge_type, c.starts_on, c.ends_on, c.challenge_step_goal, m.joined_at, m.left_at,
                   m.starting_weight::float8, m.target_weight::float8,
                   coalesce(s.days, '{}'), coalesce(s.steps, '{}'), coalesce(s.weights, '{}'), coalesce(s.ats, '{}'),
                   coalesce((select array_agg(k.percent) from reminder_milestones k
                              where k.user_id = m.user_id and k.fitcircle_id = c.id), '{}')
              from unnest(\(ids), \(todays)) as r(user_id, today)
              join fitcircle_members m on m.user_id = r.user_id
              join fitcircles c on c.id = m.fitcircle_id and c.ends_on >= r.today - 1
              left join lateral (
                  select array_agg(d.submission_date order by d.submitted_at, d.submission_date) as days,
                         array_agg(coalesce(d.steps, -1) order by d.submitted_at, d.submission_date) as steps,
                         array_agg(coalesce(d.weight::float8, -1) order by d.submitted_at, d.submission_date) as weights,
                         array_agg(d.submitted_at order by d.submitted_at, d.submission_date) as ats
                    from fitcircle_data_submissions d
                   where d.fitcircle_id = c.id and d.user_id = m.user_id and d.submission_date between c.starts_on and c.ends_on) s on true
            """, logger: run.logger)
        for try await (
            userID, circleID, name, challenge, startsOn, endsOn, weeklyGoal, joinedAt, leftAt, starting, target,
            days, steps, weights, ats, milestones
        )
            in circles.decode(
                (
                    UUID, UUID, String, String, LocalDate, LocalDate, Int?, Date, Date?, Double?, Double?,
                    [LocalDate], [Int], [Double], [Date], [Int]
                ).self)
        {
            guard let calendar = calendars[userID], let kind = FitCircleMembership.Challenge(rawValue: challenge) else { continue }
            guard days.count == steps.count, steps.count == weights.count, weights.count == ats.count
            else { throw MalformedData("the user's submissions changed while they were read") }
            let membership = FitCircleMembership(
                circleID: circleID, challenge: kind, startsOn: startsOn, endsOn: endsOn, stepGoal: weeklyGoal,
                joinedOn: calendar.localDate(at: joinedAt), leftOn: leftAt.map { calendar.localDate(at: $0) },
                startingWeight: starting, targetWeight: target)
            let submissions = days.indices.map {
                ReminderRules.CircleProgress.Submission(
                    day: days[$0], steps: steps[$0] < 0 ? nil : steps[$0],
                    weight: weights[$0] < 0 ? nil : weights[$0], at: ats[$0])
            }
            let progress = ReminderRules.CircleProgress(
                circleID: circleID, name: name, challenge: kind,
                stepsGoal: ReminderRules.CircleProgress.stepsGoal(weekly: weeklyGoal, startsOn: startsOn, endsOn: endsOn),
                startingWeight: starting, targetWeight: target, submissions: submissions)
            facts[userID]?.circles.append(Circle(membership: membership, progress: progress, decidedMilestones: Set(milestones)))
        }
        return facts
    }

    // MARK: Deciding

    public func decide(for due: DueUser, facts: Facts?, run: RunContext) throws -> Decision<Change> {
        let user = due.user
        let today = user.calendar.localDate(at: run.now)
        // A backfill of past days sends nothing: reminders are about now.
        if let window = run.window, !window.contains(today) {
            return .nothingDue("reminders are about the user's today (\(today)); a backfill of other days sends none")
        }
        if let problem = due.problem {
            // Read by a sweep before its next look: it was skipped with the reason already.
            if !due.changed && due.dueAt > run.now && run.users.isEmpty {
                return .later(
                    PlannedChange(
                        itemID: user.user.id, change: Change(expectedDue: due.dueAt, nextDue: due.dueAt, milestones: []),
                        work: [], notifications: [], tally: [:]),
                    "\(problem); looked at again at \(JobRunner<Self>.timestamp(due.dueAt))")
            }
            return .act(
                PlannedChange(
                    itemID: user.user.id,
                    change: Change(expectedDue: due.dueAt, nextDue: run.now.addingTimeInterval(ReminderRules.zoneRetry), milestones: []),
                    work: [WorkMark(localDay: today, outcome: "skipped", detail: problem, part: ReminderPart.unplaced.rawValue)],
                    notifications: [], tally: ["unplaced:skipped": 1]))
        }
        guard var facts else { throw NudgeError(.configuration, "the user's row is gone") }
        // A streak row that cannot be trusted does not stop the required reminder: its copy
        // speaks as to a user without a streak, and the tally says why.
        var tally: [String: Int] = [:]
        if let stored = facts.streak, let problem = StreakRules.inconsistency(in: stored.state, settledThrough: stored.settledThrough) {
            facts.streak = nil
            tally["streak_ignored: user_streaks row is inconsistent: \(problem)"] = 1
        }
        var plan = ReminderPlan(
            job: self, user: user, facts: facts, now: run.now, startedAt: run.startedAt, due: due,
            byEveryone: run.users.isEmpty)
        plan.dailyCheckin()
        plan.streakRiskEmail()
        plan.weeklyGoal()
        plan.dataSubmission()
        plan.streakMilestone()
        plan.monthlyReport()
        plan.welcome()
        plan.challengeMilestones()
        tally.merge(plan.tally, uniquingKeysWith: +)
        let change = PlannedChange(
            itemID: user.user.id,
            change: Change(expectedDue: due.dueAt, nextDue: plan.nextDue, milestones: plan.milestones),
            work: plan.work, notifications: plan.notifications, tally: tally)
        // Read with nothing to decide (a change made the user due, their moment is later): only
        // their next instant moves, and the run counts them as nothing due.
        if plan.work.isEmpty && plan.notifications.isEmpty && plan.milestones.isEmpty {
            return .later(change, "nothing to decide before \(JobRunner<Self>.timestamp(plan.nextDue))")
        }
        return .act(change)
    }

    // MARK: Writing

    public func writes(for changes: [PlannedChange<Change>], run: RunContext) -> BatchWrites {
        var writes = DueSource.moveWrites(
            job: definition.name, users: changes.map(\.itemID),
            expected: changes.map(\.change.expectedDue), next: changes.map(\.change.nextDue))
        let milestones = changes.flatMap { change in change.change.milestones.map { (change.itemID, $0.0, $0.1, $0.2) } }
        if !milestones.isEmpty {
            writes.step(
                "milestones",
                """
                insert into reminder_milestones (user_id, fitcircle_id, percent, outcome, decided_at)
                select user_id, fitcircle_id, percent, outcome, \(run.now)
                  from unnest(\(milestones.map(\.0)), \(milestones.map(\.1)), \(milestones.map(\.2)), \(milestones.map(\.3)))
                       as m(user_id, fitcircle_id, percent, outcome)
                on conflict (user_id, fitcircle_id, percent) do nothing
                """)
        }
        return writes
    }

    // MARK: Emails

    /// An email's outbox row: rendered now (a dry run renders every one), sent by dispatch.
    func emailMessage(
        _ text: ReminderCopy.EmailText, type: String, emailType: String, footer: ReminderEmail.Footer, user: UserInTime,
        facts: Facts, address: String, day: LocalDate, deliverAfter: Date, occasion: OutboxMessage.Occasion? = nil,
        tags: [String: String] = [:]
    ) -> OutboxMessage {
        let rendered = ReminderEmail.render(
            text, locale: user.user.locale, name: facts.name, email: address, footer: footer,
            dashboardURL: email.dashboardURL, postalAddress: email.postalAddress,
            templates: email.templates)
        var unsubscribe: String?
        if case .unsubscribe(_, let url) = footer { unsubscribe = url }
        let payload = EmailPayload(emailType: emailType, html: rendered.html, unsubscribeURL: unsubscribe, tags: tags)
        return OutboxMessage(
            type: type, localDay: day, deliverAfter: deliverAfter, title: rendered.subject, body: rendered.text,
            payload: payload.json, channel: .email, occasion: occasion)
    }
}
