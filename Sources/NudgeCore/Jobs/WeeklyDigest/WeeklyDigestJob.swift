import Foundation
import Logging
import PostgresNIO

/// weekly-digest (docs/jobs/weekly-digest.md): at Sunday 20:00 in each user's time
/// zone (the definition's `localTime`, for `dueForMinutes` after it), once per user and week, it
/// tells the week Monday to Sunday (`WeeklyDigestRules`) and queues a push and an email, each
/// where the user's preferences allow (`DigestChannels`). The email is rendered here, from the
/// templates of `templates/email/`, so that a dry run renders every one; dispatch sends it
/// through Resend. Each week digested is marked in `job_work` under its Sunday, in the batch's
/// one transaction with the outbox rows, so a rerun queues nothing twice.
///
/// Next week's steps goal is the one the digest tells: it sets it (`weekly_goals`, unless one is
/// set already) in the same transaction, and generate-daily-goals keeps a goal that is set, so
/// Monday's goal is the digest's however late Sunday's steps sync. A week the user was signed up
/// for less than 3 days gets no digest; after 4 quiet weeks in a row a quiet week gets none
/// either (`resting`), until the user is active again.
///
/// A backfill (`--date`, `--from/--to`) digests the weeks whose Sunday lies in its window and
/// that have not been digested, however late.
///
/// It reads only the users whose Sunday 20:00 has come (`DueSource`): the batch's write moves each
/// one's instant to their next Sunday 20:00, and triggers make a user due at once when their
/// time zone or sign-up changes. A backfill reads every user.
public struct WeeklyDigestJob: RegisteredJob {
    public static let jobName = "weekly-digest"

    public typealias Source = DueSource

    public let definition: JobDefinition
    /// The templates, unsubscribe links, postal address and dashboard link its emails carry.
    let email: EmailSetup

    public static let type = "weekly_digest"
    static let deepLink = "fitcircle://digest"
    /// How many days the facts reach back before a week's Monday: the weeks "best week yet" is
    /// measured against.
    static let lookBackDays = 7 * WeeklyDigestRules.comparedWeeks

    public init(definition: JobDefinition, email: EmailSetup) {
        self.definition = definition
        self.email = email
    }

    /// Built with its email setup (templates, unsubscribe links, the postal address).
    public static func withJob<Result: Sendable>(_ setup: JobSetup, _ body: (any Job) async throws -> Result) async throws -> Result {
        try await body(WeeklyDigestJob(definition: setup.definition, email: try EmailSetup(setup.environment, template: DigestEmail.template)))
    }

    public struct Facts: Sendable {
        /// The Sundays already digested, of those the run looks at.
        public let digested: Set<LocalDate>
        public let name: String?
        public let email: String?
        public let preferences: DigestPreferences
        public let hasDevice: Bool
        public let streak: (current: Int, through: LocalDate?)?
        /// By week (its Monday), with the circle that set it: the weeks told and the week after each.
        public let weeklyStepsGoals: [LocalDate: (target: Int, circleID: UUID?)]
        public let dailyStepsGoals: [LocalDate: Int]
        public let ranks: [LocalDate: [WeekInReview.CircleRank]]
        public let tracking: [LocalDate: TrackingDay]
        public let memberships: [FitCircleMembership]
    }

    /// One week's digest, as queued.
    public struct Digest: Sendable {
        public let sunday: LocalDate
        public let week: WeekInReview
        public let email: RenderedEmail?
        /// Next week's steps goal as told, to set (nil: nothing was told, or it was set already).
        public let setsNextGoal: (target: Int, circleID: UUID?)?
    }

    /// One user's decision: the weeks digested, and when the user is next due.
    public struct Change: Sendable {
        public let digests: [Digest]
        /// The user's instant in the due index as read, and the next one.
        public let dueAt: Date
        public let nextDue: Date
    }

    public var source: DueSource { DueSource(job: definition.name, backfillReadsEveryone: true) }

    /// The users' rows, their tracking, their circles.
    public var readStatements: Int { 3 }

    var moment: LocalTime { definition.localTime ?? LocalTime(hour: 20, minute: 0)! }

    // MARK: Which weeks are due

    /// The last Sunday whose 20:00 (`moment`) has come in the user's zone at `instant`.
    func latestSunday(for user: UserInTime, at instant: Date) -> LocalDate {
        let reached = user.calendar.latestDay(reaching: moment, atOrBefore: instant)
        return reached.adding(days: -(reached.isoWeekday % 7))
    }

