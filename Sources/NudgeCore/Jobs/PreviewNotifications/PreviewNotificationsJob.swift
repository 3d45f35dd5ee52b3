import Foundation
import Logging
import PostgresNIO

/// preview-notifications (docs/jobs/preview-notifications.md): before each coaching call the user asked for,
/// "Coach Max is calling in 5 min!", at `scheduled_at − users.notification_lead_min`.
///
/// Cron starts it every minute. It pages the calls (`CallSource`) whose preview falls due within
/// the next `lookAhead`, and queues each preview with `deliver_after` at its exact due time:
/// dispatch, draining the outbox through the minute, sends it within seconds of that time. Per
/// call, on the user's path (`PreviewPath`):
///
/// - A: the push (`preview_push`); with a phone number, also a `fallback_sms` that goes only if
///   the push cannot reach the user (the token expired: dispatch moves it to at once).
/// - B: the SMS (`preview_sms`).
/// - C: the push, and a `fallback_sms` 30 seconds later that goes only if no delivery receipt
///   for the push was recorded by then (`notification_logs.delivered_at`).
///
/// In the batch's one statement with the outbox rows, the call is marked decided: `preview_for`,
/// the call time the preview was decided for. `preview_sent` and `preview_sent_at` are dispatch's:
/// set when a preview of the call reached a channel (APNs or FCM took the push, Twilio the SMS), so
/// that the call answer rate with and without a preview (docs/report.md) can be read from them. A
/// call moved to another time no longer matches `preview_for` and gets a preview for its new time;
/// dispatch refuses the preview of the old one (and of a call no longer pending, or begun) when its
/// time comes. A call found after it began, whose user cannot be reached, or that cannot be
/// decided, is marked with the reason in `preview_note`, once, and left alone: the call itself
/// happens regardless.
public struct PreviewNotificationsJob: PlainJob {
    public static let jobName = "preview-notifications"

    public let definition: JobDefinition
    public let source: CallSource

    /// How far ahead of its due time a preview is queued: a run every minute, with room for a late start.
    public static let lookAhead: TimeInterval = 120
    /// Path C: how long the push has to be confirmed delivered before the SMS goes
    /// (docs/jobs/preview-notifications.md).
    public static let fallbackAfter: TimeInterval = 30
    public static let deepLink = "fitcircle://incoming-call"

    public init(definition: JobDefinition) {
        self.definition = definition
        self.source = CallSource(lookAhead: Self.lookAhead)
    }

    public struct Facts: Sendable, Equatable {
        public let coach: String?
        /// The streak as validate-streaks last settled it, and the user's recent check-in days:
        /// what the day of the streak a call falls on is counted from.
        public let streak: StreakState?
        public let settledThrough: LocalDate?
        public let checkIns: Set<LocalDate>
        public let reach: PreviewPath.Reach

        public init(
            coach: String?, streak: StreakState?, settledThrough: LocalDate?, checkIns: Set<LocalDate>,
            reach: PreviewPath.Reach
        ) {
            self.coach = coach
            self.streak = streak
            self.settledThrough = settledThrough
            self.checkIns = checkIns
            self.reach = reach
        }

        /// The day of the streak `day` is (`StreakRules.dayNumber`).
        public func streakDay(on day: LocalDate) -> Int {
            StreakRules.dayNumber(today: day, stored: streak, settledThrough: settledThrough, checkIns: checkIns)
        }
    }

    /// What becomes of one call: its preview queued on `path`, or not, with why.
    public struct Change: Sendable, Equatable {
        public let callID: UUID
        public let userID: UUID
        /// The call time it was decided for.
        public let scheduledAt: Date
        public let path: PreviewPath?
        public let note: String?
        /// Whether the call was decided before: rows an earlier decision queued for this time and
        /// this one does not (the user's path changed) are withdrawn.
        public var decidedBefore = false
    }

    // MARK: Reading

