import Foundation
import Logging
import PostgresNIO

/// leaderboard-refresh: for each FitCircle, in the circle's zone, the daily, weekly, monthly and
/// all-time boards of `fitcircle_leaderboard_entries` (docs/jobs/leaderboard-refresh.md), from what
/// the members submitted, on the page's cadence (`LeaderboardCadence`), ranked by
/// `LeaderboardStandings`. A board whose inputs did not change since it was last computed is
/// neither read nor written again; one that did is compared with its stored entries and only the
/// difference is written. Members moved by 3 places or more are told (`LeaderboardMoves`).
public struct LeaderboardRefreshJob: PlainJob {
    public static let jobName = "leaderboard-refresh"

    public let definition: JobDefinition
    /// The members' zones, for the day their movement notification counts on.
    let calendars = CalendarCache()

    public init(definition: JobDefinition) {
        self.definition = definition
    }

    public var source: CircleSource { CircleSource() }

    /// A board's stored entry for one member.
    public struct StoredEntry: Sendable, Equatable {
        public let metricType: String
        public let value: Decimal?
        public let rank: Int?
        public let rankChange: Int?
    }

    /// A submission no refresh has ranked yet.
    public struct PendingSubmission: Sendable, Equatable {
        public let id: UUID
        public let userID: UUID
    }

    public struct Facts: Sendable {
        public let members: [CircleMember]
        public let due: [DueBoard]
        public let states: [Board: BoardState]
        /// The digest of each due board's inputs now, and its part covering the submissions.
        public let inputs: [Board: String]
        public let submissions: [Board: SubmissionsDigest]
        /// For the boards to compute and the boards before them: each member's submitted totals.
        public let totals: [Board: [UUID: SubmittedTotals]]
        public let stored: [Board: [UUID: StoredEntry]]
        /// Daily boards to compute: their day's submissions not ranked yet.
        public let pending: [Board: [PendingSubmission]]
        /// The movement notifications already queued for the circle's members, recently.
        public let sent: [UUID: [LeaderboardMoves.Sent]]
    }

    /// What a refresh writes for one board.
    public struct BoardWrite: Sendable {
        public let board: Board
        public let inputs: String
        public let submissions: SubmissionsDigest?
        public let isFinal: Bool
        /// The entries to insert or update, and the members whose entries go (no longer on the roster).
        public let upserts: [Standing]
        public let removals: [UUID]
        /// Submissions ranked: their rank after the submission, and places gained.
        public let ranked: [(id: UUID, rank: Int, change: Int?)]
    }

    public struct Change: Sendable {
        public let circleID: UUID
        public let boards: [BoardWrite]
    }

    /// Final boards, board states, members, input digests, totals, stored entries, pending
    /// submissions, and the notifications already sent.
    public var readStatements: Int { 8 }

    // MARK: Reading

