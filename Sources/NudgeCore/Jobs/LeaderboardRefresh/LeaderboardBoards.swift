import Foundation

/// The four leaderboards (docs/jobs/leaderboard-refresh.md).
public enum LeaderboardPeriod: String, CaseIterable, Sendable, Comparable {
    /// Resets at the circle's midnight.
    case daily
    /// Resets on Monday.
    case weekly
    /// Resets on the 1st.
    case monthly
    /// Since the challenge began.
    case allTime = "all_time"

    public static func < (lhs: LeaderboardPeriod, rhs: LeaderboardPeriod) -> Bool {
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }
}

/// One board: a circle's period, from `start` to the day before `next`, in the circle's local days.
public struct Board: Hashable, Sendable, CustomStringConvertible {
    public let period: LeaderboardPeriod
    public let start: LocalDate
    /// The first day after the period.
    public let next: LocalDate

    public init(period: LeaderboardPeriod, start: LocalDate, next: LocalDate) {
        self.period = period
        self.start = start
        self.next = next
    }

    /// The board of `period` that holds `day` (the all-time board holds the challenge's days).
    public static func of(_ period: LeaderboardPeriod, containing day: LocalDate, circle: CircleRow) -> Board {
        switch period {
        case .daily:
            return Board(period: .daily, start: day, next: day.adding(days: 1))
        case .weekly:
            return Board(period: .weekly, start: day.monday, next: day.monday.adding(days: 7))
        case .monthly:
            let (year, month, _) = day.components
            let first = LocalDate(year: year, month: month, day: 1)!
            let next = month == 12 ? LocalDate(year: year + 1, month: 1, day: 1)! : LocalDate(year: year, month: month + 1, day: 1)!
            return Board(period: .monthly, start: first, next: next)
        case .allTime:
            return Board(period: .allTime, start: circle.startsOn, next: circle.endsOn.adding(days: 1))
        }
    }

    /// The board of the period before this one: what `rank_change` is measured against. The
    /// all-time board has none.
    public var previous: Board? {
        guard period != .allTime else { return nil }
        let day = start.adding(days: -1)
        switch period {
        case .daily: return Board(period: .daily, start: day, next: start)
        case .weekly: return Board(period: .weekly, start: start.adding(days: -7), next: start)
        case .monthly:
            let (year, month, _) = day.components
            return Board(period: .monthly, start: LocalDate(year: year, month: month, day: 1)!, next: start)
        case .allTime: return nil
        }
    }

    /// The days whose submissions count on this board: the period's days within the challenge's,
    /// or nil when the challenge has none in it.
    public func countedDays(in circle: CircleRow) -> ClosedRange<LocalDate>? {
        let first = max(start, circle.startsOn)
        let last = min(next.adding(days: -1), circle.endsOn)
        return first <= last ? first...last : nil
    }

    public var description: String { "\(period.rawValue) \(start)" }
}

/// What leaderboard-refresh remembers of a board (`leaderboard_boards`).
public struct BoardState: Sendable, Equatable {
    /// The digest of everything the board was last computed from.
    public let inputs: String
    public let checkedAt: Date
    public let isFinal: Bool
    /// The part of `inputs` that covers the submissions, with the circle's change mark it was
    /// taken at: while the mark stands, the submissions are not read again.
    public let submissions: SubmissionsDigest?

    public init(inputs: String, checkedAt: Date, isFinal: Bool, submissions: SubmissionsDigest? = nil) {
        self.inputs = inputs
        self.checkedAt = checkedAt
        self.isFinal = isFinal
        self.submissions = submissions
    }
}

/// A board's digest of the submissions of its days (their count and the sum of their rows'
/// hashes), and the circle's change mark when it was taken (`fitcircle_submission_marks.change`,
/// which a trigger moves on every insert, change or delete of the circle's submissions; 0 before
/// the first).
public struct SubmissionsDigest: Sendable, Equatable {
    public let digest: String
    public let change: Int64

