import Foundation
import PackagePlugin

/// Lists Nudge's jobs for `JobRegistry`: every folder `Jobs/<Folder>/` of the target that holds
/// `<Folder>Job.swift` is a job, its type `<Folder>Job` (a `RegisteredJob`). The list is written
/// to `JobTable.swift` in the build folder, never to the repository, so that a new job's folder is
/// all the code it takes; a folder of shared types (`Jobs/Tracking/`) holds no such file.
@main
struct JobTable: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        guard let target = target as? SourceModuleTarget else { return [] }
        let jobs = target.sourceFiles(withSuffix: "swift").map(\.url).filter { file in
            let folder = file.deletingLastPathComponent()
            return folder.deletingLastPathComponent().lastPathComponent == "Jobs"
                && file.lastPathComponent == folder.lastPathComponent + "Job.swift"
        }
        let types = jobs.map { $0.deletingPathExtension().lastPathComponent }.sorted()
        let table = """
            // Written by the JobTable plugin (Plugins/JobTable) from the folders of Jobs/: not in the repository.
            enum JobTable {
                static let jobs: [any RegisteredJob.Type] = [
            \(types.map { "        \($0).self," }.joined(separator: "\n"))
                ]
            }

            """
        let output = context.pluginWorkDirectoryURL.appendingPathComponent("JobTable.swift")
        return [.buildCommand(displayName: "Listing the jobs of \(target.name) (\(types.count))",
                              executable: URL(fileURLWithPath: "/bin/sh"),
                              arguments: ["-c", "printf '%s' \"$1\" > \"$2\"", "job-table", table, output.path],
                              inputFiles: jobs, outputFiles: [output])]
    }
}
