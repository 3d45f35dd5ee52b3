import Foundation

/// The folder that holds Nudge's files next to its binary: `jobs/` (the job definitions), `db/`
/// (migrations and the seed) and `templates/` (the emails). Found from `NUDGE_HOME`, else by walking up from the
/// executable; never from the working directory, where a planted `db/migrations` would run.
public struct NudgeHome: Sendable {
    public let root: URL

    public var jobsDirectory: URL { root.appendingPathComponent("jobs") }
    public var migrationsDirectory: URL { root.appendingPathComponent("db/migrations") }
    public var seedScript: URL { root.appendingPathComponent("db/seed.sql") }
    /// The emails' Mustache templates (`templates/email/`).
    public var emailTemplatesDirectory: URL { root.appendingPathComponent("templates/email") }

    public init(root: URL) {
        self.root = root
    }

    public static func locate(_ environment: Environment) throws(NudgeError) -> NudgeHome {
        if let configured = environment["NUDGE_HOME"] {
            let home = NudgeHome(root: URL(fileURLWithPath: configured))
            guard home.looksComplete else {
                throw NudgeError(.configuration, "NUDGE_HOME=\(configured) does not hold jobs/ and db/migrations/")
            }
            return home
        }
        let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        var folder = executable.deletingLastPathComponent()
        while folder.path != "/" {
            let home = NudgeHome(root: folder)
            if home.looksComplete { return home }
            folder.deleteLastPathComponent()
        }
        throw NudgeError(
            .configuration,
            """
            cannot find Nudge's jobs/ and db/migrations/ folders in a folder above the binary; set NUDGE_HOME to the \
            folder that holds them
            """)
    }

    private var looksComplete: Bool {
        var isFolder: ObjCBool = false
        return FileManager.default.fileExists(atPath: jobsDirectory.path, isDirectory: &isFolder) && isFolder.boolValue
            && FileManager.default.fileExists(atPath: migrationsDirectory.path, isDirectory: &isFolder) && isFolder.boolValue
    }
}
