import Foundation

/// One `daily_tracking` row, as the jobs read it.
public struct TrackingDay: Sendable, Equatable {
    public let date: LocalDate
    public let mood: Int?
    public let energy: Int?
    public let steps: Int?
    public let weight: Double?

    public init(date: LocalDate, mood: Int?, energy: Int?, steps: Int?, weight: Double?) {
        self.date = date
        self.mood = mood
        self.energy = energy
        self.steps = steps
        self.weight = weight
    }

    /// A day counts as checked in when mood and energy are logged (seed 003, Feature 4).
    public var isCheckedIn: Bool { mood != nil && energy != nil }

    /// Why the row holds values no person could have logged, or nil when it is plausible.
    public var impossibility: String? {
        if let mood, !(1...5).contains(mood) { return "mood \(mood) is outside 1-5" }
        if let energy, !(1...5).contains(energy) { return "energy \(energy) is outside 1-5" }
        if let steps, !(0...150_000).contains(steps) { return "steps \(steps) is outside 0-150000" }
        if let weight, !(weight > 0 && weight < 1_500) { return "weight \(weight) is outside 0-1500 lb" }
        return nil
    }
}
