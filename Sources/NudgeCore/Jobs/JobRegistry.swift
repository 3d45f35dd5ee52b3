import Foundation

/// What building a job for one run needs: its definition, the environment (provider keys) and
/// the run's options (a dry run calls no LLM, the LLM budget, the concurrency).
public struct JobSetup: Sendable {
    public let definition: JobDefinition
    public let environment: Environment
    public let options: RunOptions

    public init(definition: JobDefinition, environment: Environment, options: RunOptions) {
        self.definition = definition
        self.environment = environment
        self.options = options
    }
}

/// A job Nudge can run: its name (that of its definition in `jobs/`) and how one run of it is
/// built, both stated in its own folder. No list of jobs is kept by hand: the JobTable plugin
/// (`Plugins/JobTable`) finds each folder of `Jobs/` that holds a `<Folder>Job.swift` and lists
/// its `<Folder>Job` type, so adding a job touches its folder, its definition and its docs alone.
public protocol RegisteredJob: Job {
    /// The name of its definition, `jobs/<jobName>.json`.
    static var jobName: String { get }

    /// Builds the job for one run, with the outside clients it needs, and runs `body` with it;
    /// the clients are shut down on every path out. A bad configuration (a missing API key)
    /// throws before `body` runs, so before the database is touched.
    static func withJob<Result: Sendable>(_ setup: JobSetup, _ body: (any Job) async throws -> Result) async throws -> Result
}

/// A job built from its definition alone: it calls nothing outside the database.
public protocol PlainJob: RegisteredJob {
    init(definition: JobDefinition) throws
}

extension PlainJob {
    public static func withJob<Result: Sendable>(_ setup: JobSetup, _ body: (any Job) async throws -> Result) async throws -> Result {
        try await body(try Self(definition: setup.definition))
    }
}

/// The jobs Nudge can run, by name: the types the JobTable plugin found in `Jobs/`.
public enum JobRegistry {
    public static let names: Set<String> = Set(JobTable.jobs.map { $0.jobName })

    /// The job `setup` names, built for one run (`RegisteredJob.withJob`).
    public static func withJob<Result: Sendable>(
        _ setup: JobSetup,
        _ body: (any Job) async throws -> Result
    ) async throws -> Result {
        guard let job = JobTable.jobs.first(where: { $0.jobName == setup.definition.name }) else {
            throw NudgeError(.configuration, "job '\(setup.definition.name)' is defined in jobs/ but not built into this binary")
        }
        return try await job.withJob(setup, body)
    }
}

/// What a job that writes emails needs from the environment: its templates (from `NudgeHome`),
/// the unsubscribe links (`NUDGE_UNSUBSCRIBE_SECRET`, `NUDGE_PUBLIC_URL`), the sender's postal
/// address every footer carries (`NUDGE_POSTAL_ADDRESS`, CAN-SPAM), and where the button leads
/// (`NUDGE_DASHBOARD_URL`, optional). Each one missing is a configuration error that names it.
public struct EmailSetup: Sendable {
    public let templates: EmailTemplates
    public let links: UnsubscribeLinks
    /// `NUDGE_POSTAL_ADDRESS`: the sender's postal address, in every email's footer (CAN-SPAM).
    public let postalAddress: String
    /// `NUDGE_DASHBOARD_URL`: where the email's button leads; no button without it.
    public let dashboardURL: String?

    public init(templates: EmailTemplates, links: UnsubscribeLinks, postalAddress: String, dashboardURL: String?) {
        self.templates = templates
        self.links = links
        self.postalAddress = postalAddress
        self.dashboardURL = dashboardURL
    }

    init(_ environment: Environment, template: String) throws(NudgeError) {
        let home = try NudgeHome.locate(environment)
        templates = try EmailTemplates(directory: home.emailTemplatesDirectory, emails: [template])
        links = try UnsubscribeLinks(environment: environment)
        postalAddress = try environment.require(
            "NUDGE_POSTAL_ADDRESS", hint: "the sender's postal address, which every email's footer carries (CAN-SPAM)")
        dashboardURL = environment["NUDGE_DASHBOARD_URL"]
    }
}