    public init(digest: String, change: Int64) {
        self.digest = digest
        self.change = change
    }
}

/// A board to refresh now, and how.
public struct DueBoard: Sendable, Equatable {
    public enum Reason: String, Sendable {
        /// Its slot of the cadence has come (docs/jobs/leaderboard-refresh.md, "Cadence").
        case cadence
        /// Its period ended (and the grace for late submissions passed): its final ranks.
        case final
        /// `--date`, `--from/--to`: recomputed whatever its state, telling nobody.
        case backfill
    }

    public let board: Board
    public let reason: Reason
    /// The instant the board stands at: now for a current board, the end of its last counted day
    /// for one whose period is over. The roster is the members on it then.
    public let standsAt: Date
    /// Whether the board holds its final ranks after this refresh.
    public let isFinal: Bool
}

/// The cadence (docs/jobs/leaderboard-refresh.md, "Cadence"), in the circle's zone: daily boards
/// every 5 minutes from 06:00 to 23:00 and hourly overnight, weekly boards hourly, monthly and
/// all-time boards daily (from 00:30); and a period's final refresh once it has ended and the grace
/// for late submissions (30 minutes) has passed. A pure function of the circle's clock and what is
/// remembered of its boards.
public enum LeaderboardCadence {
    /// A day's data may still be submitted for this long after the day ends
    /// (docs/jobs/leaderboard-refresh.md, "Cadence").
    public static let lateSubmissionGrace: TimeInterval = 30 * 60

    /// How many periods back a run looks for boards its predecessors left unfinished (an outage):
    /// a week of daily boards, four weeks, two months. Older ones take a backfill.
    static let catchUp: [LeaderboardPeriod: Int] = [.daily: 7, .weekly: 4, .monthly: 2]

    /// The boards a refresh at `now` may touch (those to look up the state of): for each period,
    /// the current board and the one before it, and, after the last board of that period already
    /// final (`lastFinal`, its start), the boards in between, up to `catchUp` periods back; in a
    /// backfill, every board holding a day of the window. Only boards with counted days that have
    /// begun by `now`, oldest first.
    public static func candidates(
        for circle: CircleInTime, now: Date, window: DayWindow?,
        lastFinal: [LeaderboardPeriod: LocalDate] = [:]
    ) -> [Board] {
        let calendar = circle.calendar
        let row = circle.circle
        let today = calendar.localDate(at: now)
        var boards: [Board] = []
        var seen: Set<Board> = []
        func add(_ board: Board?) {
            guard let board, let days = board.countedDays(in: row), days.lowerBound <= today, seen.insert(board).inserted
            else { return }
            boards.append(board)
        }
        if let window {
            let first = max(window.from, row.startsOn)
            let last = min(window.to, row.endsOn, today)
            guard first <= last else { return [] }
            for number in first.daysSinceEpoch...last.daysSinceEpoch {
                let day = LocalDate(daysSinceEpoch: number)
                for period in [LeaderboardPeriod.daily, .weekly, .monthly] { add(.of(period, containing: day, circle: row)) }
            }
            add(.of(.allTime, containing: first, circle: row))
            return boards
        }
        for period in LeaderboardPeriod.allCases {
            let current = Board.of(period, containing: today, circle: row)
            var earlier: [Board] = []
            var board = current.previous
            while let found = board {
                earlier.append(found)
                // Without a final board of this period yet, only the one before the current board.
                guard let last = lastFinal[period], found.start > last, earlier.count < catchUp[period] ?? 1 else { break }
                board = found.previous
            }
            for found in earlier.reversed() { add(found) }
            add(current)
        }
        return boards
    }

    /// Which of the candidate boards are due at `now`, given what is remembered of them.
    public static func due(
        for circle: CircleInTime, now: Date, window: DayWindow?, states: [Board: BoardState],
        lastFinal: [LeaderboardPeriod: LocalDate] = [:], members: [LocalCalendar] = []
    ) -> [DueBoard] {
        due(
            among: candidates(for: circle, now: now, window: window, lastFinal: lastFinal), of: circle, now: now, window: window,
            states: states, members: members)
    }

