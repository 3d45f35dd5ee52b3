import Foundation
import Logging
import PostgresNIO

/// What dispatch reads about a batch's users before it decides (docs/jobs/dispatch.md, "Per
/// user, in this order"): their preferences, devices, the deliveries the caps count, what their
/// rows ask for, and, for call previews, each call and push as they stand.
extension DispatchJob {
    public func loadFacts(
        for items: [UserNotifications], run: RunContext,
        on connection: PostgresConnection
    ) async throws -> [UUID: Facts] {
        // The previews' facts first: a query sent while another's rows are still unread waits for
        // them, and they wait to be read (the run stood still until its time bound).
        let (calls, pushes) = try await previewFacts(for: items, run: run, on: connection)
        // What the rows that ask the user for something need to know (`DispatchRules.answered`):
        // their users' check-ins and submissions from the earliest day such a row is for.
        func asking(_ ask: NotificationKind.Ask) -> [UUID] {
            items.filter { $0.rows.contains { $0.kind.asks == ask } }.map(\.user.user.id)
        }
        let firstAsked = items.flatMap { $0.rows.filter { $0.kind.asks != nil }.map(\.localDay) }.min()
        let rows = try await connection.execute(
            FactsStatement(
                users: items.map(\.user.user.id), since: run.now.addingTimeInterval(-Self.capsLookBack),
                askingCheckIns: asking(.checkIn), askingSubmissions: asking(.submission),
                firstDay: firstAsked ?? LocalDate(daysSinceEpoch: 0), now: run.now),
            logger: run.logger)
        var facts: [UUID: Facts] = [:]
        for try await (
            id, hasRow, pushEnabled, emailEnabled, switchedOff, dndStart, dndEnd, pauseWeekends, tokenIDs, tokens,
            platforms, legacy, pastTypes, pastTimes, pastChallenges, pastDays, address, emailOff, phone, smsOptedOut,
            emailSuppression, checkInDays, checkInTimes, submissionDays, submissionTimes
        ) in rows {
            var preferences = DeliveryPreferences()
            preferences.emailSwitchedOff = Set(emailOff)
            if hasRow {
                preferences.pushEnabled = pushEnabled
                preferences.emailEnabled = emailEnabled
                preferences.pushSwitchedOff = Set(switchedOff)
                preferences.quietHours = try QuietHours(reading: dndStart, dndEnd, pauseWeekends: pauseWeekends)
            }
            guard tokenIDs.count == tokens.count, tokens.count == platforms.count,
                pastTypes.count == pastTimes.count, pastTimes.count == pastChallenges.count, pastDays.count == pastTypes.count,
                checkInDays.count == checkInTimes.count, submissionDays.count == submissionTimes.count
            else { throw MalformedData("the user's devices or deliveries changed while they were read") }
            var actions = UserActions()
            for (day, at) in zip(checkInDays, checkInTimes) {
                // ('epoch' stands for a check-in the app recorded without its instant.)
                actions.checkIns[day] = at > Date(timeIntervalSince1970: 0) ? at : Optional<Date>.none
            }
            for (day, at) in zip(submissionDays, submissionTimes) { actions.submissions[day] = at }
            var devices = tokenIDs.indices.map { Device(tokenID: tokenIDs[$0], token: tokens[$0], platform: platforms[$0]) }
            if let legacy { devices.append(Device(tokenID: nil, token: legacy, platform: "android")) }
            let sent = pastTypes.indices.map {
                PastDelivery(
                    type: pastTypes[$0], sentAt: pastTimes[$0], challenge: pastChallenges[$0].isEmpty ? nil : pastChallenges[$0],
                    localDay: pastDays[$0])
            }
            facts[id] = Facts(
                preferences: preferences, devices: devices, past: sent, address: address,
                emailSuppression: emailSuppression, phone: phone, smsOptedOut: smsOptedOut, calls: calls[id] ?? [:],
                pushes: pushes[id] ?? [:], actions: actions)
        }
        return facts
    }

    /// An outbox row `o` that reached the user: sent, on some device, or an SMS whose outcome is
    /// unknown (it may have). A call's preview is one such row a call time.
    static let reachedTheUser =
        "(o.sent_at is not null or o.delivered_to <> '{}' or (o.channel = 'sms' and o.last_error like 'outcome unknown%'))"

