import ArgumentParser
import Foundation
import Logging
import NudgeCore
import PostgresNIO

struct ListJobs: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "Every job with its schedule, kill-switch variable and whether it is enabled.")

    func run() async throws {
        try await reportingFailures {
            let bootstrap = try Bootstrap.make()
            var rows = [["JOB", "SCHEDULE (cron)", "ACTS AT (local)", "KILL SWITCH", "ENABLED", "BATCH"]]
            for definition in bootstrap.catalog.definitions {
                let global = try bootstrap.environment.flag("NUDGE_ENABLED", default: true)
                let own = try bootstrap.environment.flag(definition.killSwitch, default: definition.enabledByDefault)
                let enabled = !global ? "no (NUDGE_ENABLED)" : own ? "yes" : "no (\(definition.killSwitch))"
                rows.append([
                    definition.name, definition.schedule, definition.localTime?.description ?? "-",
                    definition.killSwitch, enabled, String(definition.batchSize),
                ])
            }
            print(table(rows))
            print("\nDelivery (dispatch):")
            // What every dispatcher knows of each provider, when the database can be asked.
            var health: [DeliveryProvider: ProviderHealth] = [:]
            var unread: String?
            if bootstrap.environment["DATABASE_URL"] != nil {
                do {
                    health = try await bootstrap.withDatabase(
                        "list", limits: DatabaseLimits(statementTimeout: .seconds(10)),
                        connections: 1
                    ) { database in
                        try await ChannelHealth.shared(in: database)
                    }
                } catch {
                    unread = describe(error)
                }
            }
            for (provider, state) in DeliveryServices.describe(bootstrap.environment) {
                let now = health[provider]?.summary(of: provider).map { " — \($0)" } ?? ""
                print("  \(provider.displayName): \(state)\(now)")
            }
            if let unread { print("  (whether each provider is up was not read: \(unread))") }
            for definition in bootstrap.catalog.definitions {
                print("\n\(definition.name): \(definition.summary)")
            }
            print("\n`nudge pause <job>` stops a job from the database too; `nudge runs` shows whether one is paused.")
        }
    }
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Create or upgrade the database schema; safe to run at any time, twice, or from two processes at once.")

    func run() async throws {
        try await reportingFailures {
            let bootstrap = try Bootstrap.make()
            let migrator = try Migrator(directory: bootstrap.home.migrationsDirectory)
            let applied = try await bootstrap.withDatabase("migrate") { database in try await migrator.migrate(database) }
            print(
                applied.isEmpty
                    ? "schema is up to date (\(migrator.migrations.count) migrations)"
                    : "applied \(applied.joined(separator: ", "))")
        }
    }
}

struct Seed: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Fill an empty database with synthetic users and their history, deterministically.")

    @Option(help: "How many users.")
    var users: Int

    @Option(help: "The random seed: the same users, seed and --now give the same rows, ids included.")
    var seed: Int = 1

    @Option(help: "Where the history ends, ISO 8601 with a zone (default: now).")
    var now: String?

    func validate() throws {
        guard (1...Seeder.maximumUsers).contains(users) else {
            throw ValidationError("--users must be between 1 and \(Seeder.maximumUsers)")
        }
        guard seed >= 0 else { throw ValidationError("--seed must be 0 or more") }
    }

    func run() async throws {
        let end = try now.map { try parseInstant($0, option: "--now") } ?? Date()
        try await reportingFailures {
            let bootstrap = try Bootstrap.make()
            let seeder = try Seeder(scriptURL: bootstrap.home.seedScript)
            let started = ContinuousClock.now
            let (users, seed) = (self.users, self.seed)
            let tables = try await bootstrap.withDatabase("seed") { database in
                try await seeder.seed(database, users: users, seed: seed, now: end)
            }
            let seconds = started.duration(to: .now)
            print(
                "seeded \(users) users (seed \(seed), history ending \(ISO8601DateFormatter().string(from: end))) in \(seconds.formatted(.units(allowed: [.seconds], fractionalPart: .show(length: 1))))"
            )
            print(table([["TABLE", "ROWS"]] + tables.filter { $0.rows > 0 }.map { [$0.table, String($0.rows)] }))
        }
    }
}

