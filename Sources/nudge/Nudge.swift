import ArgumentParser
import Foundation
import Logging
import NudgeCore

@main
struct Nudge: AsyncParsableCommand {
    static func main() async {
        // A reader that closes the pipe (`nudge runs | head`) must end output, not the process
        // with SIGPIPE: the run and its ledger row go on to their end.
        signal(SIGPIPE, SIG_IGN)
        var command: any ParsableCommand
        do {
            command = try parseAsRoot()
        } catch {
            exit(withError: error)
        }
        do {
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let error as ValidationError {
            // A usage error found while running shows the usage of the command that was run.
            let subcommand = type(of: command)
            let name = subcommand.configuration.commandName ?? String(describing: subcommand).lowercased()
            StandardError.write(
                "Error: \(error.message)\nUsage: \(usageString(for: subcommand))\n"
                    + "  See 'nudge \(name) --help' for more information.\n")
            exit(withError: ExitCode.validationFailure)
        } catch {
            exit(withError: error)
        }
    }

    static let configuration = CommandConfiguration(
        commandName: "nudge",
        abstract: "The engagement back office: named batch jobs over every user, in their local time.",
        discussion: """
            Configuration comes from the environment, and from the env file NUDGE_ENV_FILE names for \
            what the environment does not set: DATABASE_URL (postgres://…), NUDGE_ENABLED and \
            <JOB>_ENABLED (kill switches), NUDGE_LOG_LEVEL, NUDGE_LOG_FORMAT (json or text), NUDGE_HOME, \
            NUDGE_METRICS_DIR (Prometheus textfiles), NUDGE_HEALTHCHECK_URL[_<JOB>].
            Exit status: 0 success (also: disabled, nothing to do), 3 some users failed, 1 aborted, \
            64 usage error, 75 another run of the job holds its lock.
            """,
        version: NudgeVersion.current,
        subcommands: [
            ListJobs.self, Run.self, Migrate.self, Seed.self, Runs.self, Pause.self, Resume.self, Crontab.self, Systemd.self, Kubernetes.self, Serve.self,
            Report.self, Grafana.self,
        ]
    )
}
