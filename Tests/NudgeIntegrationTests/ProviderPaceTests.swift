import Foundation
import Logging
import Testing
@testable import NudgeCore

@Suite(.serialized) struct ProviderPaceTests {
    /// Two processes (two pools, so two connections) take their turns from one row: one sequence
    /// of slots, an interval apart, none given twice, the first taken by whichever inserted the
    /// row. A caller whose turn is further away than it may wait takes nothing, and the next
    /// caller gets that same slot.
    @Test func twoProcessesShareOneSequenceOfSlotsAndATurnTooFarTakesNothing() async throws {
        let database = try await TestDatabase.fresh()
        let hour = Duration.seconds(3600)
        let (taken, refused, after) = try await database.withDatabase { first in
            try await database.withDatabase { second in
                let paces = [first, second].map { SharedPace(provider: "test", interval: hour, database: $0, logger: $0.logger) }
                let taken = try await withThrowingTaskGroup(of: Date.self) { group in
                    for index in 0..<20 {
                        group.addTask { try await paces[index % 2].take(within: nil)!.slot }
                    }
                    return try await group.reduce(into: [Date]()) { $0.append($1) }
                }
                let refused = try await paces[0].take(within: .seconds(2))
                let after = try await paces[1].take(within: nil)
                return (taken, refused, after)
            }
        }
        // (Microseconds as the database keeps them, read back as binary fractions of a second.)
        func hourApart(_ earlier: Date, _ later: Date) -> Bool { abs(later.timeIntervalSince(earlier) - 3600) < 0.001 }
        let sorted = taken.sorted()
        #expect(sorted.count == 20)
        for (earlier, later) in zip(sorted, sorted.dropFirst()) {
            #expect(hourApart(earlier, later), "\(earlier) \(later)")
        }
        #expect(refused == nil)
        let next = try #require(after)
        #expect(hourApart(sorted.last!, next.slot), "\(sorted.last!) \(next.slot)")
        // Each waits for its own slot, counted on the database's clock: this one 20 hours on.
        #expect(next.wait > .seconds(20 * 3600 - 60) && next.wait <= .seconds(20 * 3600), "\(next.wait)")
        #expect(try database.count("select count(*) from provider_pace") == 1)
    }

    /// deploy/sql/roles.sql: the jobs' role takes its turns; serve's has nothing to do with the pace.
    @Test func theJobsRoleTakesTurnsAndServesRoleCannot() async throws {
        let database = try await TestDatabase.fresh()
        let roles = try await runProcessOffThePool("/usr/bin/psql", ["-X", "-q", "-v", "ON_ERROR_STOP=1", database.url,
                                                                     "-f", packageRoot.appendingPathComponent("deploy/sql/roles.sql").path])
        #expect(roles.status == 0, "\(roles.stderr)")
        let jobsURL = database.url.replacingOccurrences(of: "postgres://nudge@", with: "postgres://nudge_jobs@")
        #expect(jobsURL != database.url)
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        let wait = try await Database.with(try DatabaseURL(jobsURL), logger: quiet) { db in
            try await SharedPace(provider: "resend", interval: .milliseconds(500), database: db, logger: db.logger).reserve(within: .seconds(2))
        }
        #expect(wait == .zero)
        let serveURL = database.url.replacingOccurrences(of: "postgres://nudge@", with: "postgres://nudge_serve@")
        let serve = try await runProcessOffThePool("/usr/bin/psql", ["-X", "-q", "-A", "-t", serveURL, "-c", "select count(*) from provider_pace"])
        #expect(serve.status != 0)
        #expect(serve.stderr.contains("permission denied"), "\(serve.stderr)")
    }
}