    /// When the members can no longer submit for `day`: its end in the latest of the circle's zone
    /// and the members' (`submission_date` is the member's own local date, so a Los Angeles
    /// member's Sunday ends nine hours after a Paris circle's).
    public static func lastEnd(of day: LocalDate, circle: LocalCalendar, members: [LocalCalendar]) -> Date {
        members.reduce(circle.end(of: day)) { latest, calendar in max(latest, calendar.end(of: day)) }
    }

    /// Which of `boards` (the circle's candidates, already found) are due at `now`. A board stands
    /// provisional, refreshed on its cadence, until its last day has ended for every member
    /// (`members`: the calendars of their zones); its final refresh comes once the grace for late
    /// submissions has passed after that.
    public static func due(
        among boards: [Board], of circle: CircleInTime, now: Date, window: DayWindow?,
        states: [Board: BoardState], members: [LocalCalendar] = []
    ) -> [DueBoard] {
        let calendar = circle.calendar
        return boards.compactMap { board in
            let lastDay = board.countedDays(in: circle.circle)!.upperBound
            // The roster of a board whose period is over is the members at its end in circle time.
            let ends = calendar.end(of: lastDay)
            let submissionsEnd = lastEnd(of: lastDay, circle: calendar, members: members)
            let isOver = now >= submissionsEnd.addingTimeInterval(lateSubmissionGrace)
            if window != nil {
                return DueBoard(board: board, reason: .backfill, standsAt: min(now, ends), isFinal: isOver)
            }
            let state = states[board]
            if state?.isFinal == true { return nil }
            if isOver { return DueBoard(board: board, reason: .final, standsAt: ends, isFinal: true) }
            // Between the last member's midnight and the end of the grace, the board waits for its final refresh.
            guard now < submissionsEnd else { return nil }
            if let checked = state?.checkedAt, checked >= slotStart(board.period, at: now, calendar: calendar, members: members) {
                return nil
            }
            return DueBoard(board: board, reason: .cadence, standsAt: min(now, ends), isFinal: false)
        }
    }

    /// Whether a look at an unchanged board must be remembered: not when its slot is as short
    /// as cron's five minutes (a daily board by day), since the next run is due for it anyway;
    /// that way a refresh with nothing new writes nothing then.
    public static func remembersLook(at board: DueBoard, now: Date, calendar: LocalCalendar) -> Bool {
        guard board.board.period == .daily, !board.isFinal else { return true }
        return !(6..<23).contains(calendar.localTime(at: now).hour)
    }

    /// When the cadence slot holding `now` began, counted from the circle's midnight (so that a
    /// day of 23 or 25 hours has its slots too): 5 minutes for a daily board from 06:00 to 23:00,
    /// an hour overnight and for a weekly board; for monthly and all-time boards the day, from
    /// when the day before can no longer change: the late-submission grace after the last
    /// member's midnight (00:30 in the circle's zone when nobody lives west of it).
    static func slotStart(
        _ period: LeaderboardPeriod, at now: Date, calendar: LocalCalendar,
        members: [LocalCalendar] = []
    ) -> Date {
        let today = calendar.localDate(at: now)
        let midnight = calendar.start(of: today)
        let slot: TimeInterval
        switch period {
        case .daily:
            let hour = calendar.localTime(at: now).hour
            slot = (6..<23).contains(hour) ? 300 : 3600
        case .weekly: slot = 3600
        case .monthly, .allTime:
            // The latest day settled by now (members up to 26 hours west keep more than one open).
            var day = today.adding(days: -1)
            while true {
                let settled = lastEnd(of: day, circle: calendar, members: members).addingTimeInterval(lateSubmissionGrace)
                if now >= settled { return settled }
                day = day.adding(days: -1)
            }
        }
        let elapsed = now.timeIntervalSince(midnight)
        return midnight.addingTimeInterval((elapsed / slot).rounded(.down) * slot)
    }
}
