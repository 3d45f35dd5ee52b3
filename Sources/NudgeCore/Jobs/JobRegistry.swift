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

/// The jobs Nudge can run, by name. Each name has a definition in `jobs/` and an implementation here.
public enum JobRegistry {
    public static let names: Set<String> = ["dispatch", "generate-daily-goals", "leaderboard-refresh", "preview-notifications", "prune",
                                             "push-trigger", "reminders", "validate-streaks", "weekly-digest"]

    /// Builds the job for one run, with the outside clients it needs, and runs `body` with it; the
    /// clients are shut down on every path out. A bad configuration (a missing API key) throws
    /// before `body` runs, so before the database is touched.
    public static func withJob<Result: Sendable>(_ setup: JobSetup,
                                                 _ body: (any Job) async throws -> Result) async throws -> Result {
        let definition = setup.definition
        switch definition.name {
        case "generate-daily-goals":
            return try await body(GenerateDailyGoalsJob(definition: definition))
        case "validate-streaks":
            return try await body(ValidateStreaksJob(definition: definition))
        case "leaderboard-refresh":
            return try await body(LeaderboardRefreshJob(definition: definition))
        case "prune":
            return try await body(try PruneJob(definition: definition))
        case "preview-notifications":
            return try await body(PreviewNotificationsJob(definition: definition))
        case "weekly-digest":
            return try await body(WeeklyDigestJob(definition: definition,
                                                  email: try EmailSetup(setup.environment, template: DigestEmail.template)))
        case "reminders":
            return try await body(RemindersJob(definition: definition,
                                               email: try EmailSetup(setup.environment, template: ReminderEmail.template)))
        case "push-trigger":
            guard setup.options.callsLLM else {
                return try await body(PushTriggerJob(definition: definition, llm: nil, budget: setup.options.llmBudget))
            }
            let configuration = try LLMConfiguration(environment: setup.environment)
            return try await LLMClient.with(configuration, concurrency: setup.options.concurrency) { client in
                try await body(PushTriggerJob(definition: definition, llm: client, budget: setup.options.llmBudget))
            }
        case "dispatch":
            return try await DeliveryServices.with(setup.environment, dryRun: setup.options.dryRun) { push in
                let shortest = DispatchJob.shortestLease(pushTimeout: push.timeout)
                let lease = try setup.environment.integer("NUDGE_DISPATCH_LEASE_SECONDS", default: max(120, shortest),
                                                           in: shortest...3_600)
                return try await body(DispatchJob(definition: definition, push: push, lease: TimeInterval(lease),
                                                  dryRun: setup.options.dryRun, clock: setup.options.clock))
            }
        default:
            throw NudgeError(.configuration, "job '\(definition.name)' is defined in jobs/ but not built into this binary")
        }
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
