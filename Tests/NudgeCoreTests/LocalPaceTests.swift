import Testing

@testable import NudgeCore

@Suite struct LocalPaceTests {
    /// Slots an hour apart, on a clock the test moves: the first is now, the next an hour later;
    /// a caller who may wait two seconds takes nothing (and the one after it still gets that same
    /// slot), and a hold moves every later slot past it.
    @Test func takesTheNextSlotOrNothingWhenItIsTooFar() {
        let clock = ManualWaitClock()
        let pace = LocalPace(interval: .seconds(3600), clock: clock)
        #expect(pace.reserve(within: .seconds(2)) == .zero)
        #expect(pace.reserve(within: .seconds(2)) == nil)
        clock.advance(by: .seconds(600))
        #expect(pace.reserve(within: nil) == .seconds(3000))
        // The slot after it, two hours from the start; the hold moves it to five hours from now.
        pace.hold(for: .seconds(5 * 3600))
        #expect(pace.reserve(within: nil) == .seconds(5 * 3600))
        // Once the clock passed every slot, the next is at once.
        clock.advance(by: .seconds(24 * 3600))
        #expect(pace.reserve(within: .zero) == .zero)
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