    /// For the batch's call previews (docs/jobs/preview-notifications.md): each call as it stands
    /// now, and each push a fallback SMS depends on, with its delivery receipt if the app recorded
    /// one. No statement when the batch has none.
    private func previewFacts(for items: [UserNotifications], run: RunContext, on connection: PostgresConnection) async throws
        -> (calls: [UUID: [UUID: DispatchRules.CallState]], pushes: [UUID: [String: DispatchRules.PushState]])
    {
        let rows = items.flatMap(\.rows)
        let callIDs = Array(Set(rows.compactMap { $0.call?.id }))
        let pushKeys = Array(Set(rows.compactMap { $0.payloadObject?["fallback_for"]?.text }))
        guard !callIDs.isEmpty || !pushKeys.isEmpty else { return ([:], [:]) }
        let answer = try await connection.query(
            """
            select c.user_id, 'call', c.id::text, c.status, c.scheduled_at, false,
                   coalesce((select array_agg(o.id::text || ' ' || coalesce(o.payload->>'scheduled_at', '') || ' ' || o.dedupe_key)
                               from notification_outbox o
                              where o.user_id = c.user_id and o.created_at >= \(run.now.addingTimeInterval(-Self.capsLookBack))
                                and o.payload->>'call_id' = c.id::text and \(unescaped: Self.reachedTheUser)), '{}')
              from scheduled_calls c where c.id = any(\(callIDs))
            union all
            select o.user_id, 'push', o.dedupe_key, o.status,
                   (select min(coalesce(l.delivered_at, l.created_at)) from notification_logs l
                     where l.outbox_id = o.id and (l.delivered_at is not null or l.delivered or l.status in ('delivered', 'opened'))),
                   o.status = 'suppressed' and o.last_error like \(DispatchRules.callStep + ": %"), '{}'::text[]
              from notification_outbox o where o.dedupe_key = any(\(pushKeys))
            """, logger: run.logger)
        var calls: [UUID: [UUID: DispatchRules.CallState]] = [:]
        var pushes: [UUID: [String: DispatchRules.PushState]] = [:]
        for try await (user, kind, key, status, instant, refused, reached)
            in answer.decode((UUID, String, String, String, Date?, Bool, [String]).self)
        {
            if kind == "call", let id = UUID(uuidString: key), let instant {
                let rows = reached.compactMap { text -> DispatchRules.CallState.Reached? in
                    let parts = text.split(separator: " ", maxSplits: 2).map(String.init)
                    guard parts.count == 3, let row = Int64(parts[0]) else { return nil }
                    return DispatchRules.CallState.Reached(row: row, scheduledAt: parts[1], key: parts[2])
                }
                calls[user, default: [:]][id] = DispatchRules.CallState(status: status, scheduledAt: instant, reached: rows)
            } else if kind == "push" {
                pushes[user, default: [:]][key] = DispatchRules.PushState(status: status, confirmedAt: instant, refusedForCall: refused)
            }
        }
        return (calls, pushes)
    }
}

/// What dispatch reads about a batch's users, prepared once per connection (its text never
/// changes, and planning it each batch cost as much as running it): preferences, active devices,
/// the deliveries the caps count and, for the users with a row that asks them for something, the
/// check-ins and submissions made by now from the earliest day such a row is for.
private struct FactsStatement: PostgresPreparedStatement {
    typealias Row = (
        UUID, Bool, Bool, Bool, [String], String, String, Bool, [UUID], [String], [String], String?,
        [String], [Date], [String], [LocalDate], String?, [String], String?, Bool, String?,
        [LocalDate], [Date], [LocalDate], [Date]
    )

    let users: [UUID]
    let since: Date
    let askingCheckIns: [UUID]
    let askingSubmissions: [UUID]
    let firstDay: LocalDate
    let now: Date

    static let name = "nudge_dispatch_facts_v9"

    /// The email switches that are off, each table's, by column (`DeliveryPreferences.emailSwitchedOff`):
    /// one pair per email type a user may stop.
    static let emailSwitchesOff =
        "array_remove(array["
        + EmailType.allCases.flatMap { type in
            [
                "case when not np.\(type.notificationPreference) then '\(type.notificationPreference)' end",
                "case when not ep.\(type.emailPreference) then 'email_preferences.\(type.emailPreference)' end",
            ]
        }.joined(separator: ", ") + "], null)"