    public func loadFacts(for circles: [CircleInTime], run: RunContext, on connection: PostgresConnection) async throws -> [UUID: Facts] {
        let logger = run.logger

        // How far each period's boards are final, then what is remembered of the boards that may be due.
        var lastFinal: [UUID: [LeaderboardPeriod: LocalDate]] = [:]
        let finalRows = try await connection.query(
            """
            select fitcircle_id, period, max(period_start) from leaderboard_boards
             where fitcircle_id = any(\(circles.map(\.circle.id))) and final and period <> 'all_time'
             group by 1, 2
            """, logger: logger)
        for try await (circleID, period, start) in finalRows.decode((UUID, String, LocalDate).self) {
            guard let period = LeaderboardPeriod(rawValue: period) else { continue }
            lastFinal[circleID, default: [:]][period] = start
        }
        let candidatesOf = Dictionary(
            uniqueKeysWithValues: circles.map { circle in
                (
                    circle.circle.id,
                    LeaderboardCadence.candidates(
                        for: circle, now: run.now, window: run.window,
                        lastFinal: lastFinal[circle.circle.id] ?? [:])
                )
            })
        let candidates = circles.flatMap { circle in candidatesOf[circle.circle.id]!.map { (circle.circle.id, $0) } }
        var states: [UUID: [Board: BoardState]] = [:]
        if !candidates.isEmpty {
            let byKey = Dictionary(candidates.map { ("\($0.0)|\($0.1.period.rawValue)|\($0.1.start)", $0.1) }) { first, _ in first }
            let rows = try await connection.query(
                """
                select b.fitcircle_id, b.period, b.period_start, b.inputs, b.checked_at, b.final,
                       b.submissions_digest, b.submissions_change
                  from unnest(\(candidates.map(\.0)), \(candidates.map(\.1.period.rawValue)), \(candidates.map(\.1.start)))
                       as c(fitcircle_id, period, period_start)
                 cross join lateral (
                       select * from leaderboard_boards b
                        where b.fitcircle_id = c.fitcircle_id and b.period = c.period and b.period_start = c.period_start
                       offset 0) b   -- one key lookup each, however many boards the table holds
                """, logger: logger)
            for try await (circleID, period, start, inputs, checkedAt, isFinal, submissionsDigest, submissionsChange)
                in rows.decode((UUID, String, LocalDate, String, Date, Bool, String?, Int64?).self)
            {
                guard let board = byKey["\(circleID)|\(period)|\(start)"] else { continue }
                let submissions = submissionsDigest.flatMap { digest in
                    submissionsChange.map { SubmissionsDigest(digest: digest, change: $0) }
                }
                states[circleID, default: [:]][board] = BoardState(
                    inputs: inputs, checkedAt: checkedAt, isFinal: isFinal,
                    submissions: submissions)
            }
        }

        // The members' zones: a board is final only once its last day has ended in every one of them.
        // A member without one lives in UTC, as in every job (docs/jobs/leaderboard-refresh.md, "Cadence").
        var zones: [UUID: [LocalCalendar]] = [:]
        if !candidates.isEmpty {
            let rows = try await connection.query(
                """
                select distinct m.fitcircle_id, u.timezone
                  from fitcircle_members m join users u on u.id = m.user_id
                 where m.fitcircle_id = any(\(Array(Set(candidates.map(\.0)))))
                """, logger: logger)
            for try await (circleID, timezone) in rows.decode((UUID, String?).self) {
                // A member's unknown zone is no later midnight than the circle's own (it fails their own jobs).
                guard let calendar = try? calendars.calendar(for: timezone) else { continue }
                zones[circleID, default: []].append(calendar)
            }
        }

        var due: [UUID: [DueBoard]] = [:]
        for circle in circles {
            let boards = LeaderboardCadence.due(
                among: candidatesOf[circle.circle.id]!, of: circle, now: run.now, window: run.window,
                states: states[circle.circle.id] ?? [:], members: zones[circle.circle.id] ?? [])
            if !boards.isEmpty { due[circle.circle.id] = boards }
        }
        let byID = Dictionary(uniqueKeysWithValues: circles.map { ($0.circle.id, $0) })
        let dueBoards = due.flatMap { id, boards in boards.map { (byID[id]!, $0) } }

        // The digest of each due board's inputs, in the database: the circle; each member with their
        // weights and whether they are on the board's roster and on the previous board's; every
        // submission the board and the previous board are computed from. Sums of the rows' hashes
        // (by their columns' own hash functions), so that no row is sent and nothing is sorted.
        // The submissions' part is read again only when the circle's change mark has moved since
        // the board's was taken (in the same statement, so the mark and the rows agree): an hourly
        // weekly board does not read two weeks of submissions to find nothing new.
        var inputs: [UUID: [Board: String]] = [:]
        var submissions: [UUID: [Board: SubmissionsDigest]] = [:]
        if !dueBoards.isEmpty {
            let described = dueBoards.map { circle, due in
                let row = circle.circle
                let previousEnds = due.board.previous.flatMap { $0.countedDays(in: row) }.map { circle.calendar.end(of: $0.upperBound) }
                return (
                    row.id, due.board, "\(row.challenge.rawValue)|\(row.startsOn)|\(row.endsOn)|\(row.timezone)|\(previousEnds != nil)",
                    Self.inputDays(of: due.board, in: row), due.standsAt, previousEnds ?? due.standsAt,
                    states[row.id]?[due.board]?.submissions
                )
            }
            let rows = try await connection.query(
                """
                select b.i, coalesce(k.change, 0), p.submissions, md5(concat_ws('|', b.base,
                         (select count(*) || ':' || coalesce(sum(hash_record_extended((m.user_id,
                                     m.starting_weight, m.target_weight,
                                     m.joined_at <= b.stands_at and (m.left_at is null or m.left_at > b.stands_at),
                                     m.joined_at <= b.previous_ends and (m.left_at is null or m.left_at > b.previous_ends)), 0)), 0)
                            from fitcircle_members m where m.fitcircle_id = b.fitcircle_id),
                         p.submissions))
                  from unnest(\(Array(0..<described.count)), \(described.map(\.0)), \(described.map(\.2)),
                              \(described.map(\.3.lowerBound)), \(described.map(\.3.upperBound)), \(described.map(\.4)),
                              \(described.map(\.5)), \(described.map { $0.6?.digest ?? "" }), \(described.map { $0.6?.change ?? -1 }))
                       as b(i, fitcircle_id, base, first_day, last_day, stands_at, previous_ends, known_digest, known_change)
                  left join fitcircle_submission_marks k on k.fitcircle_id = b.fitcircle_id
                 cross join lateral (
                       select case when b.known_change = coalesce(k.change, 0) then b.known_digest
                                   else (select count(*) || ':' || coalesce(sum(hash_record_extended((s.user_id, s.submission_date,
                                                    s.steps, s.weight, s.submitted_at), 0)), 0)
                                           from fitcircle_data_submissions s
                                          where s.fitcircle_id = b.fitcircle_id and s.submission_date between b.first_day and b.last_day)
                              end as submissions) p
                """, logger: logger)
            for try await (index, change, part, digest) in rows.decode((Int, Int64, String, String).self) {
                // The rules' version: a change of rules recomputes every board.
                inputs[described[index].0, default: [:]][described[index].1] = Self.rulesVersion + digest
                submissions[described[index].0, default: [:]][described[index].1] = SubmissionsDigest(digest: part, change: change)
            }
        }

        // The boards to compute: changed since last time, or forced by a backfill.
        let compute = dueBoards.filter { circle, due in
            let id = circle.circle.id
            return due.reason == .backfill || states[id]?[due.board]?.inputs != inputs[id]?[due.board]
        }
        // The members of the circles with a board to compute.
        var members: [UUID: [CircleMember]] = [:]
        if !compute.isEmpty {
            let memberRows = try await connection.query(
                """
                select m.fitcircle_id, m.user_id, m.joined_at, m.left_at, m.starting_weight::text, m.target_weight::text,
                       u.timezone, u.locale
                  from fitcircle_members m join users u on u.id = m.user_id
                 where m.fitcircle_id = any(\(Array(Set(compute.map(\.0.circle.id)))))
                 order by m.fitcircle_id, m.user_id
                """, logger: logger)
            for try await (circleID, userID, joinedAt, leftAt, starting, target, timezone, locale)
                in memberRows.decode((UUID, UUID, Date, Date?, String?, String?, String?, String).self)
            {
                members[circleID, default: []].append(
                    CircleMember(
                        userID: userID, joinedAt: joinedAt, leftAt: leftAt, startingWeight: starting.flatMap { Decimal(string: $0) },
                        targetWeight: target.flatMap { Decimal(string: $0) }, timezone: timezone, locale: locale))
            }
        }

        var windows: [(UUID, Board, ClosedRange<LocalDate>, LocalDate)] = []
        var windowKeys: Set<String> = []
        for (circle, due) in compute {
            for board in [due.board, due.board.previous].compactMap({ $0 }) {
                guard let days = board.countedDays(in: circle.circle), let from = Self.firstDayRead(by: board, in: circle.circle),
                    windowKeys.insert("\(circle.circle.id)|\(board)").inserted
                else { continue }
                windows.append((circle.circle.id, board, days, from))
            }
        }
        var totals: [UUID: [Board: [UUID: SubmittedTotals]]] = [:]
        if !windows.isEmpty {
            let rows = try await connection.query(
                """
                select w.i, s.user_id,
                       coalesce(sum(s.steps) filter (where s.submission_date >= w.first_day), 0)::int8,
                       max(s.submitted_at) filter (where s.submission_date >= w.first_day and s.steps > 0),
                       coalesce(array_agg(s.submission_date order by s.submission_date, s.submitted_at)
                                  filter (where s.weight is not null), '{}'),
                       coalesce(array_agg(s.weight::text order by s.submission_date, s.submitted_at)
                                  filter (where s.weight is not null), '{}'),
                       coalesce(array_agg(s.submitted_at order by s.submission_date, s.submitted_at)
                                  filter (where s.weight is not null), '{}')
                  from unnest(\(Array(0..<windows.count)), \(windows.map(\.0)), \(windows.map(\.2.lowerBound)),
                              \(windows.map(\.2.upperBound)), \(windows.map(\.3)))
                       as w(i, fitcircle_id, first_day, last_day, read_from)
                  join fitcircle_data_submissions s on s.fitcircle_id = w.fitcircle_id
                                                   and s.submission_date between w.read_from and w.last_day
                 group by w.i, s.user_id
                """, logger: logger)
            for try await (index, userID, steps, stepsAt, days, weights, times)
                in rows.decode((Int, UUID, Int, Date?, [LocalDate], [String], [Date]).self)
            {
                let window = windows[index]
                let weighIns = zip(days, zip(weights, times)).compactMap { day, weighed in
                    Decimal(string: weighed.0).map { WeighIn(day: day, weight: $0, at: weighed.1) }
                }
                totals[window.0, default: [:]][window.1, default: [:]][userID] = SubmittedTotals(
                    steps: steps, stepsAt: stepsAt, weighIns: weighIns)
            }
        }

        var stored: [UUID: [Board: [UUID: StoredEntry]]] = [:]
        var pending: [UUID: [Board: [PendingSubmission]]] = [:]
        if !compute.isEmpty {
            let boards = compute.map { ($0.0.circle.id, $0.1.board) }
            let rows = try await connection.query(
                """
                select b.i, e.user_id, e.metric_type, e.metric_value::text, e.rank, e.rank_change
                  from unnest(\(Array(0..<boards.count)), \(boards.map(\.0)), \(boards.map(\.1.period.rawValue)),
                              \(boards.map(\.1.start))) as b(i, fitcircle_id, period, period_start)
                  join fitcircle_leaderboard_entries e using (fitcircle_id, period, period_start)
                """, logger: logger)
            for try await (index, userID, metricType, value, rank, rankChange)
                in rows.decode((Int, UUID, String, String?, Int?, Int?).self)
            {
                stored[boards[index].0, default: [:]][boards[index].1, default: [:]][userID] = StoredEntry(
                    metricType: metricType, value: value.flatMap { Decimal(string: $0) }, rank: rank, rankChange: rankChange)
            }
            let daily = boards.filter { $0.1.period == .daily }
            if !daily.isEmpty {
                let rows = try await connection.query(
                    """
                    select b.i, s.id, s.user_id
                      from unnest(\(Array(0..<daily.count)), \(daily.map(\.0)), \(daily.map(\.1.start))) as b(i, fitcircle_id, day)
                      join fitcircle_data_submissions s on s.fitcircle_id = b.fitcircle_id and s.submission_date = b.day
                     where s.rank_after_submission is null
                    """, logger: logger)
                for try await (index, id, userID) in rows.decode((Int, UUID, UUID).self) {
                    pending[daily[index].0, default: [:]][daily[index].1, default: []].append(PendingSubmission(id: id, userID: userID))
                }
            }
        }

        // The movement notifications already queued for the members of boards that may move.
        var sent: [UUID: [LeaderboardMoves.Sent]] = [:]
        let told = Set(
            compute.filter { circle, due in
                due.reason == .cadence && [.daily, .weekly].contains(due.board.period) && states[circle.circle.id]?[due.board] != nil
            }
            .flatMap { circle, _ in (members[circle.circle.id] ?? []).map(\.userID) })
        if !told.isEmpty {
            let rows = try await connection.query(
                """
                select user_id, local_day, deliver_after from notification_outbox
                 where user_id = any(\(Array(told))) and notification_type = \(LeaderboardMoves.type)
                   and deliver_after > \(run.now.addingTimeInterval(-2 * 86_400))
                """, logger: logger)
            for try await (userID, localDay, deliverAfter) in rows.decode((UUID, LocalDate, Date).self) {
                sent[userID, default: []].append(LeaderboardMoves.Sent(localDay: localDay, deliverAfter: deliverAfter))
            }
        }

        return Dictionary(
            uniqueKeysWithValues: circles.map { circle in
                let id = circle.circle.id
                return (
                    id,
                    Facts(
                        members: members[id] ?? [], due: due[id] ?? [], states: states[id] ?? [:], inputs: inputs[id] ?? [:],
                        submissions: submissions[id] ?? [:],
                        totals: totals[id] ?? [:], stored: stored[id] ?? [:], pending: pending[id] ?? [:], sent: sent)
                )
            })
    }

