/// Where an installed Nudge lives, as docs/operations.md installs it (`scripts/install`): the paths the
/// generated crontab and systemd units name. `--prefix` installs (and the tests) move them all.
public struct InstallLayout: Sendable, Equatable {
    /// The binary, with `jobs/`, `db/` and `templates/` beside its folder.
    public var binary: String
    /// The env file `nudge` reads (`NUDGE_ENV_FILE`): `DATABASE_URL` and the provider keys.
    public var envFile: String
    /// Where cron appends each job's output, one file per job.
    public var logDirectory: String

    public static let standard = InstallLayout(
        binary: "/opt/nudge/bin/nudge", envFile: "/etc/nudge/env",
        logDirectory: "/var/log/nudge")

    public init(binary: String, envFile: String, logDirectory: String) {
        self.binary = binary
        self.envFile = envFile
        self.logDirectory = logDirectory
    }

    /// `nudge serve`'s own env file, beside the jobs' (`/etc/nudge/serve.env`): the narrow
    /// database role and the webhooks' secrets, no provider key.
    public var serveEnvFile: String { configurationFolder + "/serve.env" }

    /// The folder of the providers' key files (`/etc/nudge/keys`, root's, which group `nudge` may
    /// enter; the files root's alone under systemd), which systemd
    /// hands to the jobs as credentials (`LoadCredential=nudge:<folder>`: each file becomes
    /// `$CREDENTIALS_DIRECTORY/nudge_<its name>`, which Nudge reads in place of the file its setting names).
    public var keysDirectory: String { configurationFolder + "/keys" }

    /// The env file's folder (`/etc/nudge`), without a trailing slash.
    private var configurationFolder: String {
        envFile.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
    }

    /// The owner's env file (`/etc/nudge/owner.env`, root's alone): `DATABASE_URL` as the role that
    /// owns Nudge's tables, for whoever runs `nudge migrate`, `nudge seed` and `roles.sql`; never
    /// read by a unit.
    public var ownerEnvFile: String { configurationFolder + "/owner.env" }

    /// The OS users (each with a group of its own) the units run as: the jobs, and `nudge serve`,
    /// which faces the internet and may read none of the jobs' files.
    public static let jobsUser = "nudge"
    public static let serveUser = "nudge-serve"

    /// The sandbox of a unit: a service that can read what it needs, write nothing but
    /// `writable`, never see `hidden` (`-`: a missing path is no error), reach the network and
    /// nothing else of the kernel (`systemd-analyze security` rates it OK).
    static func hardening(writable: [String], hidden: [String]) -> String {
        var lines = [
            "# Sandbox (systemd-analyze security rates it OK): nothing written"
                + (writable.isEmpty ? "," : " but")
        ]
        lines += writable.map { "# \($0)," }
        lines += [
            "# nothing of the other processes' files seen, no privilege, no device, no kernel",
            "# tunable, only the system calls of a network service.",
            "UMask=0077",
            "NoNewPrivileges=yes",
            "CapabilityBoundingSet=",
            "AmbientCapabilities=",
            "PrivateTmp=yes",
            "PrivateDevices=yes",
            "PrivateUsers=yes",
            "ProtectSystem=strict",
            "ProtectHome=yes",
        ]
        lines += writable.map { "ReadWritePaths=-\($0)" }
        lines += hidden.map { "InaccessiblePaths=-\($0)" }
        lines += [
            "ProtectKernelTunables=yes",
            "ProtectKernelModules=yes",
            "ProtectKernelLogs=yes",
            "ProtectControlGroups=yes",
            "ProtectClock=yes",
            "ProtectHostname=yes",
            "ProtectProc=invisible",
            "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
            "RestrictNamespaces=yes",
            "RestrictRealtime=yes",
            "RestrictSUIDSGID=yes",
            "LockPersonality=yes",
            "MemoryDenyWriteExecute=yes",
            "RemoveIPC=yes",
            "KeyringMode=private",
            "DevicePolicy=closed",
            "SystemCallArchitectures=native",
            "SystemCallFilter=@system-service",
            "SystemCallFilter=~@privileged",
            "SystemCallErrorNumber=EPERM",
        ]
        return lines.joined(separator: "\n")
    }

    /// Where node-exporter's textfile collector reads the jobs' metrics (`NUDGE_METRICS_DIR`).
    static let metricsDirectory = "/var/lib/prometheus/node-exporter"