    static let sql = """

            select u.id, np.user_id is not null, coalesce(np.push_enabled, true), coalesce(np.email_enabled, true),
                   array_remove(array[
                       case when not np.push_daily_checkin then 'push_daily_checkin' end,
                       case when not np.push_streak_risk then 'push_streak_risk' end,
                       case when not np.push_weekly_goal then 'push_weekly_goal' end,
                       case when not np.push_data_submission then 'push_data_submission' end,
                       case when not np.push_leaderboard_change then 'push_leaderboard_change' end,
                       case when not np.push_social_engagement then 'push_social_engagement' end,
                       case when not np.push_weekly_digest then 'push_weekly_digest' end,
                       case when not np.push_challenge_milestone then 'push_challenge_milestone' end], null),
                   coalesce(to_char(np.dnd_start, 'HH24:MI'), ''), coalesce(to_char(np.dnd_end, 'HH24:MI'), ''),
                   coalesce(np.pause_weekends, false),
                   coalesce(k.ids, '{}'), coalesce(k.tokens, '{}'), coalesce(k.platforms, '{}'),
                   case when u.fcm_token is not null and u.fcm_token <> '' and u.push_enabled
                             and not exists (select 1 from user_push_tokens t where t.user_id = u.id and t.device_token = u.fcm_token)
                        then u.fcm_token end,
                   coalesce(d.types, '{}'), coalesce(d.sent, '{}'), coalesce(d.challenges, '{}'), coalesce(d.days, '{}'),
                   nullif(btrim(u.email), ''),
                   \(emailSwitchesOff),
                   nullif(btrim(u.phone_number), ''),
                   -- The number as E.164 (PhoneNumber's), as sms_opt_outs keeps it.
                   exists (select 1 from sms_opt_outs so
                            where so.phone_number = '+' || regexp_replace(u.phone_number, '[^0-9]', '', 'g')),
                   -- Why no email goes to the address any more (a hard bounce, a complaint), if so.
                   (select case s.reason when 'hard_bounce' then 'the address bounced hard on '
                                         else 'the recipient marked an email as spam on ' end
                           || to_char(s.suppressed_at at time zone 'UTC', 'YYYY-MM-DD')
                           || coalesce(' (' || nullif(s.detail, '') || ')', '') || ' (email_suppressions)'
                      from email_suppressions s where s.address = lower(btrim(u.email))),
                   coalesce(ci.days, '{}'), coalesce(ci.ats, '{}'), coalesce(sb.days, '{}'), coalesce(sb.ats, '{}')
              from unnest($1::uuid[]) as i(id)
              join users u on u.id = i.id
              left join notification_preferences np on np.user_id = u.id
              left join email_preferences ep on ep.user_id = u.id
              left join lateral (
                  select array_agg(t.id order by t.created_at, t.id) as ids,
                         array_agg(t.device_token order by t.created_at, t.id) as tokens,
                         array_agg(t.platform order by t.created_at, t.id) as platforms
                    from user_push_tokens t where t.user_id = u.id and t.active) k on true
              left join lateral (
                  -- Each delivery once (a grouped one is several rows): what the caps count.
                  select array_agg(p.notification_type) as types, array_agg(p.sent_at) as sent,
                         array_agg(coalesce(p.challenge, '')) as challenges, array_agg(p.local_day) as days
                    from (select distinct on (coalesce(o.delivery_id, o.id)) o.notification_type, o.sent_at, o.challenge, o.local_day
                            from (
                                -- The last days' pushes (idx_outbox_user_sent), and every challenge milestone
                                -- (idx_outbox_user_type): never the user's whole history.
                                select r.id, r.delivery_id, r.notification_type, r.sent_at, r.payload->>'fitcircle_id' as challenge,
                                       r.local_day
                                  from notification_outbox r
                                 where r.user_id = u.id and r.sent_at >= $2 and r.sent_at is not null and r.channel = 'push'
                                union
                                select r.id, r.delivery_id, r.notification_type, r.sent_at, r.payload->>'fitcircle_id',
                                       r.local_day
                                  from notification_outbox r
                                 where r.user_id = u.id and r.notification_type = 'challenge_milestone' and r.sent_at is not null
                                   and r.channel = 'push') o
                           order by coalesce(o.delivery_id, o.id), o.sent_at) p) d on true
              -- A check-in counts once it is made: a row the app wrote ahead, stamped later, does not.
              -- ('epoch' stands for one recorded without its instant.)
              left join lateral (
                  select array_agg(t.date order by t.date) as days,
                         array_agg(coalesce(t.checked_in_at, 'epoch') order by t.date) as ats
                    from daily_tracking t
                   where u.id = any($3::uuid[]) and t.user_id = u.id and t.date >= $5
                     and t.mood is not null and t.energy is not null and (t.checked_in_at is null or t.checked_in_at <= $6)) ci on true
              left join lateral (
                  select array_agg(s.submission_date order by s.submission_date) as days,
                         array_agg(s.first order by s.submission_date) as ats
                    from (select d.submission_date, min(d.submitted_at) as first
                            from fitcircle_data_submissions d
                           where u.id = any($4::uuid[]) and d.user_id = u.id and d.submission_date >= $5
                             and d.submitted_at <= $6
                           group by d.submission_date) s) sb on true
        """

    static var bindingDataTypes: [PostgresDataType] { [.uuidArray, .timestamptz, .uuidArray, .uuidArray, .date, .timestamptz] }

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 6)
        bindings.append(users)
        bindings.append(since)
        bindings.append(askingCheckIns)
        bindings.append(askingSubmissions)
        bindings.append(firstDay)
        bindings.append(now)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        try row.decode(Row.self)
    }
}