struct Runs: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Recent runs from the run ledger, with their counts and status, and paused jobs.")

    @Option(help: "Only this job's runs.")
    var job: String?

    @Option(help: "How many runs.")
    var limit: Int = 20

    @Option(help: "List the users that failed in this run, with their reasons.")
    var failures: Int64?

    func run() async throws {
        try await reportingFailures {
            let bootstrap = try Bootstrap.make()
            if let job { _ = try bootstrap.definition(job) }
            let (job, limit, failures) = (self.job, max(1, self.limit), self.failures)
            // The jobs that read through the due index (each has its weekly sweep).
            let indexed = bootstrap.catalog.definitions.filter { $0.sweepSchedule != nil && (job == nil || $0.name == job) }.map(\.name)
            let output = try await bootstrap.withDatabase("runs", limits: try .forJobs(bootstrap.environment)) { database in
                try await database.client.withConnection { connection in
                    if let failures {
                        return try await Self.failures(of: failures, on: connection, logger: database.logger)
                    }
                    var text = try await Self.recentRuns(job: job, limit: limit, on: connection, logger: database.logger)
                    for (name, count) in try await DueSource.unindexedUsers(jobs: indexed, on: connection, logger: database.logger)
                    where count > 0 {
                        text +=
                            "\nNOT INDEXED: \(count) users have no row in the due index of \(name), so no run reads them;"
                            + " `nudge run \(name) --sweep` reads them and gives them one"
                    }
                    return text
                }
            }
            print(output)
        }
    }

    private static func recentRuns(job: String?, limit: Int, on connection: PostgresConnection, logger: Logger) async throws -> String {
        var rows = [["RUN", "JOB", "SHARD", "STARTED (UTC)", "SECONDS", "STATUS", "PROCESSED", "CHANGED", "NOTHING DUE", "FAILED", "NOTE"]]
        let result = try await connection.query(
            """
            select id, job, shard_index, shard_count, to_char(started_at at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS'),
                   coalesce(extract(epoch from ended_at - started_at)::float8, -1), status, dry_run,
                   processed, succeeded, skipped, failed, resumed_from, coalesce(error, '')
              from job_runs where \(job)::text is null or job = \(job)
             order by id desc limit \(limit)
            """, logger: logger)
        for try await (id, name, index, count, started, seconds, status, dryRun, processed, succeeded, skipped, failed, resumedFrom, error)
            in result.decode((Int64, String, Int, Int, String, Double, String, Bool, Int, Int, Int, Int, Int64?, String).self)
        {
            var note = [dryRun ? "dry run" : nil, resumedFrom.map { "resumed \($0)" }, error.isEmpty ? nil : error]
                .compactMap { $0 }.joined(separator: "; ")
            if note.count > 80 { note = String(note.prefix(77)) + "..." }
            rows.append([
                String(id), name, "\(index)/\(count)", started, seconds < 0 ? "-" : String(format: "%.1f", seconds),
                status, String(processed), String(succeeded), String(skipped), String(failed), note,
            ])
        }
        var text = rows.count == 1 ? "no runs yet" : table(rows)
        let paused = try await connection.query("select job, paused_by, coalesce(reason, '') from job_pauses order by job", logger: logger)
        for try await (name, by, reason) in paused.decode((String, String, String).self) {
            text += "\nPAUSED: \(name == "*" ? "every job" : name) (by \(by)\(reason.isEmpty ? "" : ": \(reason)"))"
        }
        return text
    }

    private static func failures(of runID: Int64, on connection: PostgresConnection, logger: Logger) async throws -> String {
        let exists = try await connection.query("select count(*) from job_runs where id = \(runID)", logger: logger)
        for try await count in exists.decode(Int.self) where count == 0 {
            throw NudgeError(.usage, "there is no run \(runID); `nudge runs` lists the runs")
        }
        var rows = [["USER", "REASON"]]
        let result = try await connection.query(
            "select item_id, reason from job_run_failures where run_id = \(runID) order by item_id", logger: logger)
        for try await (userID, reason) in result.decode((UUID, String).self) {
            rows.append([userID.uuidString.lowercased(), reason])
        }
        var failed = 0
        for try await count in try await connection.query("select failed from job_runs where id = \(runID)", logger: logger)
            .decode(Int.self)
        { failed = count }
        let unlisted = failed - (rows.count - 1)
        let earlier =
            unlisted > 0
            ? "\n\(unlisted) more failed as an earlier run of the day recorded, with the same reason (each failure is recorded once a day)"
            : ""
        return (rows.count == 1 ? "run \(runID) has no failed users recorded" : table(rows)) + earlier
    }
}