    /// Refuses paths cron or systemd would read as something else: relative ones, and ones with
    /// white space, quotes, `%` (a newline to cron) or `\`.
    public func validated() throws(NudgeError) -> InstallLayout {
        for (name, path) in [("--bin", binary), ("--env-file", envFile), ("--log-dir", logDirectory)] {
            guard path.hasPrefix("/") else { throw NudgeError(.usage, "\(name) must be an absolute path, not '\(path)'") }
            guard !path.contains(where: { $0.isWhitespace || "%\"'\\$`".contains($0) }) else {
                throw NudgeError(.usage, "\(name) '\(path)' has a character cron or systemd would misread (white space, quotes, %, \\, $ or `)")
            }
        }
        return self
    }
}

extension JobCatalog {
    /// The crontab that runs every job, generated from the definitions (`nudge crontab`;
    /// `scripts/install` writes it for its layout).
    public func crontab(_ layout: InstallLayout = .standard) -> String {
        var lines = [
            "# Nudge's crontab, generated by `nudge crontab` from jobs/*.json: edit those, not this file.",
            "# The jobs act at each user's local time, so cron's own time zone does not matter: every",
            "# zone's offset is a whole number of quarter hours, and a job started every 15 minutes (or",
            "# more often) meets every zone's local minute; a job that stays due for hours after its",
            "# moment (push-trigger) starts hourly. Overlapping starts are safe: a second run of a job",
            "# exits 75 while the first holds its lock.",
            "# nudge reads DATABASE_URL and the provider keys from the env file NUDGE_ENV_FILE names",
            "# (never from this file); each job's output is appended to its own log file, which only",
            "# nudge and its group may read (umask 027).",
            "SHELL=/bin/sh",
            "PATH=/usr/local/bin:/usr/bin:/bin",
            "NUDGE_ENV_FILE=\(layout.envFile)",
            "",
        ]
        for definition in definitions {
            lines.append("# \(definition.name): \(definition.summary)")
            lines.append("# Stop it with \(definition.killSwitch)=false or `nudge pause \(definition.name)`.")
            lines.append("\(definition.schedule) umask 027; \(layout.binary) run \(definition.name) >>\(layout.logDirectory)/\(definition.name).log 2>&1")
            if let sweep = definition.sweepSchedule {
                lines.append("# Its weekly sweep: every user read once, to prove the due index right (it logs what the index missed).")
                lines.append("\(sweep) umask 027; \(layout.binary) run \(definition.name) --sweep >>\(layout.logDirectory)/\(definition.name).log 2>&1")
            }
            lines.append("")
        }
        return lines.joined(separator: "\n")
    }