    /// When the user is next due after a decision at `run.now`: the Sunday 20:00 after the last
    /// one that has come (whatever was decided for it: digested, too soon after sign-up, or too
    /// late). A backfill leaves the instant as it was read: the week the index waits for is the
    /// next normal run's.
    func nextDue(for due: DueUser, run: RunContext) -> Date {
        if run.window != nil { return due.dueAt }
        return due.user.calendar.instant(of: latestSunday(for: due.user, at: run.now).adding(days: 7), at: moment)
    }

    /// The Sundays whose digest is due for `user` at the run's clock, oldest first, or why none is.
    func dueSundays(for user: UserInTime, run: RunContext) -> Result<[LocalDate], Reason> {
        let calendar = user.calendar
        let latest = latestSunday(for: user, at: run.now)
        // A week the user was signed up for less than 3 days before its digest has none.
        let signedUp = user.user.createdAt.addingTimeInterval(WeeklyDigestRules.signedUpAtLeast)
        if let window = run.window {
            var sundays: [LocalDate] = []
            var day = window.from.adding(days: (7 - window.from.isoWeekday) % 7)
            while day <= window.to && day <= latest {
                if calendar.instant(of: day, at: moment) >= signedUp { sundays.append(day) }
                day = day.adding(days: 7)
            }
            if sundays.isEmpty {
                return .failure(Reason("no Sunday of \(window.from)…\(window.to) has reached \(moment) local time 3 days after sign-up"))
            }
            return .success(sundays)
        }
        let dueAt = calendar.instant(of: latest, at: moment)
        guard dueAt >= signedUp else {
            return .failure(Reason("signed up less than 3 days before Sunday \(latest) \(moment): no digest for that week"))
        }
        if let minutes = definition.dueForMinutes, run.now >= dueAt.addingTimeInterval(Double(minutes) * 60) {
            return .failure(
                Reason(
                    """
                    the digest of the week ending \(latest) was due at \(moment) local time and is more than \(minutes / 60) hours \
                    late; backfill it with --date \(latest)
                    """))
        }
        return .success([latest])
    }

    public struct Reason: Error, Sendable {
        public let text: String
        init(_ text: String) { self.text = text }
    }

    // MARK: Reading

