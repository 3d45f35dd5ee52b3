import Foundation
import Logging
import PostgresNIO

/// push-trigger (docs/jobs/push-trigger.md): at 10:00 in each user's time zone (the definition's
/// `localTime`, for `dueForMinutes` after it), once per local day, it decides whether a proactive
/// check-in is due (check-ins on, an active push token, the frequency's interval, no conversation
/// today), what it is about (an upcoming event, a recognised pattern, the last conversation), and
/// has the LLM write it. The push goes to the outbox with its `push_log` row, in the batch's one
/// transaction. Every candidate's decision for the day is marked in `job_work`, so a later run that
/// day decides nothing twice; a user whose LLM call failed or whose copy was rejected is not
/// marked, and a later run within the window tries again.
///
/// It reads only the users whose 10:00 has come (`DueSource`): the batch's write moves each one's
/// instant to their next 10:00, and triggers make a user due at once when their time zone
/// changes, check-ins are turned on or a first device arrives. A user read again on a day already
/// decided costs one indexed lookup: the heavy facts are read only for the undecided.
public struct PushTriggerJob: RegisteredJob, OutsideCalls, Bookkeeping {
    public static let jobName = "push-trigger"

    public typealias Source = DueSource

    public let definition: JobDefinition
    /// Nil on a dry run without `--dry-run-llm`: the prompts are built, no LLM is called.
    let llm: LLMClient?
    let meter: LLMMeter

    public static let outboxType = "proactive_push"
    /// How far back the facts reach: a week of messages, and yesterday's conversations for "today".
    static let lookback: TimeInterval = 8 * 24 * 3600

    public init(definition: JobDefinition, llm: LLMClient?, budget: LLMBudget) {
        self.definition = definition
        self.llm = llm
        self.meter = LLMMeter(budget: budget)
    }

    /// Built with the LLM's client (none on a dry run, which calls no LLM), shut down after the run.
    public static func withJob<Result: Sendable>(_ setup: JobSetup, _ body: (any Job) async throws -> Result) async throws -> Result {
        guard setup.options.callsLLM else {
            return try await body(PushTriggerJob(definition: setup.definition, llm: nil, budget: setup.options.llmBudget))
        }
        let configuration = try LLMConfiguration(environment: setup.environment)
        return try await LLMClient.with(configuration, concurrency: setup.options.concurrency, waitClock: setup.options.waitClock) { client in
            try await body(PushTriggerJob(definition: setup.definition, llm: client, budget: setup.options.llmBudget))
        }
    }

    public struct Facts: Sendable {
        public let frequency: String?
        public let lastPushAt: Date?
        public let lastDecidedDay: LocalDate?
        public let lastActiveAt: Date?
        /// Newest first: those of the last eight days, and the latest whatever its age.
        public let conversations: [ConversationSummary]
        /// The user's own messages of the last eight days, newest first.
        public let messages: [UserMessage]
        /// The user's last words in their latest conversation, newest first.
        public let lastConversationMessages: [String]
        public let patterns: String?
        public let patternSessions: Int?
        public let coachingPreferences: String
        public let domainStyles: String
    }

    /// A proactive push on its way: decided, then written by the LLM.
    public struct ProactivePush: Sendable {
        public let pushLogID: UUID
        public let localDay: LocalDate
        public let decision: PushDecision
        public let prompt: String
        /// The user's words the copy must not repeat.
        public let userWords: [String]
        /// When the user's window closes (13:00 local): the LLM is not asked after it.
        public let dueUntil: Date?
        public var copy: PushCopy?
        /// When the push was queued, by the run's clock: `push_log.sent_at`.
        public var queuedAt: Date?
    }

    /// A candidate's decision for the day (a push, or only the mark that says why not), and when
    /// the user is next due.
    public struct Change: Sendable {
        public var push: ProactivePush?
        /// The user's instant in the due index as read, and the next one: their next 10:00.
        public let dueAt: Date
        public let nextDue: Date
    }

    public var source: DueSource { DueSource(job: definition.name) }

    var moment: LocalTime { definition.localTime ?? LocalTime(hour: 10, minute: 0)! }

