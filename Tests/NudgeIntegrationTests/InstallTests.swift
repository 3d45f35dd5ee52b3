import Foundation
import Testing

/// Nudge installed as docs/operations.md says (`scripts/install`), into a temporary prefix.
private struct Installation {
    let prefix: URL
    var home: URL { prefix.appendingPathComponent("opt/nudge") }
    var envFile: URL { prefix.appendingPathComponent("etc/nudge/env") }
    var logs: URL { prefix.appendingPathComponent("var/log/nudge") }

    init() async throws {
        prefix = FileManager.default.temporaryDirectory.appendingPathComponent("nudge-install-\(UUID())")
        let result = try await runProcessOffThePool(
            "/bin/bash",
            [
                packageRoot.appendingPathComponent("scripts/install").path,
                "--prefix", prefix.path, "--binary", NudgeBinary.path,
            ])
        guard result.status == 0 else { throw TestFailure("scripts/install failed: \(result.stderr)") }
    }

    func remove() { try? FileManager.default.removeItem(at: prefix) }
}

@Suite(.dropsItsDatabases) struct InstallTests {
    /// One line of the installed crontab, run as cron runs it: `/bin/sh -c` with cron's bare
    /// environment and the crontab's own variables. Nothing but the env file tells nudge where
    /// the database is.
    @Test func aCrontabLineRunsUnderCronsBareEnvironment() async throws {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 12, signup: "2026-10-01T00:00:00Z", from: "2026-09-30", to: "2026-11-30")
        let installed = try await Installation()
        defer { installed.remove() }
        let envFile = try String(contentsOf: installed.envFile, encoding: .utf8)
        #expect(envFile.contains("DATABASE_URL=postgres://nudge_jobs:CHANGE-ME@"))   // the example, to be edited
        try Data("DATABASE_URL=\(database.url)\nNUDGE_LOG_LEVEL=info\n".utf8).write(to: installed.envFile)

