import Foundation
import Logging
import Testing
@testable import NudgeCore

@Suite struct PushTriggerWindowTests {
    private let job = PushTriggerJob(definition: definition("push-trigger"), llm: nil, budget: LLMBudget())

    private func decide(startedAt: String, now: String, zone: String = "UTC") throws -> Decision<PushTriggerJob.Change> {
        let formatter = ISO8601DateFormatter()
        var run = runContext("push-trigger", now: startedAt)
        run.now = formatter.date(from: now)!
        let user = UserInTime(user: UserRow(id: UUID(), timezone: zone, locale: "en", createdAt: formatter.date(from: "2026-01-01T00:00:00Z")!),
                              calendar: try LocalCalendar(identifier: zone))
        return try job.decide(for: user, facts: nil, run: run)
    }

    /// A run that began before the user's 10:00 and reached them after 13:00 missed their whole
    /// window: skipped with the reason, not "nothing due".
    @Test func aWindowThatOpenedAndClosedDuringTheRunIsAMissNamedAsSuch() throws {
        #expect(throws: UserSkip.self) { try decide(startedAt: "2026-02-10T09:30:00Z", now: "2026-02-10T13:10:00Z") }
        #expect(throws: UserSkip.self) { try decide(startedAt: "2026-02-10T10:30:00Z", now: "2026-02-10T13:00:00Z") }
    }

    @Test func outsideTheWindowForTheWholeRunIsNothingDue() throws {
        for (startedAt, now) in [("2026-02-10T13:05:00Z", "2026-02-10T13:10:00Z"), ("2026-02-10T09:00:00Z", "2026-02-10T09:45:00Z"),
                                 ("2026-02-10T13:10:00Z", "2026-02-10T13:10:00Z")] {
            guard case .nothingDue = try decide(startedAt: startedAt, now: now) else {
                Issue.record("\(startedAt) → \(now) is not nothing due")
                continue
            }
        }
    }
}