    /// When the user is next due after a decision at `instant`: today's 10:00 if it is still to
    /// come, else tomorrow's.
    func nextDue(_ user: UserInTime, after instant: Date) -> Date {
        let today = user.calendar.localDate(at: instant)
        let todays = user.calendar.instant(of: today, at: moment)
        return instant < todays ? todays : user.calendar.instant(of: today.adding(days: 1), at: moment)
    }

    /// The pause between batches (`pauseBetweenBatchesMilliseconds` after each `batchSize` users
    /// of the definition: 100 ms for each 50, docs/jobs/push-trigger.md) paces the LLM calls: a
    /// batch owes it in proportion to the users it sent to the LLM, so a batch that sent none
    /// owes nothing, one of 50 that all went owes it whole, and a bigger batch (`--batch-size`)
    /// keeps the same pace.
    public func pause(after planned: [PlannedChange<Change>]) -> Duration {
        // A dry run without the LLM asks it nothing.
        guard llm != nil else { return .zero }
        let pause = definition.pauseBetweenBatchesMilliseconds ?? 0
        let asked = planned.count { $0.change.push != nil }
        return .milliseconds(pause) * asked / max(definition.batchSize, 1)
    }

    // MARK: Reading

    public func loadFacts(for read: [DueUser], run: RunContext, on connection: PostgresConnection) async throws -> [UUID: Facts] {
        // Only the users in their window are read, and those whose window closed while the run
        // was on its way (to tell candidates from others).
        let users = read.filter { $0.problem == nil }.map(\.user)
            .filter { notDue($0, at: run.now, run: run) == nil || windowClosedDuringRun($0, run: run) }
        guard !users.isEmpty else { return [:] }
        let since = run.now.addingTimeInterval(-Self.lookback)
        // One query: the batch's candidates (check-ins on, an active token) with everything the
        // decision needs; times as epoch seconds, lists as JSON. A user whose local day is
        // decided already gets the indexed lookups alone: the conversations and messages are
        // read only for the others. "Has a token" is a subquery per user, not `exists`: an
        // `exists` over the push_tokens view (a union) becomes a semi-join, and for a batch of
        // thousands PostgreSQL builds it by reading every token and every user, each batch.
        let rows = try await connection.query(
            """
            select u.id, u.last_active_at, cp.notification_preferences->>'frequency',
                   (select max(sent_at) from push_log where user_id = u.id),
                   d.last_decided,
                   case when d.last_decided >= r.today then '[]' else coalesce((select json_agg(json_build_object('domain', c.domain, 'title', c.title,
                                                               'created_at', extract(epoch from c.created_at),
                                                               'updated_at', extract(epoch from c.updated_at))
                                             order by c.created_at desc)
                               from (select * from conversations
                                      where user_id = u.id and updated_at >= \(since) and created_at <= \(run.now)
                                     union
                                     (select * from conversations where user_id = u.id and created_at <= \(run.now)
                                       order by created_at desc limit 1)) c),
                            '[]')::text end,
                   case when d.last_decided >= r.today then '[]' else coalesce((select json_agg(json_build_object('content', m.content, 'domain', c.domain,
                                                               'created_at', extract(epoch from m.created_at))
                                             order by m.created_at desc)
                               from (select * from messages where user_id = u.id and role = 'user'
                                        and created_at >= \(since) and created_at <= \(run.now)
                                      order by created_at desc limit 200) m
                               join conversations c on c.id = m.conversation_id),
                            '[]')::text end,
                   case when d.last_decided >= r.today then '[]' else coalesce((select json_agg(m.content order by m.created_at desc)
                               from (select content, created_at from messages
                                      where role = 'user' and created_at <= \(run.now)
                                        and conversation_id = (select id from conversations
                                                                where user_id = u.id and created_at <= \(run.now)
                                                                order by created_at desc limit 1)
                                      order by created_at desc limit 3) m),
                            '[]')::text end,
                   pc.patterns::text, pc.session_count, cp.coaching_preferences::text, cp.domain_styles::text
              from unnest(\(users.map(\.user.id)), \(users.map { $0.calendar.localDate(at: run.now) })) as r(user_id, today)
              join users u on u.id = r.user_id
              join context_profiles cp on cp.user_id = u.id
              left join pattern_cache pc on pc.user_id = u.id
              cross join lateral (select max(local_day) as last_decided from job_work
                                   where job = \(definition.name) and user_id = u.id) d
             where cp.notification_preferences->'check_ins_enabled' = 'true'::jsonb
               and (select true from push_tokens t where t.user_id = u.id limit 1)
            """, logger: run.logger)
        var facts: [UUID: Facts] = [:]
        for try await (
            id, lastActive, frequency, lastPush, lastDecided, conversations, messages, lastWords, patterns,
            sessions, coaching, styles
        )
            in rows.decode((UUID, Date?, String?, Date?, LocalDate?, String, String, String, String?, Int?, String, String).self)
        {
            facts[id] = Facts(
                frequency: frequency, lastPushAt: lastPush, lastDecidedDay: lastDecided, lastActiveAt: lastActive,
                conversations: try JSONDecoder().decode([ConversationRow].self, from: Data(conversations.utf8)).map(\.summary),
                messages: try JSONDecoder().decode([MessageRow].self, from: Data(messages.utf8)).map(\.message),
                lastConversationMessages: try JSONDecoder().decode([String].self, from: Data(lastWords.utf8)),
                patterns: patterns, patternSessions: sessions, coachingPreferences: coaching, domainStyles: styles)
        }
        return facts
    }

