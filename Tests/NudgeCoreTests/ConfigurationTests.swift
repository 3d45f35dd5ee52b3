import Foundation
import Testing
@testable import NudgeCore

@Suite struct ConfigurationTests {
    @Test func readsASocketURL() throws {
        let url = try DatabaseURL("postgres://nudge@localhost/nudge?host=/srv/pg/socket&port=55084")
        #expect(url.endpoint == .unixSocket(path: "/srv/pg/socket/.s.PGSQL.55084"))
        #expect(url.database == "nudge")
        #expect(url.username == "nudge")
    }

    @Test func readsATCPURLAndNeverShowsThePassword() throws {
        let url = try DatabaseURL("postgresql://app:s3cr%40t@db.internal:6432/nudge?sslmode=require")
        #expect(url.endpoint == .tcp(host: "db.internal", port: 6432))
        #expect(url.password == "s3cr@t")
        #expect(url.tlsMode == .require)
        #expect(!url.description.contains("s3cr"))
    }

    @Test(arguments: ["mysql://x@y/z", "not a url", "postgres://u@h/d?sslmode=bogus"])
    func rejectsOtherURLs(_ text: String) {
        #expect(throws: NudgeError.self) { try DatabaseURL(text) }
    }

    @Test func killSwitchesReadCommonSpellings() throws {
        let env = Environment(["A": "false", "B": "0", "C": "yes", "D": "maybe"])
        #expect(try !env.flag("A", default: true))
        #expect(try !env.flag("B", default: true))
        #expect(try env.flag("C", default: false))
        #expect(try env.flag("UNSET", default: true))
        #expect(throws: NudgeError.self) { try env.flag("D", default: true) }
        #expect(Environment.killSwitchName(forJob: "validate-streaks") == "VALIDATE_STREAKS_ENABLED")
    }

    @Test func shardsSplitUsersByTheirIdsFirstBits() throws {
        let quarter = try Shard("1/4")
        #expect(quarter.index == 1 && quarter.count == 4)
        let id = UUID(uuidString: "00000005-0000-0000-0000-000000000000")!
        #expect(quarter.contains(id))
        #expect(!(try Shard("0/4")).contains(id))
        for bad in ["4/4", "-1/4", "1/0", "1", "a/b", "1/4/5"] {
            #expect(throws: NudgeError.self) { try Shard(bad) }
        }
    }

    @Test func windowsMustRunForward() throws {
        let from = LocalDate(iso8601: "2026-03-10")!, to = LocalDate(iso8601: "2026-03-01")!
        #expect(throws: NudgeError.self) { try DayWindow(from: from, to: to) }
        #expect(try DayWindow(from: to, to: from).contains(LocalDate(iso8601: "2026-03-05")!))
    }
}

@Suite struct JobCatalogTests {
    @Test func theCommittedCrontabIsTheGeneratedOne() throws {
        let committed = try String(contentsOf: packageRoot.appendingPathComponent("crontab"), encoding: .utf8)
        #expect(committed == repositoryCatalog.crontab)
    }

    @Test func everyDefinedJobIsBuiltInAndEveryBuiltInJobIsDefined() async throws {
        #expect(Set(repositoryCatalog.definitions.map(\.name)) == JobRegistry.names)
        for definition in repositoryCatalog.definitions {
            let options = RunOptions(now: Date(), nowIsExplicit: false, batchSize: 50, dryRun: true)
            let built = try await JobRegistry.withJob(JobSetup(definition: definition, environment: Environment([:]), options: options)) {
                $0.definition.name
            }
            #expect(built == definition.name)
        }
    }

    @Test func everyJobActsWithinAQuarterHourOfEveryZonesLocalMinute() {
        // Zones are offset by whole quarter hours; a job acting at a local minute must start at
        // least every 15 minutes, on the same minute within each quarter. A job that stays due for
        // a while after its moment (dueForMinutes) needs a start within that while instead.
        for definition in repositoryCatalog.definitions where definition.localTime != nil {
            let fields = definition.schedule.split(separator: " ")
            let minutes = fields[0].split(separator: ",").compactMap { Int($0) }.sorted()
            if let dueFor = definition.dueForMinutes {
                #expect(fields[1] == "*", "\(definition.name) must start every hour")
                let gaps = zip(minutes, minutes.dropFirst() + [minutes[0] + 60]).map { $1 - $0 }
                #expect(gaps.allSatisfy { $0 <= dueFor }, "\(definition.name)")
                continue
            }
            let residues = Set(minutes.map { $0 % 15 })
            #expect(residues == [definition.localTime!.minute % 15], "\(definition.name)")
            #expect(Set(minutes.map { $0 / 15 }) == [0, 1, 2, 3], "\(definition.name)")
        }
    }

    @Test func aDefinitionMustNameItsOwnKillSwitch() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nudge-jobs-\(UUID())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        try Data(#"{"name":"x-job","summary":"s","schedule":"* * * * *","localTime":null,"killSwitch":"WRONG","enabledByDefault":true,"batchSize":50}"#.utf8)
            .write(to: folder.appendingPathComponent("x-job.json"))
        #expect(throws: NudgeError.self) { try JobCatalog(directory: folder) }
    }
}
