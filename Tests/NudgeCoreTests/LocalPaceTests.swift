import Testing
@testable import NudgeCore

@Suite struct LocalPaceTests {
    /// Slots an hour apart: the first is now, the next an hour later; a caller who may wait two
    /// seconds takes nothing (and the one after it still gets that same slot), and a hold moves
    /// every later slot past it.
    @Test func takesTheNextSlotOrNothingWhenItIsTooFar() {
        let pace = LocalPace(interval: .seconds(3600))
        #expect(pace.reserve(within: .seconds(2)) == .zero)
        #expect(pace.reserve(within: .seconds(2)) == nil)
        let next = pace.reserve(within: nil)
        #expect(next.map { $0 > .seconds(3590) && $0 <= .seconds(3600) } == true, "\(String(describing: next))")
        pace.hold(for: .seconds(5 * 3600))
        let held = pace.reserve(within: nil)
        #expect(held.map { $0 > .seconds(5 * 3600 - 10) && $0 <= .seconds(5 * 3600) } == true, "\(String(describing: held))")
    }

    /// The LLM's slots: 60.25 s over the rate, so that `limit + 1` never fit in a minute however
    /// unevenly late they arrive by up to 250 ms; Resend's 1.05 s over its rate.
    @Test func spacesSlotsOverTheWindowAndItsAllowance() {
        #expect(LLMClient.paceInterval(requestsPerMinute: 50) == .milliseconds(1205))
        #expect(LLMClient.paceInterval(requestsPerMinute: 50) * 50 > .seconds(60))
        #expect(ResendClient.paceInterval(requestsPerSecond: 2) == .milliseconds(525))
        #expect(ResendClient.paceInterval(requestsPerSecond: 2) * 2 >= .seconds(1) + .milliseconds(50))
    }
}
