import Foundation
import NIOCore
import Synchronization
import Testing

@testable import NudgeCore

/// Whether something happened in an operation (it was cancelled, it ran).
private final class Seen: Sendable {
    private let happened = Mutex(false)
    var wasSeen: Bool { happened.withLock { $0 } }
    func see() { happened.withLock { $0 = true } }
}

private struct OwnError: Error {}

/// `value`, `seconds` after the task has been cancelled: an operation that ignores its
/// cancellation and answers after the wait for it was decided.
private func valueOnceCancelled(_ value: Int, thenAfter seconds: Double = 0) async -> Int {
    try? await Task.sleep(for: .seconds(600))
    return await withCheckedContinuation { continuation in
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { continuation.resume(returning: value) }
    }
}

/// An operation that waits a minute unless cancelled, and says when it was.
private func sleepUntilCancelled(_ seen: Seen) async throws -> Int {
    do {
        try await Task.sleep(for: .seconds(60))
    } catch {
        seen.see()
        throw error
    }
    return 1
}

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
            try await withTimeout(.milliseconds(100)) { try await sleepUntilCancelled(seen) }
        }
        #expect(seen.wasSeen)
        #expect(started.duration(to: .now) < .seconds(30))
    }

    /// An operation that ignores cancellation and ends with a value after its limit still ends
    /// as timed out: the limit came first.
    @Test func theLimitWinsOverALateValue() async throws {
        await #expect(throws: TimedOut.self) {
            try await withTimeout(.milliseconds(50)) { () async throws -> Int in
                await valueOnceCancelled(1)
            }
        }
    }

    /// A limit this process's threads came to late (busy elsewhere: an answer may be queued
    /// behind them) is given as long again as they were late, once, and never longer than the
    /// limit itself.
    @Test func aLimitHeardLateIsGivenAGraceNoLongerThanTheLimit() {
        #expect(graceAfterLimit(late: .milliseconds(20), limit: .seconds(1)) == nil)
        #expect(graceAfterLimit(late: .milliseconds(300), limit: .seconds(1)) == .milliseconds(300))
        #expect(graceAfterLimit(late: .seconds(30), limit: .seconds(1)) == .seconds(1))
    }

    /// A value that comes after the limit (a connection made too late) is handed over to be
    /// discarded, never dropped: a PostgreSQL connection dropped unclosed traps in debug builds.
    @Test func aLateValueIsHandedOverToBeDiscarded() async throws {
        let discarded = Mutex<[Int]>([])
        await #expect(throws: TimedOut.self) {
            try await withTimeout(.milliseconds(50), discardingLate: { late in discarded.withLock { $0.append(late) } }) {
                await valueOnceCancelled(7)
            }
        }
        #expect(discarded.withLock { $0 } == [7])
        let onTime = try await withTimeout(.seconds(60), discardingLate: { late in discarded.withLock { $0.append(late) } }) { 8 }
        #expect(onTime == 8)
        #expect(discarded.withLock { $0 } == [7])
    }

    /// A caller cancelled before the call starts nothing.
    @Test func aCancelledCallerStartsNothing() async throws {
        let ran = Seen()
        let outcome = await Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await withTimeout(.seconds(60)) { () async throws -> Int in
                ran.see()
                return 1
            }
        }.result
        #expect(throws: CancellationError.self) { try outcome.get() }
        #expect(!ran.wasSeen)
    }

    /// Cancelling the caller cancels the operation.
    @Test func cancellingTheCallerCancelsTheOperation() async throws {
        let seen = Seen()
        let (started, starting) = AsyncStream.makeStream(of: Void.self)
        let caller = Task {
            try await withTimeout(.seconds(60)) { () async throws -> Int in
                starting.yield()
                return try await sleepUntilCancelled(seen)
            }
        }
        for await _ in started { break }
        caller.cancel()
        _ = await caller.result
        #expect(seen.wasSeen)
    }

    /// A value that comes after the caller was cancelled is handed over to be discarded too.
    @Test func aValueAfterTheCallerWasCancelledIsDiscarded() async throws {
        let discarded = Mutex<[Int]>([])
        let (started, starting) = AsyncStream.makeStream(of: Void.self)
        let caller = Task {
            try await withTimeout(.seconds(60), discardingLate: { late in discarded.withLock { $0.append(late) } }) {
                starting.yield()
                return await valueOnceCancelled(7, thenAfter: 0.3)
            }
        }
        for await _ in started { break }
        caller.cancel()
        let outcome = await caller.result
        #expect(throws: CancellationError.self) { try outcome.get() }
        #expect(discarded.withLock { $0 } == [7])
    }
}
