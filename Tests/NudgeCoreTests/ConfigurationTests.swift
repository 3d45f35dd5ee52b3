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
        let url = try DatabaseURL("postgresql://app:s3cr%40t@db.internal:6432/nudge?sslmode=verify-full")
        #expect(url.endpoint == .tcp(host: "db.internal", port: 6432))
        #expect(url.password == "s3cr@t")
        #expect(url.tlsMode == .verifyFull)
        #expect(!url.description.contains("s3cr"))
    }

    /// A password goes only to a server whose certificate is verified, to loopback, or over a
    /// Unix socket, unless the operator accepts the risk; the error names the fix, not the password.
    @Test(arguments: [
        ("postgres://u:s3cret@db.internal/n", false), ("postgres://u:s3cret@db.internal/n?sslmode=prefer", false),
        ("postgres://u:s3cret@db.internal/n?sslmode=require", false), ("postgres://u:s3cret@10.0.0.5/n?sslmode=allow", false),
        ("postgres://u:s3cret@db.internal/n?sslmode=disable", false),
        ("postgres://u:s3cret@db.internal/n?sslmode=prefer&sslrootcert=/dev/null", false),
        ("postgres://u:s3cret@db.internal/n?sslmode=require&sslrootcert=/dev/null", true),
        ("postgres://u:s3cret@db.internal/n?sslmode=verify-full", true),
        ("postgres://u:s3cret@db.internal/n?sslrootcert=system", true),
        ("postgres://u:s3cret@db.internal/n?sslmode=verify-ca&sslrootcert=/dev/null", true),
        ("postgres://u@db.internal/n?sslmode=prefer", true),
        ("postgres://u:s3cret@localhost/n", true), ("postgres://u:s3cret@127.0.0.1/n?sslmode=disable", true),
        ("postgres://u:s3cret@[::1]/n", true), ("postgres://u:s3cret@x/n?host=/run/postgresql", true),
    ])
    func aPasswordGoesOnlyToAVerifiedServer(_ text: String, _ accepted: Bool) throws {
        if accepted {
            _ = try DatabaseURL(text)
        } else {
            let error = try #require(throws: NudgeError.self) { try DatabaseURL(text) }
            #expect(error.message.contains("sslmode=verify-full&sslrootcert=system"))
            #expect(error.message.contains("NUDGE_DB_ALLOW_INSECURE_PASSWORD=true"))
            #expect(!error.message.contains("s3cret"))
            _ = try DatabaseURL(text, allowInsecurePassword: true)
        }
    }

    /// As libpq 16: the system's roots only with a host name checked; `NUDGE_DB_CA_FILE` alone.
    @Test func verifyCAIsRefusedWithTheSystemRootsAndSystemDefaultsToVerifyFull() throws {
        let weak = try #require(throws: NudgeError.self) { try DatabaseURL("postgres://u@db/n?sslmode=verify-ca&sslrootcert=system") }
        #expect(weak.message.contains("use sslmode=verify-full"))
        #expect(throws: NudgeError.self) { try DatabaseURL("postgres://u@db/n?sslmode=require&sslrootcert=system") }
        let bare = try #require(throws: NudgeError.self) { try DatabaseURL("postgres://u@db/n?sslmode=verify-ca") }
        #expect(bare.message.contains("sslrootcert"))
        #expect(try DatabaseURL("postgres://u@db/n?sslrootcert=system").tlsMode == .verifyFull)
        #expect(try DatabaseURL("postgres://u@db/n?sslmode=verify-ca", extraTrustedRoots: "/dev/null").tlsMode == .verifyCA)
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

    @Test func shardsAreIndexOverCount() throws {
        let quarter = try Shard("1/4")
        #expect(quarter.index == 1 && quarter.count == 4)
        #expect(quarter.lowerBound == UUID(uuidString: "40000000-0000-0000-0000-000000000000"))
        #expect(quarter.upperBound == UUID(uuidString: "80000000-0000-0000-0000-000000000000"))
        for bad in ["4/4", "-1/4", "1/0", "1", "a/b", "1/4/5"] {
            #expect(throws: NudgeError.self) { try Shard(bad) }
        }
    }

    @Test func windowsMustRunForward() throws {
        let from = LocalDate(iso8601: "2026-03-10")!
        let to = LocalDate(iso8601: "2026-03-01")!
        #expect(throws: NudgeError.self) { try DayWindow(from: from, to: to) }
        #expect(try DayWindow(from: to, to: from).contains(LocalDate(iso8601: "2026-03-05")!))
    }
}

