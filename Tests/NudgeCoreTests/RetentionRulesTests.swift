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

    /// A chunk's id carries its table's place and its last age, in the order chunks are read, and
    /// gives them back: a checkpoint says where a resumed run goes on.
    @Test func chunkIdsRoundTripInReadingOrder() {
        let ages: [Int64] = [0, 1, 20_000, 1_773_446_400_000_000, Int64(Int32.max)]
        for ordinal in [0, 3, 7] {
            for age in ages {
                let position = RetentionSource.position(of: RetentionSource.id(ordinal: ordinal, through: age))
                #expect(position.ordinal == ordinal && position.through == age)
            }
        }
        let first = RetentionSource.id(ordinal: 1, through: 1_773_446_400_000_000)
        let later = RetentionSource.id(ordinal: 1, through: 1_773_446_400_000_001)
        let next = RetentionSource.id(ordinal: 2, through: 0)
        #expect(first.uuidString < later.uuidString && later.uuidString < next.uuidString)
    }
}
