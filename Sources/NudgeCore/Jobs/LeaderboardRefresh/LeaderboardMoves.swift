import Foundation

/// A leaderboard move (docs/jobs/leaderboard-refresh.md, "You moved" notifications): a member whose
/// daily or weekly rank moved by 3 places or more since the board's previous refresh is told, at
/// most once an hour and three times a local day (dispatch holds the same caps again when it
/// delivers).
public enum LeaderboardMoves {
    public static let type = "leaderboard_change"
    /// A move of at least this many places is told.
    public static let threshold = 3
    public static let perDay = 3
    public static let spacing: TimeInterval = 3600

    /// A member's move on one board.
    public struct Move: Sendable, Equatable {
        public let userID: UUID
        public let period: LeaderboardPeriod
        public let from: Int
        public let to: Int

        public var places: Int { from - to }
    }

    /// The moves worth telling on a refreshed board: members who held a place before and hold
    /// one after (a member without a value has none), 3 places or more apart.
    public static func moves(on period: LeaderboardPeriod, before: [UUID: Int], after: [Standing]) -> [Move] {
        guard period == .daily || period == .weekly else { return [] }
        return after.compactMap { standing in
            guard let from = before[standing.userID], let to = standing.rank, abs(from - to) >= threshold else { return nil }
            return Move(userID: standing.userID, period: period, from: from, to: to)
        }
    }

    /// A leaderboard notification already queued for a member.
    public struct Sent: Sendable, Equatable {
        public let localDay: LocalDate
        public let deliverAfter: Date

        public init(localDay: LocalDate, deliverAfter: Date) {
            self.localDay = localDay
            self.deliverAfter = deliverAfter
        }
    }

    /// Whether a member whose local day is `today` may be told now, given those already queued.
    public static func allowed(now: Date, today: LocalDate, sent: [Sent]) -> Bool {
        sent.filter { $0.localDay == today }.count < perDay
            && !sent.contains { abs($0.deliverAfter.timeIntervalSince(now)) < spacing }
    }

    /// What makes the notification's deduplication key unique: the hour it was decided in, so
    /// that two circles telling one member of a move in the same hour queue one notification.
    public static func occasion(at now: Date) -> String {
        "h\(Int((now.timeIntervalSince1970 / spacing).rounded(.down)))"
    }

    /// The circle's name (`UserText.circleName`); "Your FitCircle" when it cannot be shown.
    public static func title(circle: String, locale: String) -> String {
        UserText.circleName(circle) ?? (locale == "fr" ? "Ton FitCircle" : "Your FitCircle")
    }

    /// The copy (docs/jobs/leaderboard-refresh.md), naming the board that moved: "📈 You moved up to
    /// #3 on today's board in 'Work Warriors'! Can you reach #2?"; the way down, the place lost to
    /// win back. A name that cannot be shown (a link in it, say) reads "in your FitCircle".
    public static func body(_ move: Move, circle: String, locale: String) -> String {
        let french = locale == "fr"
        let place =
            switch (french, UserText.circleName(circle)) {
            case (true, let name?): "dans « \(name) »"
            case (true, nil): "dans ton FitCircle"
            case (false, let name?): "in '\(name)'"
            case (false, nil): "in your FitCircle"
            }
        let board =
            switch (french, move.period) {
            case (true, .weekly): "au classement de la semaine"
            case (true, _): "au classement du jour"
            case (false, .weekly): "on this week's board"
            case (false, _): "on today's board"
            }
        switch (french, move.places > 0, move.to) {
        case (true, true, 1): return "📈 Te voilà #1 \(board) \(place) ! Garde ta place !"
        case (true, true, let rank): return "📈 Te voilà #\(rank) \(board) \(place) ! Peux-tu décrocher la #\(rank - 1) ?"
        case (true, false, let rank): return "📉 Te voilà #\(rank) \(board) \(place). À toi de reprendre la #\(move.from) !"
        case (false, true, 1): return "📈 You moved up to #1 \(board) \(place)! Can you stay on top?"
        case (false, true, let rank): return "📈 You moved up to #\(rank) \(board) \(place)! Can you reach #\(rank - 1)?"
        case (false, false, let rank): return "📉 You dropped to #\(rank) \(board) \(place). Time to win back #\(move.from)!"
        }
    }

    /// The payload the app opens: the circle's board of that period.
    public static func payload(_ move: Move, circleID: UUID) -> String {
        let id = circleID.uuidString.lowercased()
        return
            #"{"type":"\#(type)","deep_link":"fitcircle://circles/\#(id)/leaderboard?period=\#(move.period.rawValue)","fitcircle_id":"\#(id)","period":"\#(move.period.rawValue)","rank":\#(move.to),"previous_rank":\#(move.from)}"#
    }
}