    public func loadFacts(for due: [DueUser], run: RunContext, on connection: PostgresConnection) async throws -> [UUID: Facts] {
        var ranges: [(user: UUID, first: LocalDate, last: LocalDate)] = []
        var calendars: [UUID: LocalCalendar] = [:]
        var dueWeeks: [UUID: [LocalDate]] = [:]
        for user in due.filter({ $0.problem == nil }).map(\.user) {
            guard case .success(let sundays) = dueSundays(for: user, run: run), let first = sundays.first, let last = sundays.last
            else { continue }
            ranges.append((user.user.id, first, last))
            dueWeeks[user.user.id] = sundays
        }
        guard !ranges.isEmpty else { return [:] }
        let rows = try await connection.query(
            """
            select u.id, u.display_name, u.email,
                   coalesce(np.push_enabled, true), coalesce(np.push_weekly_digest, true),
                   coalesce(np.email_enabled, true), coalesce(np.email_weekly_digest, true), coalesce(ep.weekly_digest, true),
                   (\(unescaped: PushDevices.anyOf("u"))),
                   s.user_id is not null, coalesce(s.current_streak, 0), s.settled_through,
                   coalesce((select array_agg(w.local_day) from job_work w
                              where w.job = \(definition.name) and w.user_id = u.id
                                and w.local_day between r.first_sunday and r.last_sunday), '{}'),
                   coalesce(wg.mondays, '{}'), coalesce(wg.targets, '{}'), coalesce(wg.circles, '{}'),
                   coalesce(dg.days, '{}'), coalesce(dg.targets, '{}'),
                   coalesce(lb.mondays, '{}'), coalesce(lb.circles, '{}'), coalesce(lb.ranks, '{}')
              from unnest(\(ranges.map(\.user)), \(ranges.map(\.first)), \(ranges.map(\.last)),
                          \(ranges.map { $0.first.adding(days: -6 - Self.lookBackDays) }))
                   as r(user_id, first_sunday, last_sunday, first_day)
              join users u on u.id = r.user_id
              left join notification_preferences np on np.user_id = u.id
              left join email_preferences ep on ep.user_id = u.id
              left join user_streaks s on s.user_id = u.id
              left join lateral (
                  select array_agg(g.week_start) as mondays, array_agg(round(g.target_value)::int8) as targets,
                         array_agg(coalesce(g.fitcircle_id::text, '')) as circles
                    from weekly_goals g
                   where g.user_id = u.id and g.goal_type = 'steps' and g.target_value is not null
                     and g.week_start between r.first_sunday - 6 and r.last_sunday + 1) wg on true
              left join lateral (
                  select array_agg(g.date) as days, array_agg(round(g.target_value)::int8) as targets
                    from daily_goals g
                   where g.user_id = u.id and g.goal_type = 'steps' and g.target_value is not null
                     and g.date between r.first_day and r.last_sunday) dg on true
              left join lateral (
                  select array_agg(e.period_start order by e.rank, c.name) as mondays, array_agg(c.name order by e.rank, c.name) as circles,
                         array_agg(e.rank order by e.rank, c.name) as ranks
                    from fitcircle_leaderboard_entries e join fitcircles c on c.id = e.fitcircle_id
                   where e.user_id = u.id and e.period = 'weekly' and e.rank is not null
                     and e.period_start between r.first_sunday - 6 and r.last_sunday - 6
                     -- Only a place held with a value of the week itself (docs/jobs/weekly-digest.md): a
                     -- board an earlier version stored, final and never computed again, may rank 0
                     -- steps, or a weight from before the week.
                     and case when c.challenge_type = 'steps' then e.metric_value > 0
                              else exists (select 1 from fitcircle_data_submissions s
                                            where s.fitcircle_id = e.fitcircle_id and s.user_id = e.user_id
                                              and s.weight is not null
                                              and s.submission_date between greatest(e.period_start, c.starts_on)
                                                                        and least(e.period_start + 6, c.ends_on)) end) lb on true
            """, logger: run.logger)
        struct Row {
            let name: String?, email: String?, preferences: DigestPreferences, hasDevice: Bool
            let streak: (current: Int, through: LocalDate?)?, digested: Set<LocalDate>
            let weekly: [LocalDate: (target: Int, circleID: UUID?)], daily: [LocalDate: Int]
            let ranks: [LocalDate: [WeekInReview.CircleRank]]
        }
        var read: [UUID: Row] = [:]
        for try await (
            id, name, email, pushEnabled, pushDigest, emailEnabled, emailDigest, emailPreference, hasDevice,
            hasStreak, current, settled, digested, weekMondays, weekTargets, weekCircles, goalDays, goalTargets,
            rankMondays, rankCircles, ranks
        )
            in rows.decode(
                (
                    UUID, String?, String?, Bool, Bool, Bool, Bool, Bool, Bool, Bool, Int, LocalDate?, [LocalDate],
                    [LocalDate], [Int], [String], [LocalDate], [Int], [LocalDate], [String], [Int]
                ).self)
        {
            guard weekMondays.count == weekTargets.count, weekTargets.count == weekCircles.count, goalDays.count == goalTargets.count,
                rankMondays.count == rankCircles.count, rankCircles.count == ranks.count
            else { throw MalformedData("the user's goals or ranks changed while they were read") }
            var preferences = DigestPreferences()
            preferences.pushEnabled = pushEnabled
            preferences.pushWeeklyDigest = pushDigest
            preferences.emailEnabled = emailEnabled
            preferences.emailWeeklyDigest = emailDigest
            preferences.emailPreference = emailPreference
            var byWeek: [LocalDate: [WeekInReview.CircleRank]] = [:]
            for index in rankMondays.indices {
                byWeek[rankMondays[index], default: []].append(WeekInReview.CircleRank(circle: rankCircles[index], rank: ranks[index]))
            }
            read[id] = Row(
                name: name, email: email?.trimmingCharacters(in: .whitespaces), preferences: preferences,
                hasDevice: hasDevice, streak: hasStreak ? (current, settled) : nil, digested: Set(digested),
                weekly: Dictionary(
                    weekMondays.indices.map { (weekMondays[$0], (weekTargets[$0], UUID(uuidString: weekCircles[$0]))) },
                    uniquingKeysWith: { first, _ in first }),
                daily: Dictionary(zip(goalDays, goalTargets), uniquingKeysWith: { first, _ in first }),
                ranks: byWeek)
        }
        // The weeks' facts only for the users with a week left to digest: a user read again the
        // same week (a changed time zone) costs the first read alone.
        ranges.removeAll { range in dueWeeks[range.user, default: []].allSatisfy { read[range.user]?.digested.contains($0) ?? true } }
        for range in ranges { calendars[range.user] = due.first { $0.user.user.id == range.user }?.user.calendar }
        let tracking = try await TrackingDay.load(
            ranges.map { ($0.user, $0.first.adding(days: -6 - Self.lookBackDays - 7)...$0.last) }, on: connection, logger: run.logger)
        let memberships = try await FitCircleMembership.load(for: calendars, on: connection, logger: run.logger)
        var facts: [UUID: Facts] = [:]
        for (id, row) in read {
            facts[id] = Facts(
                digested: row.digested, name: row.name, email: row.email, preferences: row.preferences,
                hasDevice: row.hasDevice, streak: row.streak, weeklyStepsGoals: row.weekly, dailyStepsGoals: row.daily,
                ranks: row.ranks, tracking: tracking[id] ?? [:], memberships: memberships[id] ?? [])
        }
        return facts
    }