    /// The first day whose submissions a board's values read: its first counted day; for a
    /// weight-loss board, the challenge's first (a weight stands until the next weigh-in). Nil
    /// for a board with no counted days.
    static func firstDayRead(by board: Board, in circle: CircleRow) -> LocalDate? {
        guard let days = board.countedDays(in: circle) else { return nil }
        return circle.challenge == .weightLoss ? circle.startsOn : days.lowerBound
    }

    /// The days whose submissions a board's values come from: its own and the previous board's
    /// (for `rank_change`), as far back as either reads.
    static func inputDays(of board: Board, in circle: CircleRow) -> ClosedRange<LocalDate> {
        let from = board.previous.flatMap { firstDayRead(by: $0, in: circle) } ?? firstDayRead(by: board, in: circle)!
        return from...board.countedDays(in: circle)!.upperBound
    }

    // MARK: Deciding

    public func decide(for circle: CircleInTime, facts: Facts?, run: RunContext) throws -> Decision<Change> {
        guard let facts, !facts.due.isEmpty else {
            return .nothingDue("no board is due at \(circle.calendar.localTime(at: run.now)) circle time")
        }
        let row = circle.circle
        var writes: [BoardWrite] = []
        var notifications: [OutboxMessage] = []
        var tally: [String: Int] = [:]
        var sent = facts.sent
        for due in facts.due {
            let board = due.board
            let inputs = facts.inputs[board] ?? ""
            if due.isFinal { tally["boards_final", default: 0] += 1 }
            let submissions = facts.submissions[board]
            if due.reason != .backfill, let state = facts.states[board], state.inputs == inputs {
                tally["boards_unchanged", default: 0] += 1
                // Remembered when the cadence asks, or when the circle's mark moved for other days
                // than the board's (so that the next look does not read its submissions again).
                if LeaderboardCadence.remembersLook(at: due, now: run.now, calendar: circle.calendar) || state.submissions != submissions {
                    writes.append(
                        BoardWrite(
                            board: board, inputs: inputs, submissions: submissions, isFinal: due.isFinal,
                            upserts: [], removals: [], ranked: []))
                }
                continue
            }
            let roster = facts.members.filter { $0.isOnRoster(at: due.standsAt) }
            var previousRanks: [UUID: Int]?
            if let previous = board.previous, let days = previous.countedDays(in: row) {
                let ends = circle.calendar.end(of: days.upperBound)
                previousRanks = LeaderboardStandings.placesHeld(
                    LeaderboardStandings.rank(
                        members: facts.members.filter { $0.isOnRoster(at: ends) }, totals: facts.totals[previous] ?? [:],
                        circle: row, board: previous, previousRanks: nil
                    ).standings)
            }
            let (standings, gaps) = LeaderboardStandings.rank(
                members: roster, totals: facts.totals[board] ?? [:],
                circle: row, board: board, previousRanks: previousRanks)
            for (userID, gap) in gaps {
                run.logger.notice(
                    "member has no place on the board",
                    metadata: [
                        LogKey.userID: "\(userID.uuidString.lowercased())", "nudge.circle": "\(row.id.uuidString.lowercased())",
                        "nudge.board": "\(board)", LogKey.reason: "\(gap)",
                    ])
                tally["members_without_goal", default: 0] += 1
            }
            let stored = facts.stored[board] ?? [:]
            let upserts = standings.filter { standing in
                stored[standing.userID]
                    != StoredEntry(
                        metricType: standing.metricType, value: standing.value, rank: standing.rank,
                        rankChange: standing.rankChange)
            }
            let onBoard = Set(standings.map(\.userID))
            let removals = stored.keys.filter { !onBoard.contains($0) }.sorted(by: LeaderboardStandings.isBefore)
            // A submission's rank after it: the member's place on its day's board; its change, the
            // places that day gained against the day before (the entry's).
            let byMember = Dictionary(uniqueKeysWithValues: standings.map { ($0.userID, $0) })
            let ranked = (facts.pending[board] ?? []).compactMap { submission -> (id: UUID, rank: Int, change: Int?)? in
                guard let standing = byMember[submission.userID], let rank = standing.rank else { return nil }
                return (submission.id, rank, standing.rankChange)
            }
            writes.append(
                BoardWrite(
                    board: board, inputs: inputs, submissions: submissions, isFinal: due.isFinal, upserts: upserts,
                    removals: removals, ranked: ranked))
            tally["boards_refreshed", default: 0] += 1
            tally["entries_written", default: 0] += upserts.count
            tally["entries_removed", default: 0] += removals.count
            tally["submissions_ranked", default: 0] += ranked.count

            // Members who moved 3 places or more since the previous refresh of a board whose period
            // runs in circle time (a day that ended for the circle but not yet for a member west
            // of it is no news to the others); ranks Nudge did not compute itself by these rules
            // (a board it meets for the first time, or one computed before an upgrade, where a
            // weight from before the period held a place) are no previous refresh.
            guard due.reason == .cadence, let state = facts.states[board], state.inputs.hasPrefix(Self.rulesVersion),
                run.now < circle.calendar.end(of: board.countedDays(in: row)!.upperBound)
            else { continue }
            // Only places held with a value: rows stored before members without one went unranked
            // (a 0 of steps) were the order of the ids.
            let before = stored.filter { entry in
                guard let value = entry.value.value else { return false }
                return entry.value.metricType != "steps" || value != 0
            }.compactMapValues(\.rank)
            let moves = LeaderboardMoves.moves(on: board.period, before: before, after: standings)
                .sorted { abs($0.places) > abs($1.places) }
            for move in moves {
                // `--user`: only those users are told anything.
                if !run.users.isEmpty && !run.users.contains(move.userID) {
                    tally["moves_of_other_users", default: 0] += 1
                    continue
                }
                guard let member = roster.first(where: { $0.userID == move.userID }),
                    let calendar = try? calendars.calendar(for: member.timezone)
                else {
                    tally["moves_not_told", default: 0] += 1
                    continue
                }
                let today = calendar.localDate(at: run.now)
                guard LeaderboardMoves.allowed(now: run.now, today: today, sent: sent[move.userID] ?? []) else {
                    tally["moves_throttled", default: 0] += 1
                    continue
                }
                sent[move.userID, default: []].append(LeaderboardMoves.Sent(localDay: today, deliverAfter: run.now))
                notifications.append(
                    OutboxMessage(
                        type: LeaderboardMoves.type, localDay: today, deliverAfter: run.now,
                        title: LeaderboardMoves.title(circle: row.name, locale: member.locale),
                        body: LeaderboardMoves.body(move, circle: row.name, locale: member.locale),
                        payload: LeaderboardMoves.payload(move, circleID: row.id), recipient: move.userID,
                        occasion: .withinDay(LeaderboardMoves.occasion(at: run.now))))
            }
        }
        if writes.isEmpty && notifications.isEmpty {
            return .nothingDue("its due boards are unchanged since their last refresh")
        }
        return .act(
            PlannedChange(
                itemID: row.id, change: Change(circleID: row.id, boards: writes), work: [],
                notifications: notifications, tally: tally))
    }