    private struct ConversationRow: Decodable {
        let domain: String?
        let title: String?
        let created_at: Double
        let updated_at: Double

        var summary: ConversationSummary {
            ConversationSummary(
                domain: domain, title: title, createdAt: Date(timeIntervalSince1970: created_at),
                updatedAt: Date(timeIntervalSince1970: updated_at))
        }
    }

    private struct MessageRow: Decodable {
        let content: String
        let domain: String?
        let created_at: Double

        var message: UserMessage { UserMessage(content: content, createdAt: Date(timeIntervalSince1970: created_at), domain: domain) }
    }

    // MARK: Deciding

    /// Why the user's moment is not `instant`, or nil when it is: from 10:00 local (the
    /// definition's `localTime`) for `dueForMinutes`, on the user's local day at `instant`.
    func notDue(_ user: UserInTime, at instant: Date, run: RunContext) -> String? {
        let calendar = user.calendar
        let today = calendar.localDate(at: instant)
        let moment = self.moment
        let dueAt = calendar.instant(of: today, at: moment)
        guard instant >= dueAt else { return "not \(moment) local time yet" }
        if let dueUntil = dueUntil(dueAt), instant >= dueUntil {
            return "more than \(definition.dueForMinutes ?? 0) minutes past \(moment) local time"
        }
        if let window = run.window, !window.contains(today) {
            return "proactive pushes are for the user's current local day (\(today)) only"
        }
        return nil
    }

    /// The end of the window that opens at `dueAt`, when the job has one.
    private func dueUntil(_ dueAt: Date) -> Date? {
        definition.dueForMinutes.map { dueAt.addingTimeInterval(Double($0) * 60) }
    }

    /// Whether the user's window of their local day closed while this run was on its way to them:
    /// after the run began, by the time it reached them (a long run held back by the rate limit).
    func windowClosedDuringRun(_ user: UserInTime, run: RunContext) -> Bool {
        let today = user.calendar.localDate(at: run.now)
        guard run.window?.contains(today) ?? true,
            let closed = dueUntil(user.calendar.instant(of: today, at: moment))
        else { return false }
        return run.startedAt < closed && closed <= run.now
    }

