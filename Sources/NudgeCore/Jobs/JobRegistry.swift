/// The jobs Nudge can run, by name. Each name has a definition in `jobs/` and an implementation here.
public enum JobRegistry {
    public static let implementations: [String: @Sendable (JobDefinition) -> any Job] = [
        "generate-daily-goals": { GenerateDailyGoalsJob(definition: $0) },
        "validate-streaks": { ValidateStreaksJob(definition: $0) },
    ]

    public static func job(for definition: JobDefinition) -> (any Job)? {
        implementations[definition.name].map { $0(definition) }
    }
}