        let crontab = try String(contentsOf: installed.home.appendingPathComponent("crontab"), encoding: .utf8)
        #expect(!crontab.contains("DATABASE_URL="))
        let lines = crontab.split(separator: "\n").map(String.init).filter { !$0.hasPrefix("#") && !$0.isEmpty }
        var environment = ["HOME": installed.prefix.path, "LOGNAME": "nudge", "SHELL": "/bin/sh", "PATH": "/usr/bin:/bin"]
        for line in lines where !line.first!.isNumber && !line.hasPrefix("*") {
            let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
            environment[parts[0]] = parts[1]
        }
        #expect(environment["NUDGE_ENV_FILE"] == installed.envFile.path)
        let line = try #require(lines.first { $0.contains(" run validate-streaks ") })
        let command = line.split(separator: " ", maxSplits: 5).map(String.init)[5]
        let result = try await runProcessOffThePool("/bin/sh", ["-c", command], environment: environment)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try await database.psql("select status, processed from job_runs") == "succeeded|12")
        #expect(try await database.count("select count(*) from user_streaks") == 12)
        let log = try String(contentsOf: installed.logs.appendingPathComponent("validate-streaks.log"), encoding: .utf8)
        #expect(log.contains(#""msg":"run finished""#), "\(log)")
        #expect(!log.contains(database.url))
    }

    @Test func theInstalledFilesAreWhatTheOperationsGuideSays() async throws {
        let installed = try await Installation()
        defer { installed.remove() }
        let mode = try FileManager.default.attributesOfItem(atPath: installed.envFile.path)[.posixPermissions] as? Int
        #expect(mode.map { $0 & 0o007 } == 0, "the env file must not be readable by every user")
        for path in [
            "bin/nudge", "jobs/validate-streaks.json", "db/migrations/0001_schema.sql", "crontab", "systemd/nudge@.service",
            "systemd/nudge-validate-streaks.timer",
        ] {
            #expect(FileManager.default.fileExists(atPath: installed.home.appendingPathComponent(path).path), "\(path)")
        }
        #expect(FileManager.default.fileExists(atPath: installed.prefix.appendingPathComponent("etc/logrotate.d/nudge").path))
    }

    /// Each service runs sandboxed: `systemd-analyze security` rates it "OK" or better (an
    /// exposure of 3.0 or less), and the server's unit names its own env file.
    @Test func theServicesAreSandboxed() async throws {
        let installed = try await Installation()
        defer { installed.remove() }
        let units = installed.home.appendingPathComponent("systemd")
        for unit in ["nudge@.service", "nudge-sweep@.service", "nudge-serve.service"] {
            let result = try await runProcessOffThePool(
                "/usr/bin/systemd-analyze",
                [
                    "security", "--offline=true", "--no-pager",
                    units.appendingPathComponent(unit).path,
                ],
                environment: ["SYSTEMD_COLORS": "0", "PATH": "/usr/bin:/bin"])
            let line = try #require(result.stdout.split(separator: "\n").first { $0.contains("Overall exposure level") }, "\(result.stderr)")
            let number = try #require(line.range(of: #"service: [0-9.]+"#, options: .regularExpression), "\(line)")
            let exposure = try #require(Double(line[number].dropFirst("service: ".count)), "\(line)")
            #expect(exposure <= 3.0, "\(unit): \(line)")
            #expect(!result.stderr.contains("Invalid") && !result.stderr.contains("Unknown"), "\(unit): \(result.stderr)")
        }
        let serve = try String(contentsOf: units.appendingPathComponent("nudge-serve.service"), encoding: .utf8)
        let folder = installed.prefix.path + "/etc/nudge"
        #expect(serve.contains("Environment=NUDGE_ENV_FILE=\(folder)/serve.env"))
        // Its own user; the jobs' files hidden; nothing written, not even the metrics.
        #expect(serve.contains("\nUser=nudge-serve\nGroup=nudge-serve\n"))
        for hidden in ["env", "keys", "owner.env"] { #expect(serve.contains("\nInaccessiblePaths=-\(folder)/\(hidden)\n"), "\(hidden)") }
        #expect(!serve.contains("ReadWritePaths"))
        let job = try String(contentsOf: units.appendingPathComponent("nudge@.service"), encoding: .utf8)
        #expect(job.contains("\nUser=nudge\nGroup=nudge\n"))
        for hidden in ["serve.env", "owner.env"] { #expect(job.contains("\nInaccessiblePaths=-\(folder)/\(hidden)\n"), "\(hidden)") }
        let serveEnv = installed.prefix.appendingPathComponent("etc/nudge/serve.env").path
        let mode = try FileManager.default.attributesOfItem(atPath: serveEnv)[.posixPermissions] as? Int
        #expect(mode.map { $0 & 0o027 } == 0, "serve.env: its owner and group alone")
        let keys = try FileManager.default.attributesOfItem(atPath: installed.prefix.appendingPathComponent("etc/nudge/keys").path)
        #expect((keys[.posixPermissions] as? Int).map { $0 & 0o027 } == 0, "the keys: root's, and the jobs' group's to read")
        if getuid() == 0 {
            #expect(keys[.groupOwnerAccountName] as? String == "nudge")
            let serveGroup = try FileManager.default.attributesOfItem(atPath: serveEnv)[.groupOwnerAccountName] as? String
            #expect(serveGroup == "nudge-serve")
        }
    }

    /// `nudge serve` faces the internet and runs as a user of its own: it cannot open the jobs'
    /// env file, the owner's or the providers' key folder, and refuses to start where it can
    /// (here, as root); the jobs' user cannot read serve's env file. (The units also hide those
    /// files: `InaccessiblePaths=`.) Only root can switch users, so only root checks this.
    @Test(.enabled(if: getuid() == 0, "switching to the installed users takes root"))
    func theServerCannotReadTheJobsSecrets() async throws {
        let installed = try await Installation()
        defer { installed.remove() }
        let folder = installed.prefix.appendingPathComponent("etc/nudge")
        let env = folder.appendingPathComponent("env").path
        let serveEnv = folder.appendingPathComponent("serve.env").path
        let ownerEnv = folder.appendingPathComponent("owner.env").path
        let keys = folder.appendingPathComponent("keys").path
        // Any file stands in for a key here: only who may read it matters.
        try Data("a stand-in for a provider key file\n".utf8).write(to: URL(fileURLWithPath: keys + "/apns-key.p8"))
        /// Whether `user` (with its own group alone) can read `path` (a folder: list it).
        func reads(_ user: String, _ path: String) async throws -> Bool {
            let result = try await runProcessOffThePool(
                "/usr/bin/setpriv",
                [
                    "--reuid=\(user)", "--regid=\(user)", "--clear-groups", "--", "/bin/sh", "-c",
                    #"if [ -d "$0" ]; then ls "$0/" ; else cat "$0"; fi >/dev/null 2>&1"#, path,
                ])
            return result.status == 0
        }
        for path in [env, ownerEnv, keys, keys + "/apns-key.p8"] {
            #expect(try await !reads("nudge-serve", path), "nudge-serve reads \(path)")
        }
        #expect(try await reads("nudge-serve", serveEnv))
        #expect(try await reads("nudge", env))
        #expect(try await reads("nudge", keys))
        #expect(try await !reads("nudge", serveEnv))
        #expect(try await !reads("nudge", ownerEnv))

        let binary = installed.home.appendingPathComponent("bin/nudge").path
        let environment = ["NUDGE_ENV_FILE": serveEnv, "PATH": "/usr/bin:/bin", "NUDGE_HTTP_PORT": "0"]
        // As root it could open them all: refused, naming what it could open.
        let asRoot = try await runProcessOffThePool(binary, ["serve"], environment: environment)
        #expect(asRoot.status == 1, "\(asRoot.stderr)")
        #expect(asRoot.stderr.contains("must not be able to read the jobs' files"), "\(asRoot.stderr)")
        #expect(asRoot.stderr.contains(env) && asRoot.stderr.contains(keys) && asRoot.stderr.contains(ownerEnv), "\(asRoot.stderr)")
        // As nudge-serve it goes past that check (and stops at the example's placeholders).
        let asServe = try await runProcessOffThePool(
            "/usr/bin/setpriv",
            [
                "--reuid=nudge-serve", "--regid=nudge-serve", "--clear-groups",
                "--", binary, "serve",
            ], environment: environment)
        #expect(asServe.status != 0)
        #expect(!asServe.stderr.contains("the jobs' files"), "\(asServe.stderr)")
        #expect(asServe.stderr.contains("NUDGE_UNSUBSCRIBE_SECRET") || asServe.stderr.contains("DATABASE_URL"), "\(asServe.stderr)")
    }

    /// systemd reads the units as written: `systemd-analyze verify` finds nothing wrong, and each
    /// timer starts when its cron schedule would.
    @Test func theSystemdUnitsVerifyAndTheirTimersKeepTheCronSchedules() async throws {
        let analyze = "/usr/bin/systemd-analyze"
        guard FileManager.default.isExecutableFile(atPath: analyze) else {
            throw TestFailure("systemd-analyze is missing: scripts/test installs the systemd package")
        }
        let installed = try await Installation()
        defer { installed.remove() }
        let units = installed.home.appendingPathComponent("systemd")
        for timer in try FileManager.default.contentsOfDirectory(atPath: units.path) where timer.hasSuffix(".timer") {
            var job = String(timer.dropFirst("nudge-".count).dropLast(".timer".count))
            // A job's weekly sweep has its own timer and service template.
            let sweep = job.hasSuffix("-sweep")
            if sweep { job = String(job.dropLast("-sweep".count)) }
            let template = sweep ? "nudge-sweep@" : "nudge@"
            // The template's instance for this job, as systemd would load it.
            let instance = units.appendingPathComponent("\(template)\(job).service")
            try FileManager.default.copyItem(at: units.appendingPathComponent("\(template).service"), to: instance)
            let verify = try await runProcessOffThePool(analyze, ["verify", "--man=no", units.appendingPathComponent(timer).path, instance.path])
            let complaints = (verify.stdout + verify.stderr).split(separator: "\n")
                .filter { !$0.contains("User=nudge") && !$0.contains("Group=nudge") && !$0.contains("System has not been booted") }
            #expect(verify.status == 0 || complaints.isEmpty, "\(timer): \(verify.stdout)\(verify.stderr)")
            #expect(complaints.isEmpty, "\(timer): \(complaints)")

            let text = try String(contentsOf: units.appendingPathComponent(timer), encoding: .utf8)
            let calendar = try #require(text.split(separator: "\n").first { $0.hasPrefix("OnCalendar=") }).dropFirst("OnCalendar=".count)
            let elapses = try await runProcessOffThePool(
                analyze, ["calendar", "--iterations=200", "--base-time=2026-03-01 00:00:00 UTC", String(calendar)],
                environment: ["TZ": "UTC", "SYSTEMD_COLORS": "0"])
            #expect(elapses.status == 0, "\(elapses.stderr)")
            let minutes = elapses.stdout.split(separator: "\n").compactMap { line -> Int? in
                guard let range = line.range(of: #"\d\d:\d\d:00 UTC"#, options: .regularExpression) else { return nil }
                let clock = line[range]
                return Int(clock.prefix(2))! * 60 + Int(clock.dropFirst(3).prefix(2))!
            }
            let definition = try String(contentsOf: packageRoot.appendingPathComponent("jobs/\(job).json"), encoding: .utf8)
            let key = sweep ? "sweepSchedule" : "schedule"
            let schedule = try #require(definition.range(of: #"""# + key + #"": "([^"]+)""#, options: .regularExpression))
            let cron = definition[schedule].dropFirst(key.count + 5).dropLast()
            if sweep {
                // A sweep starts once a week, on the cron line's weekday (here: every one of them a Wednesday).
                #expect(cron.split(separator: " ")[4] == "3", "\(job)")
                #expect(elapses.stdout.split(separator: "\n").allSatisfy { $0.contains("Wed") || !$0.contains("UTC") }, "\(elapses.stdout)")
            }
            let minuteField = cron.split(separator: " ")[0]
            let cronMinutes =
                minuteField == "*"
                ? Array(0..<60)
                : minuteField.hasPrefix("*/")
                    ? Array(stride(from: 0, to: 60, by: Int(minuteField.dropFirst(2))!))
                    : minuteField.split(separator: ",").compactMap { Int($0) }
            #expect(!minutes.isEmpty)
            #expect(Set(minutes.map { $0 % 60 }) == Set(cronMinutes), "\(job): \(calendar)")
        }
    }
}