    public func decide(for due: DueUser, facts: Facts?, run: RunContext) throws -> Decision<Change> {
        let user = try due.placed()
        let calendar = user.calendar
        let today = calendar.localDate(at: run.now)
        // A backfill decides nothing (pushes are for the user's today) and leaves the instant as read.
        let next = run.window == nil ? nextDue(user, after: run.now) : due.dueAt
        /// Nothing to decide: the user waits for their next 10:00.
        func waiting(_ why: String) -> Decision<Change> {
            .later(
                PlannedChange(
                    itemID: user.user.id, change: Change(push: nil, dueAt: due.dueAt, nextDue: next),
                    work: [], notifications: [], tally: [:]), why)
        }
        if let why = notDue(user, at: run.now, run: run) {
            // A candidate the run missed (its window closed while the run was on its way) is
            // skipped with the reason; anyone else is simply not due.
            guard windowClosedDuringRun(user, run: run), let facts, !(facts.lastDecidedDay.map { $0 >= today } ?? false),
                try eligibilityRefusal(facts, run: run, calendar: calendar) == nil
            else { return waiting(why) }
            throw UserSkip("the run reached the user at \(calendar.localTime(at: run.now)) local time, after their window (\(why)); not pushed")
        }
        guard let facts else { return waiting("check-ins are off or there is no active push token") }
        if let decided = facts.lastDecidedDay, decided >= today { return waiting("already decided today") }
        if let refusal = try eligibilityRefusal(facts, run: run, calendar: calendar) {
            return settle(due, today, outcome: refusal.outcome, detail: refusal.description, next: next)
        }

        let latest = facts.conversations.max { $0.createdAt < $1.createdAt }
        let lastActivity = [facts.lastActiveAt, latest?.updatedAt, facts.messages.first?.createdAt].compactMap { $0 }.max()
        let intelligence = PushIntelligence.Facts(
            messages: facts.messages, lastConversation: latest, lastConversationMessages: facts.lastConversationMessages,
            patterns: try freshPatterns(facts), lastActivity: lastActivity ?? user.user.createdAt)
        guard let decision = PushIntelligence.decide(intelligence, now: run.now, calendar: calendar, locale: user.user.locale) else {
            return settle(
                due, today, outcome: "nothing_to_say",
                detail: "no event in the next 24 hours, no recognised pattern after 2 quiet days, no conversation to follow up after 3",
                next: next)
        }
        let context = try coachingContext(facts, locale: user.user.locale, domain: decision.conversationDomain)
        let dueAt = calendar.instant(of: today, at: moment)
        let push = ProactivePush(
            pushLogID: UUID(), localDay: today, decision: decision, prompt: PushPrompt.build(decision, context: context),
            userWords: facts.messages.map(\.content) + facts.lastConversationMessages, dueUntil: dueUntil(dueAt), copy: nil)
        return .act(
            PlannedChange(
                itemID: user.user.id, change: Change(push: push, dueAt: due.dueAt, nextDue: next),
                work: [], notifications: [], tally: [:]))
    }

    /// Why the frequency or a session today rules the push out, or nil when neither does.
    private func eligibilityRefusal(_ facts: Facts, run: RunContext, calendar: LocalCalendar) throws -> PushEligibility.Refusal? {
        guard let frequencyName = facts.frequency, let frequency = CheckInFrequency(rawValue: frequencyName) else {
            throw MalformedData(
                "notification_preferences.frequency is \(facts.frequency.map { "'\($0)'" } ?? "missing"), not daily, few_times_a_week or weekly")
        }
        return PushEligibility.refusal(
            frequency: frequency, lastPushAt: facts.lastPushAt, conversations: facts.conversations,
            messageTimes: facts.messages.map(\.createdAt), now: run.now, calendar: calendar)
    }

    private func settle(_ due: DueUser, _ day: LocalDate, outcome: String, detail: String, next: Date) -> Decision<Change> {
        .act(
            PlannedChange(
                itemID: due.user.user.id, change: Change(push: nil, dueAt: due.dueAt, nextDue: next),
                work: [WorkMark(localDay: day, outcome: outcome, detail: detail)],
                notifications: [], tally: ["skipped:\(outcome)": 1]))
    }

    /// The cached patterns while the cache is fresh: it goes stale after 3 sessions
    /// (docs/jobs/push-trigger.md, "What to say").
    private func freshPatterns(_ facts: Facts) throws -> [RecognisedPattern] {
        guard let json = facts.patterns, (facts.patternSessions ?? 0) < 3 else { return [] }
        do {
            return try JSONDecoder().decode([RecognisedPattern].self, from: Data(json.utf8))
        } catch {
            throw MalformedData("pattern_cache.patterns is not a list of patterns with theme, occurrences, domains, confidence and synthesis")
        }
    }

