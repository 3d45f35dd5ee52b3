import Foundation
import Synchronization
import Testing
@testable import NudgeCore

/// What an operation saw of its own cancellation.
private final class Seen: Sendable {
    private let cancelled = Mutex(false)
    var wasCancelled: Bool { cancelled.withLock { $0 } }
    func markCancelled() { cancelled.withLock { $0 = true } }
}

private struct OwnError: Error {}

@Suite struct TimeoutTests {
    @Test func anOperationWithinItsLimitGivesItsValue() async throws {
        let value = try await withTimeout(.seconds(60)) { 42 }
        #expect(value == 42)
    }

    @Test func anOperationsOwnErrorIsItsOwn() async throws {
        await #expect(throws: OwnError.self) {
            try await withTimeout(.seconds(60)) { () async throws -> Int in throw OwnError() }
        }
    }

    /// The limit ends the wait with `TimedOut` and cancels the operation, which sees it.
    @Test func theLimitCancelsTheOperationAndSaysTimedOut() async throws {
        let seen = Seen()
        let started = ContinuousClock.now
        await #expect(throws: TimedOut.self) {
            try await withTimeout(.milliseconds(100)) { () async throws -> Int in
                do {
                    try await Task.sleep(for: .seconds(60))
                } catch {
                    seen.markCancelled()
                    throw error
                }
                return 1
            }
        }
        #expect(seen.wasCancelled)
        #expect(started.duration(to: .now) < .seconds(30))
    }

    /// An operation that ignores cancellation and ends with a value after its limit still ends
    /// as timed out: the limit came first.
    @Test func theLimitWinsOverALateValue() async throws {
        await #expect(throws: TimedOut.self) {
            try await withTimeout(.milliseconds(50)) { () async throws -> Int in
                let until = ContinuousClock.now + .milliseconds(300)
                while ContinuousClock.now < until { try? await Task.sleep(for: .milliseconds(20)) }
                return 1
            }
        }
    }

    /// Cancelling the caller cancels the operation.
    @Test func cancellingTheCallerCancelsTheOperation() async throws {
        let seen = Seen()
        let caller = Task {
            try await withTimeout(.seconds(60)) { () async throws -> Int in
                do {
                    try await Task.sleep(for: .seconds(60))
                } catch {
                    seen.markCancelled()
                    throw error
                }
                return 1
            }
        }
        try await Task.sleep(for: .milliseconds(100))
        caller.cancel()
        _ = await caller.result
        #expect(seen.wasCancelled)
    }
}