@Suite struct JobCatalogTests {
    /// `--shard i/n` is a contiguous range of the id space: the shards of one count follow one
    /// another without a gap or an overlap, from the first id to the last, and a user's shard is
    /// what the documented formula on the id's first 32 bits says.
    @Test func shardsAreContiguousRangesOfTheIdSpace() throws {
        for count in [1, 2, 3, 4, 7, 4096] {
            let shards = try (0..<count).map { try Shard("\($0)/\(count)") }
            #expect(shards[0].lowerBound == UUID(uuidString: "00000000-0000-0000-0000-000000000000"))
            #expect(shards[count - 1].upperBound == nil)
            for index in 1..<count { #expect(shards[index - 1].upperBound == shards[index].lowerBound) }
        }
        // The formula of the docs, `prefix * count / 2^32`, at the edges of shard 1 of 3.
        let shard = try Shard("1/3")
        let first = UInt64(shard.lowerBound.uuidString.prefix(8), radix: 16)!
        let next = UInt64(shard.upperBound!.uuidString.prefix(8), radix: 16)!
        #expect(first * 3 / (1 << 32) == 1 && (first - 1) * 3 / (1 << 32) == 0)
        #expect(next * 3 / (1 << 32) == 2 && (next - 1) * 3 / (1 << 32) == 1)
    }

    /// The crontab and the systemd units are generated from the definitions (`nudge crontab`,
    /// `nudge systemd`; `scripts/install` writes them for its paths), never kept in the
    /// repository: every job has its line and its timer, every sweep its own.
    @Test func theCrontabAndTheUnitsHaveEveryJobAndEverySweep() {
        let crontab = repositoryCatalog.crontab()
        let units = Set(repositoryCatalog.systemdUnits().map(\.name))
        #expect(units.isSuperset(of: ["nudge@.service", "nudge-sweep@.service", "nudge-serve.service"]))
        for definition in repositoryCatalog.definitions {
            #expect(crontab.contains("/opt/nudge/bin/nudge run \(definition.name) >>"), "\(definition.name)")
            #expect(units.contains("nudge-\(definition.name).timer"), "\(definition.name)")
            let swept = definition.sweepSchedule != nil
            #expect(crontab.contains("/opt/nudge/bin/nudge run \(definition.name) --sweep >>") == swept, "\(definition.name)")
            #expect(units.contains("nudge-\(definition.name)-sweep.timer") == swept, "\(definition.name)")
        }
    }

    @Test func everyDefinedJobIsBuiltInAndEveryBuiltInJobIsDefined() async throws {
        #expect(Set(repositoryCatalog.definitions.map(\.name)) == JobRegistry.names)
        // No two job types answer to one name (the JobTable plugin lists every folder's job).
        #expect(JobTable.jobs.count == JobRegistry.names.count)
        for definition in repositoryCatalog.definitions {
            let options = RunOptions(now: Date(), nowIsExplicit: false, batchSize: 50, dryRun: true)
            let environment = Environment([
                "NUDGE_UNSUBSCRIBE_SECRET": "7c1e0b5a9d2f48e3a6b4c8d0e2f1a3b5c7d9e0f1a2b3c4d5e6f708192a3b4c5d",
                "NUDGE_PUBLIC_URL": "https://nudge.example.com",
                "NUDGE_POSTAL_ADDRESS": "FitCircle Inc., 1 Example Street, Paris",
            ])
            let built = try await JobRegistry.withJob(JobSetup(definition: definition, environment: environment, options: options)) {
                $0.definition.name
            }
            #expect(built == definition.name)
        }
        // weekly-digest and reminders send no email without a working unsubscribe link: they do not start without one.
        for name in ["weekly-digest", "reminders"] {
            let emailing = try #require(repositoryCatalog.definition(named: name))
            await #expect(throws: NudgeError.self) {
                try await JobRegistry.withJob(
                    JobSetup(
                        definition: emailing, environment: Environment([:]),
                        options: RunOptions(now: Date(), nowIsExplicit: false, batchSize: 50, dryRun: true))
                ) {
                    $0.definition.name
                }
            }
            // Nor without the sender's postal address, which every email's footer carries (CAN-SPAM).
            await #expect(throws: NudgeError.self) {
                try await JobRegistry.withJob(
                    JobSetup(
                        definition: emailing,
                        environment: Environment([
                            "NUDGE_UNSUBSCRIBE_SECRET": "7c1e0b5a9d2f48e3a6b4c8d0e2f1a3b5c7d9e0f1a2b3c4d5e6f708192a3b4c5d",
                            "NUDGE_PUBLIC_URL": "https://nudge.example.com",
                        ]),
                        options: RunOptions(now: Date(), nowIsExplicit: false, batchSize: 50, dryRun: true))
                ) {
                    $0.definition.name
                }
            }
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

@Suite struct EnvironmentFileTests {
    @Test func readsNameValueLinesCommentsQuotesAndExport() throws {
        let values = try EnvironmentFile.parse(
            """
            # Nudge
            DATABASE_URL=postgres://nudge:s3cret@db:5432/nudge?sslmode=require&application_name=x

            export NUDGE_LOG_LEVEL=warning
              PUSH_TRIGGER_ENABLED = "true"   # a comment after a quoted value
            ANTHROPIC_API_KEY='sk-ant-with "quotes" and # hash'
            QUOTED="a \\"b\\" \\\\ c"
            EMPTY=
            """, path: "/etc/nudge/env")
        #expect(
            values == [
                "DATABASE_URL": "postgres://nudge:s3cret@db:5432/nudge?sslmode=require&application_name=x",
                "NUDGE_LOG_LEVEL": "warning", "PUSH_TRIGGER_ENABLED": "true",
                "ANTHROPIC_API_KEY": #"sk-ant-with "quotes" and # hash"#, "QUOTED": #"a "b" \ c"#, "EMPTY": "",
            ])
    }

    /// Each bad line carries a secret (hunter2x): the error names the line, never quotes it.
    @Test(arguments: [
        ("hunter2x", 1), ("A=1\nDATABASE_URL postgres://u:hunter2x@db/n?sslmode=require", 2), ("A='hunter2x", 1),
        ("A=\"hunter2x\" y", 1), ("KEY/hunter2x==", 1), ("9hunter2x=1", 1),
        // A secret with ' #' in it, unquoted, would be cut there by a shell and not by systemd.
        ("A=1\nKEY=hunter2x #tail", 2), ("KEY=hunter2x\t#tail", 1),
    ])
    func aLineThatIsNoVariableIsRefusedByNumberWithoutQuotingIt(_ text: String, _ line: Int) {
        #expect(throws: NudgeError.self) { try EnvironmentFile.parse(text, path: "/etc/nudge/env") }
        do {
            _ = try EnvironmentFile.parse(text, path: "/etc/nudge/env")
        } catch {
            #expect(error.message.hasPrefix("the env file /etc/nudge/env, line \(line):"))
            #expect(!error.message.contains("hunter2x"), "\(error.message)")
        }
    }

    @Test func theProcessEnvironmentWinsOverTheFile() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nudge-env-\(UUID())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let file = folder.appendingPathComponent("env")
        try Data("DATABASE_URL=postgres://file/nudge\nVALIDATE_STREAKS_ENABLED=false\n".utf8).write(to: file)
        chmod(file.path, 0o640)
        let (environment, read) = try Environment.loading(["NUDGE_ENV_FILE": file.path, "VALIDATE_STREAKS_ENABLED": "true"])
        #expect(environment["DATABASE_URL"] == "postgres://file/nudge")
        #expect(environment["VALIDATE_STREAKS_ENABLED"] == "true")
        #expect(read?.path == file.path)
        #expect(throws: NudgeError.self) { try Environment.loading(["NUDGE_ENV_FILE": folder.appendingPathComponent("missing").path]) }
        let (plain, none) = try Environment.loading(["DATABASE_URL": "postgres://env/nudge"])
        #expect(plain["DATABASE_URL"] == "postgres://env/nudge" && none == nil)
    }