    public func loadFacts(for calls: [CallInTime], run: RunContext, on connection: PostgresConnection) async throws -> [UUID: Facts] {
        let users = Array(Set(calls.map(\.call.userID)))
        let rows = try await connection.query(
            """
            select u.id, p.name, s.user_id is not null, coalesce(s.current_streak, 0), coalesce(s.longest_streak, 0),
                   s.last_checkin_date, coalesce(s.freeze_used_this_week, false), s.week_start_date, coalesce(s.missed_days, 0),
                   s.settled_through,
                   coalesce((select array_agg(t.date) from daily_tracking t
                              where t.user_id = u.id and t.mood is not null and t.energy is not null
                                and t.date >= \(LocalDate(daysSinceEpoch: Int(run.now.timeIntervalSince1970 / 86_400)).adding(days: -StreakRules.checkInsRead - 2))
                                and t.date <= \(LocalDate(daysSinceEpoch: Int(run.now.timeIntervalSince1970 / 86_400)).adding(days: 2))), '{}'),
                   u.notification_pref, u.phone_number,
                   coalesce(np.push_enabled, true)
                   and (\(unescaped: PushDevices.anyOf("u"))),
                   exists (select 1 from sms_opt_outs so
                            where so.phone_number = '+' || regexp_replace(u.phone_number, '[^0-9]', '', 'g'))
              from users u
              left join coach_personas p on p.id = u.coach_persona_id
              left join user_streaks s on s.user_id = u.id
              left join notification_preferences np on np.user_id = u.id
             where u.id = any(\(users))
            """, logger: run.logger)
        var byUser: [UUID: Facts] = [:]
        for try await (
            id, coach, hasStreak, current, longest, lastCheckIn, freezeUsed, weekStart, missed, settled, checkIns,
            preference, phone, push, optedOut
        )
            in rows.decode(
                (
                    UUID, String?, Bool, Int, Int, LocalDate?, Bool, LocalDate?, Int, LocalDate?, [LocalDate],
                    String, String?, Bool, Bool
                ).self)
        {
            let number = phone.flatMap(PhoneNumber.init)
            let unusable = number == nil && !(phone ?? "").trimmingCharacters(in: .whitespaces).isEmpty
            let streak =
                hasStreak
                ? StreakState(
                    currentStreak: max(0, current), longestStreak: longest, lastCheckinDate: lastCheckIn,
                    freezeUsedThisWeek: freezeUsed, weekStartDate: weekStart, missedDays: max(0, missed))
                : nil
            byUser[id] = Facts(
                coach: coach, streak: streak, settledThrough: settled, checkIns: Set(checkIns),
                reach: PreviewPath.Reach(
                    preference: preference, push: push, phone: number, phoneUnusable: unusable,
                    smsOptedOut: number != nil && optedOut))
        }
        var facts: [UUID: Facts] = [:]
        for call in calls {
            facts[call.call.id] = byUser[call.call.userID]
        }
        return facts
    }

    // MARK: Deciding

    public func decide(for item: CallInTime, facts: Facts?, run: RunContext) throws -> Decision<Change> {
        let call = item.call
        let now = run.now
        func skip(_ outcome: String, _ note: String) -> Decision<Change> {
            .act(
                PlannedChange(
                    itemID: call.id,
                    change: Change(
                        callID: call.id, userID: call.userID, scheduledAt: call.scheduledAt, path: nil, note: note,
                        decidedBefore: call.decidedBefore),
                    work: [], notifications: [], tally: ["skipped:\(outcome)": 1]))
        }
        // A call that cannot be decided is marked with why, once: not failed again every minute.
        guard let facts else { return skip("undecidable", "the call's user could not be read") }
        if call.leadMinutes == 0 {
            return skip("no_lead", "notification_lead_min is 0: the user asked for no preview")
        }
        guard now < call.scheduledAt else {
            return skip(
                "call_began",
                """
                the call began at \(call.scheduledAt.formatted(.iso8601)) before its preview (due \
                \(call.previewAt.formatted(.iso8601))) was queued: a preview after the call is worthless
                """)
        }
        guard call.previewAt <= now.addingTimeInterval(Self.lookAhead) else {
            return .nothingDue("the preview is due at \(call.previewAt.formatted(.iso8601))")
        }
        let path: PreviewPath
        switch PreviewPath.select(facts.reach) {
        case .success(let selected): path = selected
        case .failure(let none):
            // No channel: a warning, and the call goes ahead (docs/jobs/preview-notifications.md).
            run.logger.warning(
                "no notification channel for the call's user",
                metadata: [
                    LogKey.userID: "\(call.userID.uuidString.lowercased())", LogKey.reason: "\(none)",
                ])
            return skip("no_channel", none.description)
        }

        // Never before its time; queued late (an outage), it goes at once and says the minutes left.
        let sendAt = max(call.previewAt, now)
        let minutes =
            sendAt == call.previewAt
            ? call.leadMinutes : max(1, Int((call.scheduledAt.timeIntervalSince(sendAt) / 60).rounded()))
        let locale = item.user.user.locale
        let day = item.user.calendar.localDate(at: call.scheduledAt)
        let streak = facts.streakDay(on: day)
        let occasion = "\(call.id.uuidString.lowercased()):\(Int(call.scheduledAt.timeIntervalSince1970))"
        let sms = PreviewCopy.sms(coach: facts.coach, minutes: minutes, streak: streak, topicKey: call.topic, locale: locale)
        let base: [String: JSONValue] = [
            "call_id": .string(call.id.uuidString.lowercased()),
            "scheduled_at": .string(call.scheduledAt.formatted(.iso8601)),
            "path": .string(path.rawValue),
        ]
        func message(
            _ type: String, channel: DeliveryChannel, at instant: Date, title: String, body: String,
            extra: [String: JSONValue]
        ) -> OutboxMessage {
            OutboxMessage(
                type: type, localDay: day, deliverAfter: instant, title: title, body: body,
                payload: JSONValue.object(base.merging(extra) { $1 }).text, recipient: call.userID, channel: channel,
                occasion: .alone(occasion))
        }
        func smsExtra(_ text: SMSText) -> [String: JSONValue] {
            ["encoding": .string(text.encoding.rawValue), "segments": .integer(Int64(text.segments))]
        }

        var messages: [OutboxMessage] = []
        var note = item.zoneProblem
        if path != .sms {
            let push = message(
                "preview_push", channel: .push, at: sendAt,
                title: PreviewCopy.pushTitle(coach: facts.coach, minutes: minutes, streak: streak, locale: locale),
                body: PreviewCopy.pushBody(streak: streak, topicKey: call.topic, locale: locale),
                extra: ["deep_link": .string("\(Self.deepLink)?call_id=\(call.id.uuidString.lowercased())")])
            let pushKey = push.dedupeKey(job: definition.name, userID: call.userID)
            messages.append(push)
            if facts.reach.phone != nil {
                if let sms {
                    messages.append(
                        message(
                            "fallback_sms", channel: .sms, at: sendAt.addingTimeInterval(Self.fallbackAfter),
                            title: "", body: sms.text,
                            extra: smsExtra(sms).merging([
                                "fallback_for": .string(pushKey),
                                "send_when": .string(path == .pushThenSMS ? "unconfirmed" : "push_failed"),
                            ]) { $1 }))
                } else {
                    note = [note, "no SMS fallback: no version of the SMS fits one segment"].compactMap { $0 }.joined(separator: "; ")
                }
            }
        } else {
            guard let sms else {
                return skip("sms_too_long", "the SMS would be more than one segment however it is shortened (the coach's name?)")
            }
            messages.append(message("preview_sms", channel: .sms, at: sendAt, title: "", body: sms.text, extra: smsExtra(sms)))
        }
        return .act(
            PlannedChange(
                itemID: call.id,
                change: Change(
                    callID: call.id, userID: call.userID, scheduledAt: call.scheduledAt, path: path,
                    note: note, decidedBefore: call.decidedBefore),
                work: [], notifications: messages, tally: ["queued:\(path.rawValue)": 1]))
    }