    private func coachingContext(_ facts: Facts, locale: String, domain: String?) throws -> CoachingContext {
        struct Preferences: Decodable {
            struct SessionPatterns: Decodable { let preferred_time: String? }
            let preferred_style: String?
            let domain_usage: [String: Double]?
            let session_patterns: SessionPatterns?
        }
        let preferences: Preferences
        do {
            preferences = try JSONDecoder().decode(Preferences.self, from: Data(facts.coachingPreferences.utf8))
        } catch {
            throw MalformedData("context_profiles.coaching_preferences is malformed (preferred_style, domain_usage, session_patterns)")
        }
        // A domain's style missing a dimension (learned before all four existed) is no style:
        // the default style applies (docs/jobs/push-trigger.md, "Copy").
        let styles = ((try? JSONDecoder().decode([String: LenientStyle].self, from: Data(facts.domainStyles.utf8))) ?? [:])
            .compactMapValues(\.style)
        let usage = (preferences.domain_usage ?? [:]).filter { $0.value > 0 }
        let topDomains = usage.sorted { ($0.value, $1.key) > ($1.value, $0.key) }.prefix(3).map(\.key)
        // The style of the push's domain, or of the domain the user coaches in most.
        let style = domain.flatMap { styles[$0] } ?? topDomains.lazy.compactMap { styles[$0] }.first
        return CoachingContext(
            locale: locale, preferredStyle: preferences.preferred_style,
            preferredTime: preferences.session_patterns?.preferred_time, topDomains: Array(topDomains),
            style: style)
    }

    // MARK: Writing the copy

    public func complete(_ change: PlannedChange<Change>, run: RunContext) async throws -> PlannedChange<Change> {
        guard var push = change.change.push else { return change }
        var logger = run.logger
        logger[metadataKey: LogKey.userID] = "\(change.itemID.uuidString.lowercased())"
        // The prompt carries the user's own words: its size is logged, never its text.
        logger.debug(
            "push prompt built",
            metadata: [
                "nudge.push_type": "\(push.decision.pushType.rawValue)", "nudge.prompt_characters": "\(push.prompt.count)",
            ])
        guard let llm else {
            push.copy = PushCopy(title: "(dry run: no LLM call)", body: "The prompt has \(push.prompt.count) characters.")
            return finished(change, push, run: run)
        }
        // The batch may have waited for the rate limit: is the user still within their window?
        if let dueUntil = push.dueUntil, run.clock.now() >= dueUntil {
            throw UserSkip("the user's window closed at \(JobRunner<Self>.timestamp(dueUntil)) before the LLM could be asked; not pushed")
        }
        try await meter.admit()
        // NUDGE_LLM_REQUESTS_PER_MINUTE is the account's: every shard and run takes its turns
        // from the database's one pace.
        let pace = run.database.map { llm.sharedPace($0, logger: logger) }
        let reply = try await llm.complete(prompt: push.prompt, pace: pace, logger: logger)
        // The rate limit, retries and the call itself take time: the push must still be due.
        if let dueUntil = push.dueUntil, run.clock.now() >= dueUntil {
            let reason = "the user's window closed at \(JobRunner<Self>.timestamp(dueUntil)) while the LLM was writing; not pushed"
            await meter.record(.init(userID: change.itemID, model: reply.model, usage: reply.usage, outcome: "unused: \(reason)"))
            throw UserSkip(reason)
        }
        do {
            push.copy = try PushCopy.parse(reply.text, userMessages: push.userWords)
            await meter.record(.init(userID: change.itemID, model: reply.model, usage: reply.usage, outcome: "used"))
        } catch {
            await meter.record(.init(userID: change.itemID, model: reply.model, usage: reply.usage, outcome: "rejected: \(error)"))
            throw UserSkip("\(error); not pushed")
        }
        return finished(change, push, run: run)
    }

    private func finished(_ change: PlannedChange<Change>, _ push: ProactivePush, run: RunContext) -> PlannedChange<Change> {
        var push = push
        let copy = push.copy!
        let queuedAt = run.clock.now()
        push.queuedAt = queuedAt
        let payload: [String: String] = [
            "domain": push.decision.conversationDomain ?? "general",
            "action": "new_conversation",
            "push_type": push.decision.pushType.rawValue,
            "push_log_id": push.pushLogID.uuidString.lowercased(),
        ]
        let message = OutboxMessage(
            type: Self.outboxType, localDay: push.localDay, deliverAfter: queuedAt, title: copy.title,
            body: copy.body, payload: Self.json(payload))
        var decided = change.change
        decided.push = push
        return PlannedChange(
            itemID: change.itemID, change: decided,
            work: [WorkMark(localDay: push.localDay, outcome: "pushed", detail: push.decision.pushType.rawValue)],
            notifications: [message], tally: ["pushed:\(push.decision.pushType.rawValue)": 1])
    }