    /// A file others may read, or others than its owner may change, is refused (the file a link
    /// leads to is the one judged), unless NUDGE_ENV_FILE_INSECURE=1; so is a key file it names.
    @Test(arguments: [(0o644, false), (0o660, false), (0o602, false), (0o640, true), (0o600, true), (0o400, true)])
    func aFileOthersCanReadOrChangeIsRefused(_ mode: Int, _ accepted: Bool) throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nudge-env-\(UUID())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let file = folder.appendingPathComponent("env")
        let link = folder.appendingPathComponent("link")
        try Data("DATABASE_URL=postgres://file/nudge\n".utf8).write(to: file)
        chmod(file.path, mode_t(mode))
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: file)
        for path in [file.path, link.path] {
            if accepted {
                #expect(try Environment.loading(["NUDGE_ENV_FILE": path]).0["DATABASE_URL"] == "postgres://file/nudge")
                #expect(try SecretFile.read(path, setting: "KEY", environment: Environment([:])).count > 0)
            } else {
                let error = try #require(throws: NudgeError.self) { try Environment.loading(["NUDGE_ENV_FILE": path]) }
                #expect(error.message.contains("chmod 640"), "\(error.message)")
                #expect(error.message.contains("NUDGE_ENV_FILE_INSECURE=1"))
                if path == link.path { #expect(error.message.contains("a link to \(file.path)")) }
                #expect(throws: NudgeError.self) { try SecretFile.read(path, setting: "KEY", environment: Environment([:])) }
                #expect(try Environment.loading(["NUDGE_ENV_FILE": path, "NUDGE_ENV_FILE_INSECURE": "1"]).0["DATABASE_URL"] != nil)
            }
        }
    }

    /// systemd's copy of a key (`LoadCredential=`) is read in place of the file, which root alone may read.
    @Test func aKeyHandedOverAsACredentialIsReadFromThere() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nudge-credentials-\(UUID())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        try Data("the key".utf8).write(to: folder.appendingPathComponent("nudge_apns-key.p8"))
        let data = try SecretFile.read(
            "/etc/nudge/keys/apns-key.p8", setting: "APNS_PRIVATE_KEY",
            environment: Environment(["CREDENTIALS_DIRECTORY": folder.path]))
        #expect(String(decoding: data, as: UTF8.self) == "the key")
        // An empty credential is no credential.
        try Data().write(to: folder.appendingPathComponent("nudge_fcm-service-account.json"))
        let error = try #require(throws: NudgeError.self) {
            try SecretFile.read(
                "/nonexistent/fcm-service-account.json", setting: "GOOGLE_APPLICATION_CREDENTIALS",
                environment: Environment(["CREDENTIALS_DIRECTORY": folder.path]))
        }
        #expect(error.message.contains("cannot read /nonexistent/fcm-service-account.json (GOOGLE_APPLICATION_CREDENTIALS): no such file"))
    }
}

