import Foundation

/// A delivery a user already had: what the caps count. A grouped delivery is one, whatever the
/// number of notifications in it and of devices it reached.
public struct PastDelivery: Sendable, Equatable {
    public let type: String
    public let sentAt: Date
    /// The challenge it was about (`fitcircle_id`), for the per-challenge cap.
    public let challenge: String?
    /// The local day it was for (`notification_outbox.local_day`, set in the user's zone when it
    /// was decided): the per-day caps and the daily total count that day, and a weekly cap its
    /// week, not the day it happened to reach the user in, nor the day its instant falls on in a
    /// zone the user moved to since.
    public let localDay: LocalDate?

    public init(type: String, sentAt: Date, challenge: String? = nil, localDay: LocalDate? = nil) {
        self.type = type
        self.sentAt = sentAt
        self.challenge = challenge
        self.localDay = localDay
    }
}

/// The frequency caps on the user's local day, hour and week (docs/jobs/dispatch.md,
/// "Caps"). A day or a week is the one each notification was for (its `local_day`), never the one
/// its send instant falls on in the user's zone now: a user who moved east since yesterday's
/// 20:00 reminder does not find it counted on today.
public enum FrequencyCaps {
    /// Why one more delivery of `kind` at `now`, for local day `localDay` (nil: the user's today),
    /// would break a cap, or nil when none is reached.
    public static func refusal(
        for kind: NotificationKind, challenge: String?, localDay: LocalDate? = nil, at now: Date,
        calendar: LocalCalendar, past: [PastDelivery]
    ) -> String? {
        let day = localDay ?? calendar.localDate(at: now)
        // (A delivery recorded without its day counts on the day its instant falls on.)
        func dayOf(_ delivery: PastDelivery) -> LocalDate { delivery.localDay ?? calendar.localDate(at: delivery.sentAt) }
        if kind.heldByDailyTotal {
            let sentThatDay = past.count { dayOf($0) == day }
            if sentThatDay >= NotificationKind.dailyTotal {
                return "daily cap: \(sentThatDay) notifications already sent for \(day) (at most \(NotificationKind.dailyTotal) a day)"
            }
        }
        let own = past.filter { $0.type == kind.type }
        for cap in kind.caps {
            let count: Int
            let limit: Int
            switch cap {
            case .perLocalDay(let n):
                limit = n
                count = own.count { dayOf($0) == day }
            case .perHour(let n):
                limit = n
                count = own.count { (0..<3600).contains(now.timeIntervalSince($0.sentAt)) }
            case .perLocalWeek(let n):
                // The week the notification is about: a Sunday digest delivered late on Monday is
                // still the week before's, and does not hold the next Sunday's.
                limit = n
                count = own.count { dayOf($0).monday == day.monday }
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