struct Pause: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Stop a job from the database: a running job stops before its next batch, and later runs do nothing until resumed.")

    @Argument(help: "The job to pause.")
    var job: String?

    @Flag(help: "Pause every job.")
    var all = false

    @Option(help: "Why, for the people who will read `nudge runs`.")
    var reason: String?

    func validate() throws {
        if (job == nil) == !all { throw ValidationError("name one job, or --all") }
    }

    func run() async throws {
        try await reportingFailures {
            let bootstrap = try Bootstrap.make()
            let name = try job.map { try bootstrap.definition($0).name } ?? "*"
            let who = "\(bootstrap.environment["USER"] ?? ProcessInfo.processInfo.userName)@\(ProcessInfo.processInfo.hostName)"
            let reason = self.reason
            _ = try await bootstrap.withDatabase("pause", limits: try .forJobs(bootstrap.environment)) { database in
                try await database.client.query(
                    """
                    insert into job_pauses (job, paused_by, reason) values (\(name), \(who), \(reason))
                    on conflict (job) do update set paused_at = now(), paused_by = excluded.paused_by, reason = excluded.reason
                    """, logger: database.logger)
            }
            print("\(name == "*" ? "every job" : name) paused; `nudge resume \(name == "*" ? "--all" : name)` restarts it")
        }
    }
}

struct Resume: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Undo `nudge pause`.")

    @Argument(help: "The job to resume.")
    var job: String?

    @Flag(help: "Lift the pause of every job (`nudge pause --all`).")
    var all = false

    func validate() throws {
        if (job == nil) == !all { throw ValidationError("name one job, or --all") }
    }

    func run() async throws {
        try await reportingFailures {
            let bootstrap = try Bootstrap.make()
            let name = try job.map { try bootstrap.definition($0).name } ?? "*"
            _ = try await bootstrap.withDatabase("resume", limits: try .forJobs(bootstrap.environment)) { database in
                try await database.client.query("delete from job_pauses where job = \(name)", logger: database.logger)
            }
            print("\(name == "*" ? "every job" : name) resumed")
        }
    }
}

/// Where the generated crontab and units say Nudge is installed.
struct LayoutOptions: ParsableArguments {
    @Option(name: .customLong("bin"), help: "The installed nudge binary (jobs/ and db/ beside its folder).")
    var binary = InstallLayout.standard.binary

    @Option(help: "The env file nudge reads DATABASE_URL and the provider keys from (NUDGE_ENV_FILE).")
    var envFile = InstallLayout.standard.envFile

    @Option(help: "Where cron appends each job's output, one <job>.log each.")
    var logDir = InstallLayout.standard.logDirectory

    var layout: InstallLayout {
        get throws {
            do {
                return try InstallLayout(binary: binary, envFile: envFile, logDirectory: logDir).validated()
            } catch {
                throw ValidationError(error.message)
            }
        }
    }
}

struct Crontab: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the crontab generated from the job definitions (scripts/install writes it for its paths).")

    @OptionGroup var paths: LayoutOptions

    func run() async throws {
        let layout = try paths.layout
        try await reportingFailures { print(try Bootstrap.make().catalog.crontab(layout), terminator: "") }
    }
}

struct Systemd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write the systemd units that run every job: nudge@.service and a timer per job (scripts/install writes them for its paths).")

    @OptionGroup var paths: LayoutOptions

    @Option(help: "The folder to write the units into (made if missing).")
    var output: String

    func run() async throws {
        let layout = try paths.layout
        let folder = URL(fileURLWithPath: output, isDirectory: true)
        try await reportingFailures {
            try writeGenerated(try Bootstrap.make().catalog.systemdUnits(layout), into: folder, what: "units")
        }
    }
}

struct Kubernetes: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write a Kubernetes CronJob manifest per job, generated from the job definitions.")

    @Option(help: "The folder to write the manifests into (made if missing).")
    var output: String

    @Option(help: "The container image: /opt/nudge as scripts/install lays it out.")
    var image: String = KubernetesSetup.standard.image

    @Option(help: "The namespace to put the CronJobs in (none: the one kubectl is given).")
    var namespace: String?

    func validate() throws {
        guard !image.isEmpty, !image.contains(where: { $0.isWhitespace || "\"'`$".contains($0) }) else {
            throw ValidationError("--image must be an image reference, without spaces or quotes")
        }
        if let problem = KubernetesSetup.imageProblem(image) { throw ValidationError(problem) }
        if let namespace,
            namespace.isEmpty || namespace.count > 63
                || !namespace.allSatisfy({ $0.isLowercase || $0.isNumber || $0 == "-" })
        {
            throw ValidationError("--namespace must be a Kubernetes name: lower-case letters, digits and '-', at most 63")
        }
    }

    func run() async throws {
        let folder = URL(fileURLWithPath: output, isDirectory: true)
        try await reportingFailures {
            let manifests = try Bootstrap.make().catalog.kubernetesManifests(KubernetesSetup(image: image, namespace: namespace))
            try writeGenerated(manifests, into: folder, what: "manifests")
        }
    }
}

