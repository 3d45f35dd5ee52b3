import Foundation
import Testing

@testable import NudgeCore

@Suite struct RetentionRulesTests {
    /// jobs/prune.json names every table prune keeps bounded, each at least as long as its readers need.
    @Test func theShippedAgesAreAllowed() throws {
        let prune = try #require(repositoryCatalog.definition(named: "prune"))
        let rules = try RetentionRule.configured(try #require(prune.retentionDays))
        #expect(Set(rules.map(\.table)) == Set(RetentionRule.all.map(\.table)))
        for rule in rules { #expect(rule.days >= rule.minimumDays, "\(rule.table)") }
        // The ledger's runs go last: the rows of the other tables point at them.
        #expect(rules.last?.table == "job_runs")
    }

    /// A chunk's id carries its table's place and its last position, in the order chunks are
    /// read, and gives them back: a checkpoint says where a resumed run goes on. A day's tiebreak
    /// comes back with its last bytes all ones: the rows sharing its first 11 bytes count as read.
    @Test func chunkIdsRoundTripInReadingOrder() {
        for ordinal in [0, 3, 7] {
            for age: Int64 in [0, 1, 20_000, 1_773_446_400_000_000, Int64(Int32.max) + 5] {
                let position = RetentionSource.position(
                    of: RetentionSource.id(ordinal: ordinal, through: .init(age: age, key: nil)),
                    tiebreak: false)
                #expect(position.ordinal == ordinal && position.through == .init(age: age, key: nil))
            }
        }
        let key = UUID(uuidString: "0123abcd-4567-89ab-cdef-0123456789ab")!
        let day = RetentionSource.position(of: RetentionSource.id(ordinal: 4, through: .init(age: 20_500, key: key)), tiebreak: true)
        #expect(day.ordinal == 4 && day.through.age == 20_500)
        #expect(day.through.key == UUID(uuidString: "0123abcd-4567-89ab-cdef-01ffffffffff"))
        let first = RetentionSource.id(ordinal: 1, through: .init(age: 1_773_446_400_000_000, key: nil))
        let later = RetentionSource.id(ordinal: 1, through: .init(age: 1_773_446_400_000_001, key: nil))
        let next = RetentionSource.id(ordinal: 2, through: .init(age: 0, key: nil))
        #expect(first.uuidString < later.uuidString && later.uuidString < next.uuidString)
    }
}
