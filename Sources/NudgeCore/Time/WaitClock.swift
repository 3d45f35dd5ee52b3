import Foundation
import Synchronization

/// The clock Nudge's waits are measured on, as opposed to the instant a run decides at (`RunClock`):
/// how long dispatch drains, when a claim runs out, the shutdown grace, the pause between
/// push-trigger's batches, a provider's rate. Its instants are durations since the clock's own
/// origin. The real one is `ContinuousClock`'s (`SystemWaitClock`); a test moves a `ManualWaitClock` by
/// hand, so that what Nudge does at each moment is checked without waiting for it, whatever the
/// machine's load.
public protocol WaitClock: Sendable {
    /// The time since the clock's origin.
    func now() -> Duration

    /// Returns once the clock reads `deadline` or later; throws `CancellationError` when the task
    /// is cancelled first.
    func sleep(until deadline: Duration) async throws
}

extension WaitClock {
    public func sleep(for duration: Duration) async throws {
        try await sleep(until: now() + duration)
    }
}

/// The real time, on the monotonic clock.
public struct SystemWaitClock: WaitClock {
    private static let origin = ContinuousClock.now

    public init() {}

    public func now() -> Duration { Self.origin.duration(to: .now) }

    public func sleep(until deadline: Duration) async throws {
        try await Task.sleep(until: Self.origin + deadline, clock: .continuous)
    }
}

/// A clock that moves only when told (`advance`): each sleeper wakes once the clock reads its
/// deadline. A test waits for the code under test to sleep (`sleepers`), then moves the clock.
public final class ManualWaitClock: WaitClock {
    private struct Sleeper {
        let id: Int
        let deadline: Duration
        let wake: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now: Duration = .zero
        var sleepers: [Sleeper] = []
        var nextID = 0
        /// Every deadline slept until so far, in order.
        var deadlines: [Duration] = []
    }

    private let state = Mutex(State())
    private let asleep: AsyncStream<Duration>.Continuation
    /// Each deadline as a sleeper begins to wait for it.
    public let sleepers: AsyncStream<Duration>

    public init() {
        (sleepers, asleep) = AsyncStream.makeStream()
    }

    public func now() -> Duration { state.withLock { $0.now } }

    /// Every deadline slept until so far, in order.
    public var deadlines: [Duration] { state.withLock { $0.deadlines } }

    public func sleep(until deadline: Duration) async throws {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (wake: CheckedContinuation<Void, any Error>) in
                let now = state.withLock { state -> Bool in
                    state.deadlines.append(deadline)
                    if deadline <= state.now || Task.isCancelled { return true }
                    state.sleepers.append(Sleeper(id: id, deadline: deadline, wake: wake))
                    return false
                }
                if now {
                    if Task.isCancelled { wake.resume(throwing: CancellationError()) } else { wake.resume() }
                } else {
                    asleep.yield(deadline)
                }
            }
        } onCancel: {
            let sleeper = state.withLock { state -> Sleeper? in
                guard let index = state.sleepers.firstIndex(where: { $0.id == id }) else { return nil }
                return state.sleepers.remove(at: index)
            }
            sleeper?.wake.resume(throwing: CancellationError())
        }
    }

    /// Moves the clock on by `duration`, and wakes the sleepers whose deadline has come.
    public func advance(by duration: Duration) {
        let woken = state.withLock { state -> [Sleeper] in
            state.now += duration
            let now = state.now
            let woken = state.sleepers.filter { $0.deadline <= now }
            state.sleepers.removeAll { $0.deadline <= now }
            return woken
        }
        for sleeper in woken { sleeper.wake.resume() }
    }
}