/// Writes generated files (units, manifests) into `folder`, made if missing, and prints their paths.
private func writeGenerated(_ files: [(name: String, text: String)], into folder: URL, what: String) throws {
    do {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        for file in files {
            try Data(file.text.utf8).write(to: folder.appendingPathComponent(file.name), options: .atomic)
        }
    } catch {
        throw NudgeError(.configuration, "cannot write the \(what) into \(folder.path): \((error as NSError).localizedDescription)")
    }
    for file in files { print(folder.appendingPathComponent(file.name).path) }
}

/// Left-aligned columns.
func table(_ rows: [[String]]) -> String {
    guard let header = rows.first else { return "" }
    let widths = header.indices.map { column in rows.map { $0[column].count }.max() ?? 0 }
    return rows.map { row in
        row.enumerated().map { column, cell in
            column == row.count - 1 ? cell : cell.padding(toLength: widths[column], withPad: " ", startingAt: 0)
        }.joined(separator: "  ")
    }.joined(separator: "\n")
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: """
            Answer what comes back from outside: one-click unsubscribe (RFC 8058), Twilio's SMS status callbacks, and a \
            health check for load balancers.
            """,
        discussion: """
            Listens on NUDGE_HTTP_HOST (default 127.0.0.1) and NUDGE_HTTP_PORT (default 8080); the unsubscribe links in \
            emails point at NUDGE_PUBLIC_URL, signed with NUDGE_UNSUBSCRIBE_SECRET; Twilio posts to \
            NUDGE_PUBLIC_URL/webhooks/twilio, signed with TWILIO_AUTH_TOKEN; Resend's webhooks to \
            NUDGE_PUBLIC_URL/webhooks/resend, signed with RESEND_WEBHOOK_SECRET. With NUDGE_HEALTH_PORT, a second \
            listener on 127.0.0.1 answers GET /health?db=1 (the database asked now) for a monitor on this machine. \
            SIGTERM or SIGINT lets the requests in flight finish, then stops.
            """)

    func run() async throws {
        try await reportingFailures {
            let bootstrap = try Bootstrap.make()
            try ServeEnvironment.check(bootstrap.environment)
            try ServeEnvironment.refuseReadable(ServeEnvironment.jobsFiles(bootstrap.environment))
            let links = try UnsubscribeLinks(environment: bootstrap.environment)
            let resendSecret = try ResendWebhookSecret.from(bootstrap.environment)
            let host = bootstrap.environment["NUDGE_HTTP_HOST"] ?? "127.0.0.1"
            let port = try bootstrap.environment.integer("NUDGE_HTTP_PORT", default: 8080, in: 0...65_535)
            let healthPort = try bootstrap.environment["NUDGE_HEALTH_PORT"].map { _ throws(NudgeError) in
                try bootstrap.environment.integer("NUDGE_HEALTH_PORT", default: 0, in: 0...65_535)
            }
            if let healthPort, healthPort != 0, healthPort == port {
                throw NudgeError(.configuration, "NUDGE_HEALTH_PORT must differ from NUDGE_HTTP_PORT: the health listener is one of its own")
            }
            if bootstrap.environment["TWILIO_AUTH_TOKEN_PREVIOUS"] != nil && bootstrap.environment["TWILIO_AUTH_TOKEN"] == nil {
                throw NudgeError(.configuration, "TWILIO_AUTH_TOKEN_PREVIOUS is set without TWILIO_AUTH_TOKEN: give the new token too")
            }
            let limits = try ServerLimits(environment: bootstrap.environment)
            let logger = bootstrap.logger
            // Room for every connection the cap allows, and the database's and the logs' besides.
            FileDescriptors.raiseSoftLimit(toAtLeast: limits.maxConnections + 256, logger: logger)
            // Each request waits 5 seconds at most for the database (a lease, then its statement):
            // a lost database answers 503 at /health instead of holding requests.
            try await bootstrap.withDatabase(
                "serve", limits: DatabaseLimits(statementTimeout: .seconds(5)), stopOnSignals: true,
                connections: 8
            ) { database in
                try await database.refuseRoleThatMayCreateOnItsPath(command: "serve")
                try await NudgeServer.run(
                    database: database, links: links, twilioAuthToken: bootstrap.environment["TWILIO_AUTH_TOKEN"],
                    twilioPreviousAuthToken: bootstrap.environment["TWILIO_AUTH_TOKEN_PREVIOUS"].flatMap { $0.isEmpty ? nil : $0 },
                    resendWebhookSecret: resendSecret, limits: limits, host: host, port: port, healthPort: healthPort,
                    logger: logger,
                    onRunning: { bound in
                        logger.notice(
                            "listening",
                            metadata: [
                                "nudge.address": "http://\(host):\(bound)",
                                "nudge.public_url": "\(links.publicURL)",
                            ])
                        StandardError.write("nudge serve: listening on http://\(host):\(bound) (links point at \(links.publicURL))\n")
                    },
                    onHealthRunning: { bound in
                        logger.notice("health check listening", metadata: ["nudge.address": "http://127.0.0.1:\(bound)/health?db=1"])
                        StandardError.write("nudge serve: the database's health check on http://127.0.0.1:\(bound)/health?db=1\n")
                    })
            }
        }
    }
}

