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
        let user = UserInTime(
            user: UserRow(id: UUID(), timezone: "UTC", locale: "en", createdAt: formatter.date(from: "2026-01-01T00:00:00Z")!),
            calendar: try LocalCalendar(identifier: "UTC"))
        return try job.decide(for: DueUser(user: user, dueAt: Date(timeIntervalSince1970: 0)), facts: facts, run: run)
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
            guard case .later = try decide(startedAt: "2026-02-10T09:30:00Z", now: "2026-02-10T13:10:00Z", facts: facts) else {
                Issue.record("\(String(describing: facts)) was reported missed")
                continue
            }
        }
    }

    /// Outside the window for the whole run: nothing due, and the user is next due at their next
    /// 10:00 (today's before it, tomorrow's after it).
    @Test func outsideTheWindowForTheWholeRunIsNothingDueUntilTheNextTenOClock() throws {
        for (startedAt, now, next) in [
            ("2026-02-10T13:05:00Z", "2026-02-10T13:10:00Z", "2026-02-11T10:00:00Z"),
            ("2026-02-10T09:00:00Z", "2026-02-10T09:45:00Z", "2026-02-10T10:00:00Z"),
            ("2026-02-10T13:10:00Z", "2026-02-10T13:10:00Z", "2026-02-11T10:00:00Z"),
        ] {
            guard case .later(let change, _) = try decide(startedAt: startedAt, now: now) else {
                Issue.record("\(startedAt) → \(now) is not nothing due")
                continue
            }
            #expect(change.change.nextDue == ISO8601DateFormatter().date(from: next))
        }
    }

    /// A decision inside the window (here: the weekly frequency rules today out) moves the user to
    /// tomorrow's 10:00 in their zone.
    @Test func aDecidedDayIsNextDueTomorrowAtTen() throws {
        let weekly = PushTriggerJob.Facts(
            frequency: "weekly", lastPushAt: ISO8601DateFormatter().date(from: "2026-02-08T10:00:00Z"), lastDecidedDay: nil,
            lastActiveAt: nil, conversations: [], messages: [], lastConversationMessages: [], patterns: nil, patternSessions: nil,
            coachingPreferences: "{}", domainStyles: "{}")
        guard case .act(let change) = try decide(startedAt: "2026-02-10T10:00:00Z", now: "2026-02-10T10:05:00Z", facts: weekly)
        else {
            Issue.record("expected a decision")
            return
        }
        #expect(change.work.count == 1 && change.change.push == nil)
        #expect(change.change.nextDue == ISO8601DateFormatter().date(from: "2026-02-11T10:00:00Z"))
    }

    /// The pause of 100 ms for each 50 users paces the LLM (docs/jobs/push-trigger.md): a batch
    /// owes it for the users whose push it went to have the LLM write, so one with none owes
    /// nothing and a batch of 2,000 keeps the pace of batches of 50; a dry run without the LLM
    /// owes nothing.
    @Test func thePauseIsOwedForTheUsersSentToTheLLM() async throws {
        let decision = PushDecision(
            pushType: .reEngagement, context: "", eventDescription: nil, patternTheme: nil,
            conversationDomain: nil, topicSummary: nil)
        func batch(asked: Int, decidedOnly: Int) -> [PlannedChange<PushTriggerJob.Change>] {
            let push = PushTriggerJob.ProactivePush(
                pushLogID: UUID(), localDay: LocalDate(iso8601: "2026-02-10")!, decision: decision,
                prompt: "", userWords: [], dueUntil: nil)
            let now = Date(timeIntervalSince1970: 0)
            return (0..<asked).map { _ in
                PlannedChange(
                    itemID: UUID(), change: .init(push: push, dueAt: now, nextDue: now), work: [],
                    notifications: [], tally: [:])
            }
                + (0..<decidedOnly).map { _ in
                    PlannedChange(
                        itemID: UUID(), change: .init(push: nil, dueAt: now, nextDue: now),
                        work: [], notifications: [], tally: [:])
                }
        }
        #expect(job.pause(after: batch(asked: 50, decidedOnly: 0)) == .zero)
        // No request is made: the client only needs to exist.
        let configuration = LLMConfiguration(
            provider: .anthropic, baseURL: "http://127.0.0.1:9", apiKey: "sk-ant-test-not-a-real-key",
            model: LLMConfiguration.defaultAnthropicModel, requestsPerMinute: 1_000)
        try await LLMClient.with(configuration, concurrency: 1) { llm in
            let asking = PushTriggerJob(definition: definition("push-trigger"), llm: llm, budget: LLMBudget())
            #expect(asking.pause(after: batch(asked: 50, decidedOnly: 0)) == .milliseconds(100))
            #expect(asking.pause(after: batch(asked: 0, decidedOnly: 50)) == .zero)
            #expect(asking.pause(after: batch(asked: 10, decidedOnly: 105)) == .milliseconds(20))
            #expect(asking.pause(after: batch(asked: 200, decidedOnly: 1_800)) == .milliseconds(400))
        }
    }
}