@Suite struct DeploymentFileTests {
    @Test func schedulesReadAsCronReadsThemAndBecomeSystemdCalendars() throws {
        let quarter = try CronSchedule("5,20,35,50 * * * *")
        #expect(quarter.minutes == [5, 20, 35, 50] && quarter.hours == Array(0...23))
        #expect(quarter.onCalendar == "*-*-* *:05,20,35,50:00 UTC")
        #expect(try CronSchedule("*/15 6-8 * * *").onCalendar == "*-*-* 06,07,08:00,15,30,45:00 UTC")
        #expect(try CronSchedule("* * * * *").onCalendar == "*-*-* *:*:00 UTC")
        #expect(try CronSchedule("0-30/10 */12 * * *").minutes == [0, 10, 20, 30])
        // A sweep that starts in a minute the job's own schedule starts it in would find the lock taken.
        let clashing = JobDefinition(
            name: "validate-streaks", summary: "", schedule: "5,20,35,50 * * * *", localTime: nil,
            sweepSchedule: "35 3 * * 3", killSwitch: "VALIDATE_STREAKS_ENABLED", enabledByDefault: true,
            batchSize: 50)
        #expect(throws: NudgeError.self) { try clashing.validated(file: "validate-streaks.json") }
        // The weekly sweeps: on weekdays, Sunday as 0 or 7.
        #expect(try CronSchedule("35 3 * * 3").onCalendar == "Wed *-*-* 03:35:00 UTC")
        #expect(try CronSchedule("0 4 * * 7,1").weekdays == [0, 1])
        for bad in ["* * * *", "61 * * * *", "0 * 1 * *", "0 * * 2 *", "0 * * * 8", "5-1 * * * *", "*/0 * * * *", "a * * * *"] {
            #expect(throws: NudgeError.self, "\(bad)") { try CronSchedule(bad) }
        }
    }