    /// The systemd units that run every job instead of cron: one service template,
    /// `nudge@.service`, and a timer per job on the job's schedule. File names and contents.
    public func systemdUnits(_ layout: InstallLayout = .standard) -> [(name: String, text: String)] {
        let credentials = "LoadCredential=nudge:\(layout.keysDirectory)"
        /// The service template that runs one job (`sweep`: its weekly sweep) named after the @.
        func jobService(sweep: Bool) -> String {
            let what =
                sweep
                ? """
                # The weekly sweep of the job named after the @ (nudge-sweep@validate-streaks.service):
                # every user read once, to prove the due index right; its timer starts it.
                """
                : "# One run of the job named after the @ (nudge@validate-streaks.service); its timer starts it."
            return """
                # Generated by `nudge systemd` from jobs/*.json: edit those, not this file.
                \(what)
                [Unit]
                Description=Nudge job %i\(sweep ? ", its weekly sweep" : "")
                After=network-online.target
                Wants=network-online.target

                [Service]
                Type=oneshot
                User=\(InstallLayout.jobsUser)
                Group=\(InstallLayout.jobsUser)
                # DATABASE_URL and the provider keys: nudge reads this file itself, as under cron.
                Environment=NUDGE_ENV_FILE=\(layout.envFile)
                ExecStart=\(layout.binary) run %i\(sweep ? " --sweep" : "")
                # 3: the run completed and some users failed, each with its reason in the ledger
                # (`nudge runs --failures N`); 75: another run of the job holds its lock. Neither is a
                # failure of the unit: monitoring reads them from the metrics and the healthcheck.
                SuccessExitStatus=3 75
                # SIGTERM ends the run after its batch: outside calls get NUDGE_SHUTDOWN_GRACE_SECONDS
                # (20 s by default), then the checkpoint is written. A second SIGTERM ends it at once.
                KillMode=mixed
                TimeoutStopSec=60
                # The providers' key files (APNS_PRIVATE_KEY, GOOGLE_APPLICATION_CREDENTIALS), root's
                # alone in this folder (mode 600), handed over by systemd.
                \(credentials)
                \(InstallLayout.hardening(writable: [InstallLayout.metricsDirectory], hidden: [layout.serveEnvFile, layout.ownerEnvFile]))

                """
        }
        let serve = """
            # Generated by `nudge systemd`: edit Nudge, not this file.
            # `nudge serve`: one-click unsubscribe and the health check, always on (docs/serve.md).
            [Unit]
            Description=Nudge's HTTP server (unsubscribe, health)
            After=network-online.target
            Wants=network-online.target

            [Service]
            Type=simple
            # A user and group of its own: the jobs' env file and key files are not its to read,
            # and the sandbox hides them besides; nudge serve refuses to start if it can open them.
            User=\(InstallLayout.serveUser)
            Group=\(InstallLayout.serveUser)
            # Its own env file, never the jobs': DATABASE_URL (the nudge_serve role), NUDGE_HTTP_HOST,
            # NUDGE_HTTP_PORT, NUDGE_PUBLIC_URL, NUDGE_UNSUBSCRIBE_SECRET, TWILIO_AUTH_TOKEN and
            # RESEND_WEBHOOK_SECRET; it refuses to start with a provider's key.
            Environment=NUDGE_ENV_FILE=\(layout.serveEnvFile)
            ExecStart=\(layout.binary) serve
            # SIGTERM lets the requests in flight finish, then the server stops.
            KillSignal=SIGTERM
            TimeoutStopSec=30
            Restart=on-failure
            RestartSec=5
            # A connection is a file: room for NUDGE_HTTP_MAX_CONNECTIONS and more.
            LimitNOFILE=65536
            \(InstallLayout.hardening(writable: [], hidden: [layout.envFile, layout.keysDirectory, layout.ownerEnvFile]))

            [Install]
            WantedBy=multi-user.target

            """
        var units = [(name: "nudge@.service", text: jobService(sweep: false)), (name: "nudge-serve.service", text: serve)]
        if definitions.contains(where: { $0.sweepSchedule != nil }) {
            units.append((name: "nudge-sweep@.service", text: jobService(sweep: true)))
        }
        for definition in definitions {
            // Definitions were validated when read: their schedules parse.
            let calendar = (try? CronSchedule(definition.schedule).onCalendar) ?? ""
            units.append(
                (
                    name: "nudge-\(definition.name).timer",
                    text: """
                    # Generated by `nudge systemd` from jobs/\(definition.name).json: edit that, not this file.
                    # \(definition.name): \(definition.summary)
                    # Stop it with \(definition.killSwitch)=false (in \(layout.envFile)) or `nudge pause \(definition.name)`.
                    [Unit]
                    Description=Start Nudge's \(definition.name) on its schedule (\(definition.schedule), UTC)

                    [Timer]
                    OnCalendar=\(calendar)
                    # On the minute: the default accuracy would let a start drift by up to a minute.
                    AccuracySec=1s
                    # A start missed while the machine was off happens at boot; the job catches up by itself.
                    Persistent=true
                    Unit=nudge@\(definition.name).service

                    [Install]
                    WantedBy=timers.target

                    """
                ))
            guard let sweep = definition.sweepSchedule else { continue }
            units.append(
                (
                    name: "nudge-\(definition.name)-sweep.timer",
                    text: """
                    # Generated by `nudge systemd` from jobs/\(definition.name).json: edit that, not this file.
                    # \(definition.name)'s weekly sweep: every user read once, to prove the due index right.
                    [Unit]
                    Description=Start Nudge's \(definition.name) sweep on its schedule (\(sweep), UTC)

                    [Timer]
                    OnCalendar=\((try? CronSchedule(sweep).onCalendar) ?? "")
                    AccuracySec=1s
                    Persistent=true
                    Unit=nudge-sweep@\(definition.name).service

                    [Install]
                    WantedBy=timers.target

                    """
                ))
        }
        return units
    }
}