    // MARK: Writing the batch

    public func writes(for changes: [PlannedChange<Change>], run: RunContext) -> BatchWrites {
        var writes = DueSource.moveWrites(
            job: definition.name, users: changes.map(\.itemID),
            expected: changes.map(\.change.dueAt), next: changes.map(\.change.nextDue))
        let marks = changes.flatMap { change in change.work.map { (change.itemID, $0.localDay) } }
        // A day already decided (by a run that raced this one's read) is never pushed twice.
        writes.expect(
            """
            not exists (select 1 from job_work w join unnest(\(marks.map(\.0)), \(marks.map(\.1))) as d(user_id, local_day)
                          on w.user_id = d.user_id and w.local_day = d.local_day
                         where w.job = \(definition.name))
            """, else: "push-trigger has already decided this local day for the user")
        let pushes = changes.compactMap { change in change.change.push.map { (change.itemID, $0) } }
        guard !pushes.isEmpty else { return writes }
        // The unique (user_id, local_day) of push_log refuses a second push the same local day,
        // whatever two runs race: the batch then falls back user by user and that user fails.
        writes.step(
            "push_logs",
            """
            insert into push_log (id, user_id, push_type, content, sent_at, metadata, local_day)
            select id, user_id, push_type, content, sent_at, metadata::jsonb, local_day
              from unnest(\(pushes.map(\.1.pushLogID)), \(pushes.map(\.0)), \(pushes.map(\.1.decision.pushType.rawValue)),
                          \(pushes.map { $0.1.copy?.content ?? "" }), \(pushes.map { $0.1.queuedAt ?? run.now }),
                          \(pushes.map { Self.metadata($0.1.decision) }), \(pushes.map(\.1.localDay)))
                   as p(id, user_id, push_type, content, sent_at, metadata, local_day)
            """)
        return writes
    }

    /// `push_log.metadata`: which layer, the pattern's theme, the event's category; never the
    /// user's words or anything that identifies them.
    static func metadata(_ decision: PushDecision) -> String {
        var fields = ["layer": decision.pushType.rawValue]
        fields["pattern_theme"] = decision.patternTheme
        fields["event_description"] = decision.eventDescription
        return json(fields)
    }

    private static func json(_ fields: [String: String]) -> String {
        String(decoding: try! JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys]), as: UTF8.self)
    }

    // MARK: After the batch

    /// Records the batch's LLM usage in `llm_calls` (not on a dry run) and adds it to the run's tally.
    public func afterBatch(run: RunContext, on connection: PostgresConnection) async throws -> [String: Int] {
        let calls = await meter.drain()
        guard !calls.isEmpty else { return [:] }
        let tally = [
            "llm_calls": calls.count,
            "llm_input_tokens": calls.reduce(0) { $0 + $1.usage.inputTokens },
            "llm_output_tokens": calls.reduce(0) { $0 + $1.usage.outputTokens },
        ]
        guard !run.dryRun, let llm else { return tally }
        try await connection.query(
            """
            insert into llm_calls (run_id, job, user_id, provider, model, input_tokens, output_tokens, outcome)
            select \(run.runID), \(definition.name), user_id, \(llm.configuration.provider.rawValue), model, input_tokens,
                   output_tokens, outcome
              from unnest(\(calls.map(\.userID)), \(calls.map { $0.model.isEmpty ? llm.configuration.model : $0.model }),
                          \(calls.map(\.usage.inputTokens)), \(calls.map(\.usage.outputTokens)), \(calls.map(\.outcome)))
                   as c(user_id, model, input_tokens, output_tokens, outcome)
            """, logger: run.logger)
        return tally
    }
}

private struct LenientStyle: Decodable {
    let style: StylePreference?

    init(from decoder: any Decoder) throws {
        style = try? StylePreference(from: decoder)
    }
}

/// A row whose contents the job cannot read: the user fails with this reason, the others go on.
public struct MalformedData: Error, CustomStringConvertible, Sendable {
    public let description: String

    public init(_ description: String) {
        self.description = description
    }
}
