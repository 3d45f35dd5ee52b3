import Foundation
import Logging
import Testing
@testable import NudgeCore

@Suite struct PushTriggerWindowTests {
    private let job = PushTriggerJob(definition: definition("push-trigger"), llm: nil, budget: LLMBudget())

    /// A candidate: check-ins on daily, never pushed, nothing decided yet.
    private static let candidate = PushTriggerJob.Facts(
        frequency: "daily", lastPushAt: nil, lastDecidedDay: nil, lastActiveAt: nil, conversations: [], messages: [],
        lastConversationMessages: [], patterns: nil, patternSessions: nil, coachingPreferences: "{}", domainStyles: "{}")

    private func decide(startedAt: String, now: String, facts: PushTriggerJob.Facts? = candidate) throws -> Decision<PushTriggerJob.Change> {
        let formatter = ISO8601DateFormatter()
        var run = runContext("push-trigger", now: startedAt)
        run.now = formatter.date(from: now)!
        let user = UserInTime(user: UserRow(id: UUID(), timezone: "UTC", locale: "en", createdAt: formatter.date(from: "2026-01-01T00:00:00Z")!),
                              calendar: try LocalCalendar(identifier: "UTC"))
        return try job.decide(for: user, facts: facts, run: run)
    }

    /// A run that began before the user's 10:00, or during their window, and reached them at or
    /// after 13:00 missed them: skipped with the reason, not "nothing due".
    @Test func aWindowThatClosedWhileTheRunWasOnItsWayIsAMissNamedAsSuch() throws {
        #expect(throws: UserSkip.self) { try decide(startedAt: "2026-02-10T09:30:00Z", now: "2026-02-10T13:10:00Z") }
        #expect(throws: UserSkip.self) { try decide(startedAt: "2026-02-10T10:30:00Z", now: "2026-02-10T13:00:00Z") }
    }

    /// Someone who was no candidate anyway (check-ins off, no token), was decided already, or
    /// whose frequency rules today out, is not reported as missed.
    @Test func onlyCandidatesAreReportedMissed() throws {
        let decided = PushTriggerJob.Facts(
            frequency: "daily", lastPushAt: nil, lastDecidedDay: LocalDate(iso8601: "2026-02-10"), lastActiveAt: nil, conversations: [],
            messages: [], lastConversationMessages: [], patterns: nil, patternSessions: nil, coachingPreferences: "{}", domainStyles: "{}")
        let weekly = PushTriggerJob.Facts(
            frequency: "weekly", lastPushAt: ISO8601DateFormatter().date(from: "2026-02-08T10:00:00Z"), lastDecidedDay: nil,
            lastActiveAt: nil, conversations: [], messages: [], lastConversationMessages: [], patterns: nil, patternSessions: nil,
            coachingPreferences: "{}", domainStyles: "{}")
        for facts in [nil, decided, weekly] {
            guard case .nothingDue = try decide(startedAt: "2026-02-10T09:30:00Z", now: "2026-02-10T13:10:00Z", facts: facts) else {
                Issue.record("\(String(describing: facts)) was reported missed")
                continue
            }
        }
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
