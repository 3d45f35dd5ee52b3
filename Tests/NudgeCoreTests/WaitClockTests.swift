import Testing

@testable import NudgeCore

@Suite struct WaitClockTests {
    /// A sleeper wakes once the clock reads its deadline, not before; one whose deadline has
    /// passed does not wait; a cancelled one ends with `CancellationError`; the deadlines are kept.
    @Test func aManualClockWakesEachSleeperAtItsDeadline() async throws {
        let clock = ManualWaitClock()
        var asleep = clock.sleepers.makeAsyncIterator()
        let first = Task {
            try await clock.sleep(for: .seconds(10))
            return clock.now()
        }
        #expect(await asleep.next() == .seconds(10))
        let second = Task {
            try await clock.sleep(until: .seconds(30))
            return clock.now()
        }
        #expect(await asleep.next() == .seconds(30))
        clock.advance(by: .seconds(9))
        let cancelled = Task { try await clock.sleep(until: .seconds(20)) }
        #expect(await asleep.next() == .seconds(20))
        cancelled.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
        clock.advance(by: .seconds(1))
        #expect(try await first.value == .seconds(10))
        clock.advance(by: .seconds(25))
        #expect(try await second.value == .seconds(35))
        try await clock.sleep(until: .seconds(5))
        #expect(clock.deadlines == [.seconds(10), .seconds(30), .seconds(20), .seconds(5)])
    }
}

/// `nudge serve`'s memory of the database's last answer, on the clock it is given.
@Suite struct HealthCheckTests {
    /// Unhealthy until the database has answered once; healthy for 15 seconds after an answer,
    /// then not, whatever the real time did meanwhile.
    @Test func anAnswerIsFreshForFifteenSecondsOnTheChecksClock() {
        let clock = ManualWaitClock()
        let health = HealthCheck(clock: clock)
        #expect(!health.isHealthy)
        health.answered()
        #expect(health.isHealthy)
        clock.advance(by: .seconds(15))
        #expect(health.isHealthy)
        clock.advance(by: .milliseconds(1))
        #expect(!health.isHealthy)
        health.answered()
        #expect(health.isHealthy)
    }
}
