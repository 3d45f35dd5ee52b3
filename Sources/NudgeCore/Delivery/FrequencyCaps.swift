import Foundation

/// A delivery a user already had: what the caps count. A grouped delivery is one, whatever the
/// number of notifications in it and of devices it reached.
public struct PastDelivery: Sendable, Equatable {
    public let type: String
    public let sentAt: Date
    /// The challenge it was about (`fitcircle_id`), for the per-challenge cap.
    public let challenge: String?
    /// The local day it was about (`notification_outbox.local_day`): a weekly cap counts the week
    /// a notification tells, not the one it happened to reach the user in.
    public let localDay: LocalDate?

    public init(type: String, sentAt: Date, challenge: String? = nil, localDay: LocalDate? = nil) {
        self.type = type
        self.sentAt = sentAt
        self.challenge = challenge
        self.localDay = localDay
    }
}

/// Seed 003 F6's frequency caps on the user's local day, hour and week.
public enum FrequencyCaps {
    /// Why one more delivery of `kind` at `now`, about local day `localDay`, would break a cap, or
    /// nil when none is reached.
    public static func refusal(for kind: NotificationKind, challenge: String?, localDay: LocalDate? = nil, at now: Date,
                               calendar: LocalCalendar, past: [PastDelivery]) -> String? {
        let today = calendar.localDate(at: now)
        if kind.heldByDailyTotal {
            let sentToday = past.count { calendar.localDate(at: $0.sentAt) == today }
            if sentToday >= NotificationKind.dailyTotal {
                return "daily cap: \(sentToday) notifications already sent on \(today) (at most \(NotificationKind.dailyTotal) a day)"
            }
        }
        let own = past.filter { $0.type == kind.type }
        for cap in kind.caps {
            let count: Int
            let limit: Int
            switch cap {
            case .perLocalDay(let n):
                limit = n
                count = own.count { calendar.localDate(at: $0.sentAt) == today }
            case .perHour(let n):
                limit = n
                count = own.count { (0..<3600).contains(now.timeIntervalSince($0.sentAt)) }
            case .perLocalWeek(let n):
                // The week the notification is about: a Sunday digest delivered late on Monday is
                // still the week before's, and does not hold the next Sunday's.
                limit = n
                let week = (localDay ?? today).monday
                count = own.count { ($0.localDay ?? calendar.localDate(at: $0.sentAt)).monday == week }
            case .perChallenge(let n):
                // A milestone that names no challenge cannot be counted against one.
                guard let challenge else { continue }
                limit = n
                count = own.count { $0.challenge == challenge }
            }
            if count >= limit {
                return "\(kind.type) cap: \(count) already sent (at most \(cap))"
            }
        }
        return nil
    }
}
