import Foundation
import Testing

@testable import NudgeCore

/// The manifests `nudge kubernetes` writes, checked by the field's reference validator and by
/// running the container's own command line as Kubernetes would.
@Suite(.dropsItsDatabases) struct KubernetesTests {
    /// A folder of what `nudge kubernetes --output` writes for the standard image (generated from
    /// jobs/*.json, never kept in the repository).
    private func manifests() async throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nudge-kubernetes-\(UUID())")
        let result = try await runProcessOffThePool(
            NudgeBinary.path, ["kubernetes", "--output", folder.path],
            environment: ["NUDGE_HOME": packageRoot.path])
        guard result.status == 0 else { throw TestFailure("nudge kubernetes --output: \(result.stderr)") }
        return folder
    }

    @Test func theManifestsPassKubernetesValidateStrict() async throws {
        let folder = try await manifests()
        defer { try? FileManager.default.removeItem(at: folder) }
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".yaml") }
            .map { folder.appendingPathComponent($0).path }
        #expect(!files.isEmpty)
        let result = try await runProcessOffThePool("/usr/bin/env", ["kubernetes-validate", "--strict"] + files)
        #expect(result.status == 0, "kubernetes-validate: \(result.stdout)\(result.stderr) (scripts/test installs it from PyPI)")
    }

    /// `nudge kubernetes` writes a manifest per job, its sweep beside it, every pod locked down
    /// (non-root, read-only root filesystem, no privilege escalation, no capabilities), with
    /// resources, and the exit-code mapping.
    @Test func everyJobHasItsGeneratedLockedDownCronJob() async throws {
        let folder = try await manifests()
        defer { try? FileManager.default.removeItem(at: folder) }
        let written = Set(try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".yaml") })
        let generated = try JobCatalog(directory: packageRoot.appendingPathComponent("jobs")).kubernetesManifests()
        #expect(written == Set(generated.map(\.name)))
        #expect(Set(generated.map(\.name)) == Set(JobRegistry.names.map { "\($0).yaml" }))
        for manifest in generated {
            let path = folder.appendingPathComponent(manifest.name).path
            #expect(try String(contentsOfFile: path, encoding: .utf8) == manifest.text, "\(manifest.name) differs from `nudge kubernetes`")
        }
        let script = """
            import json, sys, yaml
            out = []
            for path in sys.argv[1:]:
                for doc in yaml.safe_load_all(open(path)):
                    job = doc['spec']['jobTemplate']['spec']
                    pod = job['template']['spec']
                    container = pod['containers'][0]
                    out.append({'name': doc['metadata']['name'], 'args': container['args'],
                                'completions': job['completions'], 'pod': pod['securityContext'],
                                'container': container['securityContext'], 'resources': container['resources'],
                                'rules': job['podFailurePolicy']['rules']})
            print(json.dumps(out))
            """
        let paths = written.sorted().map { folder.appendingPathComponent($0).path }
        let result = try await runProcessOffThePool("/usr/bin/env", ["python3", "-c", script] + paths)
        let cronJobs = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]], "\(result.stderr)")
        let catalog = try JobCatalog(directory: packageRoot.appendingPathComponent("jobs"))
        // A CronJob per job, and one per weekly sweep.
        #expect(cronJobs.count == catalog.definitions.count + catalog.definitions.filter { $0.sweepSchedule != nil }.count)
        #expect(cronJobs.count >= 14)
        for cronJob in cronJobs {
            let name = cronJob["name"] as? String ?? "?"
            let pod = cronJob["pod"] as? [String: Any] ?? [:]
            let container = cronJob["container"] as? [String: Any] ?? [:]
            #expect(pod["runAsNonRoot"] as? Bool == true && (pod["runAsUser"] as? Int ?? 0) > 0, "\(name)")
            #expect(container["readOnlyRootFilesystem"] as? Bool == true, "\(name)")
            #expect(container["allowPrivilegeEscalation"] as? Bool == false, "\(name)")
            #expect((container["capabilities"] as? [String: [String]])?["drop"] == ["ALL"], "\(name)")
            let resources = cronJob["resources"] as? [String: [String: String]] ?? [:]
            #expect(resources["requests"]?["memory"] != nil && resources["limits"]?["memory"] != nil, "\(name)")
            let args = cronJob["args"] as? [String] ?? []
            #expect(args.suffix(2) == ["--exit-zero-on", "3,75"], "\(name)")
            #expect(args.contains("--sweep") == name.hasSuffix("-sweep"), "\(name)")
            let completions = cronJob["completions"] as? Int ?? 0
            #expect(args.contains("$(SHARD_INDEX)/\(completions)") == (completions > 1), "\(name)")
            let rules = cronJob["rules"] as? [[String: Any]] ?? []
            #expect(rules.contains { $0["action"] as? String == "FailJob" }, "\(name)")
        }
        // prune runs over whole tables: one pod, no shard.
        #expect(cronJobs.first { $0["name"] as? String == "nudge-prune" }?["completions"] as? Int == 1)
    }

    /// The pod's command, as Kubernetes runs it: `$(SHARD_INDEX)` expanded, the image's binary.
    private func podCommand(index: Int) async throws -> [String] {
        let folder = try await manifests()
        defer { try? FileManager.default.removeItem(at: folder) }
        let manifest = folder.appendingPathComponent("validate-streaks.yaml").path
        let script = """
            import json, sys, yaml
            job = next(yaml.safe_load_all(open(sys.argv[1])))['spec']['jobTemplate']['spec']
            container = job['template']['spec']['containers'][0]
            print(json.dumps({'command': container['command'] + container.get('args', []), 'policy': job.get('podFailurePolicy', {})}))
            """
        let result = try await runProcessOffThePool("/usr/bin/env", ["python3", "-c", script, manifest])
        guard result.status == 0, let object = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any],
            let command = object["command"] as? [String], let policy = object["policy"] as? [String: Any]
        else { throw TestFailure("cannot read \(manifest): \(result.stderr)") }
        // Ignore on an exit code means "retry the pod": with concurrencyPolicy Forbid, a status
        // that always comes back would be retried for ever and block every later run.
        let rules = policy["rules"] as? [[String: Any]] ?? []
        #expect(!rules.contains { $0["action"] as? String == "Ignore" && $0["onExitCodes"] != nil }, "\(rules)")
        return [NudgeBinary.path] + command.dropFirst().map { $0.replacingOccurrences(of: "$(SHARD_INDEX)", with: "\(index)") }
    }

    /// A user whose data always fails (exit 3) or a shard whose lock is held (75) ends the pod as
    /// done; a database that cannot be reached (1) does not.
    @Test func aPodEndsDoneWhenUsersFailOrTheLockIsHeldAndFailsWhenTheRunAborts() async throws {
        let database = try await TestDatabase.fresh()
        try await Fixture.population(database, count: 40, signup: "2026-11-01T00:00:00Z", from: "2026-10-31", to: "2026-11-30")
        try await database.psql("update users set timezone = 'Mars/Olympus'")
        var failedUsers = 0
        for index in 0..<4 {
            let command = try await podCommand(index: index)
            let result = try await runProcessOffThePool(command[0], Array(command.dropFirst()), environment: database.nudgeEnvironment([:]))
            #expect(result.status == 0, "shard \(index): \(result.stderr)")
            failedUsers += try await database.count("select failed from job_runs order by id desc limit 1")
        }
        #expect(failedUsers == 40)
        #expect(try await database.psql("select distinct status from job_runs") == "partial")

        let command = try await podCommand(index: 0)
        // Shard 0/4's lock, held by another session as a running pod would hold it.
        let key = RunLocks.jobKey("validate-streaks")
        let holder = try await TestSQL.hold("select nudge_try_run_lock(\(key), 0, 4)", url: database.url)
        let locked: ProcessResult
        do {
            #expect(
                try await database.count(
                    """
                    select count(*) from pg_locks where locktype = 'advisory' and granted
                       and database = (select oid from pg_database where datname = current_database())
                    """) >= 2)
            locked = try await runProcessOffThePool(command[0], Array(command.dropFirst()), environment: database.nudgeEnvironment([:]))
        } catch {
            await holder.end()
            throw error
        }
        await holder.end()
        #expect(locked.status == 0, "\(locked.stderr)")
        #expect(locked.stderr.contains("holds the lock"))

        let down = try await runProcessOffThePool(
            command[0], Array(command.dropFirst()),
            environment: database.nudgeEnvironment(
                ["DATABASE_URL": "postgres://nudge@localhost/nudge?host=/nonexistent&port=5999"]))
        #expect(down.status == 1)
    }
}
