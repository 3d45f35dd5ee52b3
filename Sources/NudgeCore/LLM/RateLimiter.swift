/// At most `limit` requests in any `window`, shared by every task of a run: a sliding window, so
/// a run may send a burst up to the limit at once (as providers count them) and never more.
public actor RateLimiter {
    public let limit: Int
    public let window: Duration
    private let clock = ContinuousClock()
    /// When each request of the current window was let through, oldest first, from `head` on.
    private var sent: [ContinuousClock.Instant] = []
    private var head = 0
    /// Until when a provider asked everyone to wait (a 429 with `retry-after`).
    private var heldUntil: ContinuousClock.Instant?

    /// The window is widened by a quarter second so that jitter in the time a request takes to
    /// arrive cannot put `limit + 1` of them inside one of the provider's windows.
    public init(limit: Int, per window: Duration = .seconds(60)) {
        precondition(limit > 0, "a rate limit lets at least one request through")
        self.limit = limit
        self.window = window + .milliseconds(250)
    }

    /// Waits until one more request fits in the window, and counts it.
    public func acquire() async throws {
        while true {
            let now = clock.now
            if let heldUntil, heldUntil > now {
                try await Task.sleep(until: heldUntil, clock: clock)
                continue
            }
            while head < sent.count && sent[head] + window <= now { head += 1 }
            if head > 1_024 && head * 2 > sent.count {
                sent.removeFirst(head)
                head = 0
            }
            if sent.count - head < limit {
                sent.append(now)
                return
            }
            try await Task.sleep(until: sent[head] + window, clock: clock)
        }
    }

    /// Holds every request until `instant`: the provider said the account is over its limit.
    public func hold(until instant: ContinuousClock.Instant) {
        if let heldUntil, heldUntil >= instant { return }
        heldUntil = instant
    }
}
