import Synchronization

/// A count of the changes to something a test watches (a stand-in's log, a server's state), and
/// the tasks waiting for the next one: a test looks again when something changed, never on a
/// timer.
public final class Changes: Sendable {
    private struct State {
        var count = 0
        var waiting: [Int: CheckedContinuation<Void, Never>] = [:]
        var cancelled: Set<Int> = []
        var nextWaiter = 0
    }

    private let state = Mutex(State())

    public init() {}

    /// How many changes there have been.
    public var count: Int { state.withLock { $0.count } }

    /// One more change: every task waiting for one goes on.
    public func changed() {
        let waiting = state.withLock { state in
            state.count += 1
            defer { state.waiting = [:] }
            return Array(state.waiting.values)
        }
        for continuation in waiting { continuation.resume() }
    }

    /// Returns once there have been more than `count` changes, or when the task is cancelled.
    public func change(after count: Int) async {
        let id = state.withLock { state in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state in
                    if state.count > count || state.cancelled.remove(id) != nil { return true }
                    state.waiting[id] = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            let waiting = state.withLock { state in
                guard let continuation = state.waiting.removeValue(forKey: id) else {
                    state.cancelled.insert(id)
                    return CheckedContinuation<Void, Never>?.none
                }
                return continuation
            }
            waiting?.resume()
        }
    }
}
