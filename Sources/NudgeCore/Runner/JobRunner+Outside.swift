import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle
import Synchronization

/// A batch's calls to the outside world (`OutsideCalls`), bounded and stopped gracefully
/// (`JobRunner`).
extension JobRunner {
    /// Runs the job's outside step for the batch's changes, up to `--concurrency` at once, in the
    /// changes' order. After SIGTERM no new call starts, and the calls in flight get
    /// `shutdownGrace` to end before they are cancelled: their users are left undone.
    func completeOutside(
        _ planned: [PlannedChange<J.Change>], calls: JobCapabilities<J>.Outside,
        context: RunContext
    ) async -> OutsideResult {
        var outcomes = [OutsideOutcome<J.Change>?](repeating: nil, count: planned.count)
        let grace = options.shutdownGrace
        let clock = options.waitClock
        var timeLimitPassed = false
        var shuttingDown = Task.isShuttingDownGracefully
        await withTaskGroup(of: (Int, OutsideOutcome<J.Change>)?.self) { group in
            var next = 0
            var running = 0
            func startNext() {
                // Nothing new once the batch's bound has passed (the calls under way answer their
                // cancellation) or a signal came.
                guard next < planned.count, !timeLimitPassed, !shuttingDown, !Task.isShuttingDownGracefully else { return }
                running += 1
                let index = next
                let change = planned[index]
                next += 1
                group.addTask {
                    do {
                        return (index, .done(try await calls.complete(change, context)))
                    } catch let stop as RunStop {
                        return (index, .stopped(stop))
                    } catch let skip as UserSkip {
                        return (index, .skipped(skip.reason))
                    } catch  where Task.isCancelled || error is CancellationError {
                        return (index, .interrupted)
                    } catch {
                        return (index, .failed(describe(error)))
                    }
                }
            }
            // Watches for SIGTERM: nil when it comes (no new calls), then, after the grace, a
            // second nil that cancels the calls still in flight.
            group.addTask {
                do { try await gracefulShutdown() } catch { return (-1, .interrupted) }
                return nil
            }
            // The batch's bound, when the job's calls leave part of their waits to it (-2).
            if let limit = calls.timeLimit {
                group.addTask {
                    do { try await clock.sleep(for: limit) } catch { return (-1, .interrupted) }
                    return (-2, .interrupted)
                }
            }
            for _ in 0..<max(1, context.concurrency) { startNext() }
            while running > 0, let finished = await group.next() {
                switch finished {
                case (-2, _)?:
                    timeLimitPassed = true
                    group.cancelAll()
                case (let index, .interrupted)? where index >= 0 && timeLimitPassed && !shuttingDown:
                    outcomes[index] = .failed("its outside calls took longer than the batch's \(calls.timeLimit!)")
                    running -= 1
                case nil where !shuttingDown:
                    shuttingDown = true
                    group.addTask {
                        try? await clock.sleep(for: grace)
                        return Task.isCancelled ? (-1, .interrupted) : nil
                    }
                case nil:
                    group.cancelAll()
                case (let index, let outcome)? where index >= 0:
                    outcomes[index] = outcome
                    running -= 1
                    startNext()
                default:
                    break
                }
            }
            group.cancelAll()
        }
        var result = OutsideResult()
        for (change, outcome) in zip(planned, outcomes) {
            switch outcome {
            case .done(let change)?: result.completed.append(change)
            case .failed(let reason)?: result.failed.append((change.itemID, reason))
            case .skipped(let reason)?: result.skipped.append((change.itemID, reason))
            case .stopped(let stop)?:
                result.skipped.append((change.itemID, "not done: \(stop)"))
                result.undone.insert(change.itemID)
                result.stop = result.stop ?? stop
            case nil where timeLimitPassed && !shuttingDown:
                // Not started (more changes than `--concurrency`) when the bound passed: nothing
                // was tried, so the item is left for the next run as it was (a queue's rows go
                // back untouched, their attempt not spent); no signal came.
                result.skipped.append(
                    (
                        change.itemID,
                        "not done: its outside calls had not started when the batch's "
                            + "\(calls.timeLimit!) for them ran out; left to the next run"
                    ))
                result.undone.insert(change.itemID)
            case .interrupted?, nil:
                result.skipped.append((change.itemID, "not done: the run was stopped by a signal before this user's outside call ended; left to the next run"))
                result.undone.insert(change.itemID)
                result.interrupted = true
            }
        }
        return result
    }

    /// What the outside step made of a batch's changes.
    struct OutsideResult {
        var completed: [PlannedChange<J.Change>] = []
        var failed: [(UUID, String)] = []
        var skipped: [(UUID, String)] = []
        /// Users left for a later run (a `RunStop`, a signal); counted as skipped too.
        var undone: Set<UUID> = []
        var stop: RunStop?
        var interrupted = false
    }
}

/// How one user's outside step ended.
enum OutsideOutcome<Change: Sendable>: Sendable {
    case done(PlannedChange<Change>)
    case failed(String)
    case skipped(String)
    case stopped(RunStop)
    /// Cancelled by a signal, or never started after one.
    case interrupted
}