    @Test func pathsCronOrSystemdWouldMisreadAreRefused() {
        for layout in [
            InstallLayout(binary: "nudge", envFile: "/etc/nudge/env", logDirectory: "/var/log/nudge"),
            InstallLayout(binary: "/opt/my nudge/bin/nudge", envFile: "/etc/nudge/env", logDirectory: "/var/log/nudge"),
            InstallLayout(binary: "/opt/nudge/bin/nudge", envFile: "/etc/nudge/100%", logDirectory: "/var/log/nudge"),
        ] {
            #expect(throws: NudgeError.self) { try layout.validated() }
        }
    }
}

/// The Kubernetes manifests run a pinned image: a version or a digest, never a moving tag.
@Suite struct KubernetesImageTests {
    @Test func anImageMustBePinnedToAVersionOrADigest() {
        #expect(KubernetesSetup.standard.image == "registry.example.com/nudge:\(NudgeVersion.current)")
        #expect(KubernetesSetup.imageProblem(KubernetesSetup.standard.image) == nil)
        #expect(KubernetesSetup.imageProblem("registry.example.com:5000/nudge@sha256:" + String(repeating: "a", count: 64)) == nil)
        #expect(KubernetesSetup.imageProblem("registry.example.com:5000/nudge:1.2.3") == nil)
        #expect(KubernetesSetup.imageProblem("registry.example.com/nudge:latest")?.contains("not 'latest'") == true)
        // (A registry's port is no tag.)
        #expect(KubernetesSetup.imageProblem("registry.example.com:5000/nudge")?.contains("must name a version or a digest") == true)
        #expect(KubernetesSetup.imageProblem("nudge") != nil)
    }
}

/// The jobs send to Twilio with an API key when one is set; the account's auth token then stays
/// `nudge serve`'s, for the callbacks' signatures alone.
@Suite struct TwilioCredentialTests {
    let account = "AC" + String(repeating: "0", count: 32)
    let key = "SK" + String(repeating: "1", count: 32)

    @Test func anAPIKeyIsUsedWhenSetAndHalfAKeyIsRefused() throws {
        let withKey = try #require(
            try TwilioConfiguration(
                environment: Environment([
                    "TWILIO_ACCOUNT_SID": account, "TWILIO_API_KEY_SID": key, "TWILIO_API_KEY_SECRET": "key-secret", "TWILIO_FROM": "+15005550006",
                ])))
        #expect(withKey.usesAPIKey)
        #expect(withKey.authorization == "Basic " + Data("\(key):key-secret".utf8).base64EncodedString())
        // Both set: the key sends; the token is for signatures.
        let both = try #require(
            try TwilioConfiguration(
                environment: Environment([
                    "TWILIO_ACCOUNT_SID": account, "TWILIO_AUTH_TOKEN": "token", "TWILIO_API_KEY_SID": key, "TWILIO_API_KEY_SECRET": "key-secret",
                    "TWILIO_FROM": "+15005550006",
                ])))
        #expect(both.authorization == withKey.authorization)
        let withToken = try #require(
            try TwilioConfiguration(
                environment: Environment([
                    "TWILIO_ACCOUNT_SID": account, "TWILIO_AUTH_TOKEN": "token", "TWILIO_FROM": "+15005550006",
                ])))
        #expect(!withToken.usesAPIKey)
        #expect(withToken.authorization == "Basic " + Data("\(account):token".utf8).base64EncodedString())
        for half in [
            ["TWILIO_API_KEY_SID": key], ["TWILIO_API_KEY_SECRET": "key-secret"],
            [
                "TWILIO_API_KEY_SID": "AB" + String(repeating: "1", count: 32),
                "TWILIO_API_KEY_SECRET": "key-secret",
            ],
        ] {
            let environment = Environment(["TWILIO_ACCOUNT_SID": account, "TWILIO_FROM": "+15005550006"].merging(half) { _, new in new })
            #expect(throws: NudgeError.self, "\(half.keys.sorted())") { try TwilioConfiguration(environment: environment) }
        }
        // serve refuses the key's secret: it sends on Nudge's behalf.
        #expect(throws: NudgeError.self) { try ServeEnvironment.check(Environment(["TWILIO_API_KEY_SECRET": "key-secret"])) }
    }
}