    // MARK: Writing

    public func writes(for changes: [PlannedChange<Change>], run: RunContext) -> BatchWrites {
        var writes = BatchWrites()
        let boards = changes.flatMap { change in change.change.boards.map { (change.change.circleID, $0) } }
        guard !boards.isEmpty else { return writes }
        writes.step(
            "boards",
            """
            insert into leaderboard_boards (fitcircle_id, period, period_start, inputs, checked_at, changed_at, final,
                                            submissions_digest, submissions_change)
            select fitcircle_id, period, period_start, inputs, \(run.now), case when changed then \(run.now)::timestamptz end, final,
                   nullif(submissions_digest, ''), nullif(submissions_change, -1)
              from unnest(\(boards.map(\.0)), \(boards.map(\.1.board.period.rawValue)), \(boards.map(\.1.board.start)),
                          \(boards.map(\.1.inputs)), \(boards.map { !$0.1.upserts.isEmpty || !$0.1.removals.isEmpty }),
                          \(boards.map(\.1.isFinal)), \(boards.map { $0.1.submissions?.digest ?? "" }),
                          \(boards.map { $0.1.submissions?.change ?? -1 }))
                   as b(fitcircle_id, period, period_start, inputs, changed, final, submissions_digest, submissions_change)
            on conflict (fitcircle_id, period, period_start) do update
               set inputs = excluded.inputs, checked_at = excluded.checked_at,
                   changed_at = coalesce(excluded.changed_at, leaderboard_boards.changed_at),
                   final = leaderboard_boards.final or excluded.final,
                   submissions_digest = excluded.submissions_digest, submissions_change = excluded.submissions_change
            """)
        let entries = boards.flatMap { circleID, write in write.upserts.map { (circleID, write.board, $0) } }
        if !entries.isEmpty {
            writes.step(
                "entries",
                """
                insert into fitcircle_leaderboard_entries (fitcircle_id, user_id, period, period_start, metric_type,
                                                           metric_value, rank, rank_change, last_updated)
                select fitcircle_id, user_id, period, period_start, metric_type, nullif(metric_value, '')::numeric,
                       nullif(rank, -2147483648),
                       nullif(rank_change, -2147483648), \(run.now)
                  from unnest(\(entries.map(\.0)), \(entries.map(\.2.userID)), \(entries.map(\.1.period.rawValue)),
                              \(entries.map(\.1.start)), \(entries.map(\.2.metricType)),
                              \(entries.map { $0.2.value.map { "\($0)" } ?? "" }), \(entries.map { $0.2.rank ?? Self.none }),
                              \(entries.map { $0.2.rankChange ?? Self.none }))
                       as e(fitcircle_id, user_id, period, period_start, metric_type, metric_value, rank, rank_change)
                on conflict (fitcircle_id, period, period_start, user_id) do update
                   set metric_type = excluded.metric_type, metric_value = excluded.metric_value, rank = excluded.rank,
                       rank_change = excluded.rank_change, last_updated = excluded.last_updated
                """)
        }
        let removals = boards.flatMap { circleID, write in write.removals.map { (circleID, write.board, $0) } }
        if !removals.isEmpty {
            writes.step(
                "removed_entries",
                """
                delete from fitcircle_leaderboard_entries e
                 using unnest(\(removals.map(\.0)), \(removals.map(\.1.period.rawValue)), \(removals.map(\.1.start)),
                              \(removals.map(\.2))) as r(fitcircle_id, period, period_start, user_id)
                 where e.fitcircle_id = r.fitcircle_id and e.period = r.period and e.period_start = r.period_start
                   and e.user_id = r.user_id
                """)
        }
        let ranked = boards.flatMap(\.1.ranked)
        if !ranked.isEmpty {
            writes.step(
                "ranked_submissions",
                """
                update fitcircle_data_submissions s
                   set rank_after_submission = r.rank, rank_change = nullif(r.change, -2147483648)
                  from unnest(\(ranked.map(\.id)), \(ranked.map(\.rank)), \(ranked.map { $0.change ?? Self.none }))
                       as r(id, rank, change)
                 where s.id = r.id and s.rank_after_submission is null
                """)
        }
        return writes
    }

    /// An absent rank change in the write's integer arrays.
    private static let none = Int(Int32.min)

    /// The version of the ranking rules, at the head of every board's input digest: v3, members
    /// without a value hold no place and weights carry forward; v4, a weight board's place needs
    /// a weigh-in within the board's own days.
    static let rulesVersion = "v4:"
}
