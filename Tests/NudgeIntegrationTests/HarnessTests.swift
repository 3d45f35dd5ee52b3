import Foundation
import Synchronization
import Testing

/// Lines written from several tasks, read by the test.
private final class Lines: Sendable {
    private let lines = Mutex<[String]>([])

    func append(_ line: String) { lines.withLock { $0.append(line) } }

    var all: [String] { lines.withLock { $0 } }
}

/// The harness's own promises: a run that stalls on its process slots says what holds them.
@Suite struct ProcessSlotsTests {
    /// Slots go to waiters in turn; a waiter kept waiting past the report time names what holds
    /// the slots; a slot given back twice is reported, not counted twice.
    @Test func aLongWaitNamesTheHoldersAndADoubleReleaseIsCaught() async throws {
        let reports = Lines()
        let slots = ProcessSlots(count: 1, reportAfter: .milliseconds(200)) { reports.append($0) }
        let serve = await slots.acquire("nudge serve")
        let order = Lines()
        let first = Task {
            let slot = await slots.acquire("nudge run dispatch")
            order.append("dispatch")
            await slots.release(slot)
        }
        while await slots.waiters < 1 { try await Task.sleep(for: .milliseconds(10)) }
        let second = Task {
            let slot = await slots.acquire("nudge run reminders")
            order.append("reminders")
            await slots.release(slot)
        }
        #expect(try await eventuallyHere(seconds: 10) { reports.all.count == 2 })
        let waited = reports.all.joined()
        #expect(waited.contains("'nudge run dispatch' has waited"), "\(waited)")
        // The second waiter's report comes while the first still waits.
        #expect(waited.contains("'nudge run reminders' has waited 0.2 seconds for a process slot; 2 waiting, held by:\n  nudge serve (for "),
                "\(waited)")
        #expect(order.all.isEmpty)

        await slots.release(serve)
        _ = await (first.value, second.value)
        #expect(order.all == ["dispatch", "reminders"])
        await slots.release(serve)
        #expect(reports.all.last == "ProcessSlots: a slot released twice, or never acquired\n")
        // The slot is free once, not twice: a holder keeps the next one waiting.
        let held = await slots.acquire("one")
        let third = Task { _ = await slots.acquire("two") }
        #expect(try await eventuallyHere(seconds: 10) { reports.all.last?.contains("'two' has waited") == true })
        await slots.release(held)
        await third.value
    }
}