    // MARK: Deciding

    public func decide(for due: DueUser, facts: Facts?, run: RunContext) throws -> Decision<Change> {
        let user = try due.placed()
        let next = nextDue(for: due, run: run)
        /// Nothing to digest: the user waits for their next Sunday.
        func waiting(_ why: String) -> Decision<Change> {
            .later(
                PlannedChange(
                    itemID: user.user.id, change: Change(digests: [], dueAt: due.dueAt, nextDue: next),
                    work: [], notifications: [], tally: [:]), why)
        }
        let sundays: [LocalDate]
        switch dueSundays(for: user, run: run) {
        case .failure(let reason): return waiting(reason.text)
        case .success(let due): sundays = due
        }
        guard let facts else { throw NudgeError(.configuration, "the user's row is gone") }
        let open = sundays.filter { !facts.digested.contains($0) }
        guard !open.isEmpty else { return waiting("the week ending \(sundays.last!) is digested already") }
        let calendar = user.calendar
        let copy = DigestCopy(locale: user.user.locale)
        let pushRefusal = DigestChannels.pushRefusal(facts.preferences, hasDevice: facts.hasDevice)
        let emailRefusal = DigestChannels.emailRefusal(facts.preferences, address: facts.email)
        let signup = calendar.localDate(at: user.user.createdAt)
        var digests: [Digest] = []
        var work: [WorkMark] = []
        var notifications: [OutboxMessage] = []
        var tally: [String: Int] = [:]
        for sunday in open {
            let monday = sunday.adding(days: -6)
            // A day no person could have logged is left out of the week (the rules skip it), not
            // a reason to send nothing: it is named in the work mark.
            let implausible = (0..<7).compactMap { offset -> String? in
                let day = monday.adding(days: offset)
                return facts.tracking[day]?.impossibility.map { "daily_tracking \(day) left out: \($0)" }
            }
            let nextSet = facts.weeklyStepsGoals[sunday.adding(days: 1)]
            let week = WeeklyDigestRules.review(
                monday: monday, signedUpOn: signup, tracking: facts.tracking, dailyStepsGoals: facts.dailyStepsGoals,
                weeklyStepsGoal: facts.weeklyStepsGoals[monday]?.target, settledStreak: facts.streak, ranks: facts.ranks[monday] ?? [],
                memberships: facts.memberships, nextWeekSet: nextSet)
            // Four quiet weeks told in a row: a fifth is not, until the user is active again.
            if !week.hadActivity {
                let quiet = WeeklyDigestRules.quietWeeks(before: monday, since: firstMonday(for: user), tracking: facts.tracking)
                if quiet >= WeeklyDigestRules.quietWeeksBeforeRest {
                    work.append(
                        WorkMark(
                            localDay: sunday, outcome: "resting",
                            detail: """
                                \(quiet) quiet weeks in a row before this one: no digest until the user is active again
                                """))
                    tally["resting", default: 0] += 1
                    continue
                }
            }
            let dueAt = calendar.instant(of: sunday, at: moment)
            var channels: [String] = []
            if pushRefusal == nil {
                notifications.append(
                    OutboxMessage(
                        type: Self.type, localDay: sunday, deliverAfter: dueAt, title: copy.pushTitle, body: copy.pushBody(week),
                        payload: #"{"type":"\#(Self.type)","deep_link":"\#(Self.deepLink)","week_start":"\#(monday)"}"#))
                channels.append("push")
            }
            var renderedEmail: RenderedEmail?
            if emailRefusal == nil, let address = facts.email {
                let unsubscribe = email.links.url(user: user.user.id, type: .weeklyDigest)
                let rendered = DigestEmail.render(
                    week, copy: copy, name: facts.name, email: address, unsubscribeURL: unsubscribe,
                    dashboardURL: email.dashboardURL, postalAddress: email.postalAddress,
                    templates: email.templates)
                let payload = EmailPayload(
                    emailType: EmailType.weeklyDigest.rawValue, html: rendered.html,
                    unsubscribeURL: unsubscribe, tags: ["week_start": monday.description])
                notifications.append(
                    OutboxMessage(
                        type: Self.type, localDay: sunday, deliverAfter: dueAt, title: rendered.subject,
                        body: rendered.text, payload: payload.json, channel: .email))
                renderedEmail = rendered
                channels.append("email")
            }
            let withheld = [pushRefusal.map { "push: \($0)" }, emailRefusal.map { "email: \($0)" }].compactMap { $0 }
            work.append(
                WorkMark(
                    localDay: sunday, outcome: channels.isEmpty ? "no_channel" : (week.hadActivity ? "digested" : "quiet_week"),
                    detail: (channels + withheld + implausible).joined(separator: ", ")))
            for channel in channels { tally["queued:\(channel)", default: 0] += 1 }
            for reason in [pushRefusal, emailRefusal].compactMap({ $0 }) { tally["withheld:\(reason)", default: 0] += 1 }
            if !week.hadActivity { tally["quiet_weeks", default: 0] += 1 }
            // (A backfill of a past week sets no goal for a week already over.)
            let told = !channels.isEmpty && nextSet == nil && sunday.adding(days: 7) >= calendar.localDate(at: run.now)
            digests.append(
                Digest(
                    sunday: sunday, week: week, email: renderedEmail,
                    setsNextGoal: told ? (week.nextWeekStepsGoal, week.nextGoalCircleID) : nil))
        }
        return .act(
            PlannedChange(
                itemID: user.user.id, change: Change(digests: digests, dueAt: due.dueAt, nextDue: next),
                work: work, notifications: notifications, tally: tally))
    }

    /// The Monday of the first week the user had a digest for: the first whose Sunday digest came
    /// 3 days or more after sign-up.
    func firstMonday(for user: UserInTime) -> LocalDate {
        let calendar = user.calendar
        let signedUp = user.user.createdAt.addingTimeInterval(WeeklyDigestRules.signedUpAtLeast)
        var sunday = calendar.localDate(at: signedUp)
        sunday = sunday.adding(days: (7 - sunday.isoWeekday) % 7)
        if calendar.instant(of: sunday, at: moment) < signedUp { sunday = sunday.adding(days: 7) }
        return sunday.adding(days: -6)
    }

    // MARK: Writing

    /// Next week's steps goal as told (the work marks and the outbox rows are the runner's). The
    /// circle a circle's goal comes from is the one generate-daily-goals finds on Monday.
    public func writes(for changes: [PlannedChange<Change>], run: RunContext) -> BatchWrites {
        var writes = DueSource.moveWrites(
            job: definition.name, users: changes.map(\.itemID),
            expected: changes.map(\.change.dueAt), next: changes.map(\.change.nextDue))
        let goals = changes.flatMap { change in
            change.change.digests.compactMap { digest in
                digest.setsNextGoal.map { (change.itemID, digest.sunday.adding(days: 1), $0.target, $0.circleID?.uuidString ?? "") }
            }
        }
        guard !goals.isEmpty else { return writes }
        writes.step(
            "next_weekly_goals",
            """
            insert into weekly_goals (user_id, week_start, goal_type, target_value, fitcircle_id, created_at)
            select user_id, week_start, 'steps', target, nullif(circle, '')::uuid, \(run.now)
              from unnest(\(goals.map(\.0)), \(goals.map(\.1)), \(goals.map(\.2)), \(goals.map(\.3)))
                   as g(user_id, week_start, target, circle)
            on conflict (user_id, week_start, goal_type) do nothing
            """)
        return writes
    }
}