    // MARK: Writing

    /// The calls marked, each only while it is still at the time it was decided for: a call moved
    /// meanwhile is decided again at the next run (the preview queued for its old time is refused
    /// by dispatch). `preview_for` takes the column's own value, so that the page's
    /// `preview_for is distinct from scheduled_at` holds exactly, whatever a round trip through
    /// `Date` did to its microseconds.
    public func writes(for changes: [PlannedChange<Change>], run: RunContext) -> BatchWrites {
        var writes = BatchWrites()
        guard !changes.isEmpty else { return writes }
        let calls = changes.map(\.change)
        // Decided for its time. `preview_sent` says whether a preview for that time reached a
        // channel (dispatch sets it when one does): false for a new time, true for a time the call
        // was previewed for and is back at (that preview is not sent twice).
        writes.step(
            "previewed_calls",
            """
            update scheduled_calls c
               set preview_for = c.scheduled_at, preview_note = nullif(v.note, ''), updated_at = \(run.now),
                   (preview_sent, preview_sent_at) = (
                       select count(*) > 0, min(o.sent_at) from notification_outbox o
                        where o.user_id = c.user_id and o.job = \(definition.name) and o.sent_at is not null
                          and o.payload->>'call_id' = c.id::text
                          and o.payload->>'scheduled_at' = to_char(c.scheduled_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
              from unnest(\(calls.map(\.callID)), \(calls.map(\.scheduledAt)), \(calls.map { $0.note ?? "" }))
                   as v(id, scheduled_at, note)
             where c.id = v.id and abs(extract(epoch from c.scheduled_at - v.scheduled_at)) < 0.001 and c.status = 'pending'
            """)
        // A call decided again for a time it had been decided for (moved away and back) may still
        // have rows of that decision waiting: those this one does not queue again (another path
        // now) are withdrawn, so that the user gets one preview.
        let again = changes.filter(\.change.decidedBefore)
        if !again.isEmpty {
            let keys = again.flatMap { planned in
                planned.change.path == nil
                    ? []
                    : planned.notifications.map {
                        $0.dedupeKey(job: definition.name, userID: planned.change.userID)
                    }
            }
            writes.step(
                "superseded_previews",
                """
                update notification_outbox o
                   set status = 'cancelled', next_attempt_at = 'infinity',
                       last_error = 'superseded: the preview was decided again for this call time'
                  from unnest(\(again.map(\.change.userID)), \(again.map { $0.change.callID.uuidString.lowercased() }),
                              \(again.map { $0.change.scheduledAt.formatted(.iso8601) }))
                       as v(user_id, call_id, scheduled_at)
                 where o.user_id = v.user_id and o.job = \(definition.name) and o.status = 'pending'
                   and o.payload->>'call_id' = v.call_id and o.payload->>'scheduled_at' = v.scheduled_at
                   and o.dedupe_key <> all(\(keys))
                """)
        }
        return writes
    }
}