struct Report: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The seeds' success metrics over a period of days, each beside its target.",
        discussion: """
            Seed 000's (call answer rate with and without a preview, notification open rate, push \
            delivery rate, SMS fallback rate) and seed 003's Phase 2 (push opt-in, push open within an \
            hour, email deliverability, email open rate, notification-driven return, opt-out within 30 \
            days): for the period, per notification type and channel, and per day. Each figure is one \
            SQL query over the tables (--sql prints them). Days are local days in --timezone.
            """)

    @Option(help: "The first day, YYYY-MM-DD (default: 7 days before --to).")
    var from: String?

    @Option(help: "The last day, YYYY-MM-DD, included (default: yesterday).")
    var to: String?

    @Option(help: "The zone the days are in (an IANA name).")
    var timezone: String = "UTC"

    @Option(help: "The instant the report believes it is, for its default days (ISO 8601 with a zone; default: now).")
    var now: String?

    @Flag(help: "The report as JSON.")
    var json = false

    @Option(help: "Also write the report as a self-contained HTML page (a chart per metric) to this file.")
    var html: String?

    @Flag(help: "Print each metric's SQL query with the period's values, instead of running them.")
    var sql = false

    /// The longest period one report covers.
    static let longestPeriod = 366

    func run() async throws {
        try await reportingFailures {
            let calendar: LocalCalendar
            do { calendar = try LocalCalendar(identifier: timezone) } catch {
                throw ValidationError("--timezone must be an IANA zone name such as Europe/Paris, not '\(timezone)'")
            }
            let now = try self.now.map { try parseInstant($0, option: "--now") } ?? SystemClock().now()
            let to = try self.to.map { try parseDay($0, option: "--to") } ?? calendar.localDate(at: now).adding(days: -1)
            let from = try self.from.map { try parseDay($0, option: "--from") } ?? to.adding(days: -6)
            guard from <= to else { throw ValidationError("--from (\(from)) is after --to (\(to))") }
            guard to.daysSinceEpoch - from.daysSinceEpoch < Self.longestPeriod else {
                throw ValidationError("a report covers at most \(Self.longestPeriod) days; \(from) to \(to) is longer")
            }
            if json && html != nil { throw ValidationError("--json and --html are one or the other") }
            if sql {
                print(SuccessReportSQL.listing(from: from, to: to, calendar: calendar, zone: timezone))
                return
            }
            let bootstrap = try Bootstrap.make()
            let report = try await bootstrap.withDatabase("report", limits: try .forJobs(bootstrap.environment)) { database in
                try await database.client.withConnection { connection in
                    try await SuccessReport.compute(from: from, to: to, calendar: calendar, zone: timezone, on: connection, logger: database.logger)
                }
            }
            if let html {
                let page = ReportRendering.html(report, generatedAt: now)
                do { try Data(page.utf8).write(to: URL(fileURLWithPath: html), options: .atomic) } catch {
                    throw NudgeError(.configuration, "cannot write \(html): \(error.localizedDescription)")
                }
                StandardError.write("nudge report: wrote \(html)\n")
            }
            print(json ? try ReportRendering.json(report) : ReportRendering.table(report), terminator: "")
        }
    }
}

struct Grafana: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write the Grafana dashboard (nudge.json): nudge report's queries, and the runs' Prometheus metrics.")

    @Option(help: "The folder to write nudge.json into (made if missing).")
    var output: String

    func run() async throws {
        let folder = URL(fileURLWithPath: output, isDirectory: true)
        try await reportingFailures {
            try writeGenerated([(name: "nudge.json", text: try GrafanaDashboard.json())], into: folder, what: "dashboard")
        }
    }
}
