import Foundation

/// One job's entry in `jobs/<name>.json`: the single source for `nudge list`, the crontab, the
/// kill-switch variable, the local time the job acts at and its default batch size.
public struct JobDefinition: Codable, Sendable, Equatable {
    public let name: String
    public let summary: String
    /// When cron starts it, in crontab syntax. Cron runs a job more often than it acts; the job
    /// asks, per user, whether its local moment is due and not yet done.
    public let schedule: String
    /// The local wall-clock time the job acts at for each user, when it has one.
    public let localTime: LocalTime?
    /// How long after `localTime` a user is still due, for a job that must act near that moment or
    /// not at all (a proactive push at 10:00 is no use at 22:00); nil for a job that catches up
    /// whenever it runs.
    public let dueForMinutes: Int?
    /// The pause between one batch's outside calls and the next batch's (push-trigger: 100 ms).
    public let pauseBetweenBatchesMilliseconds: Int?
    /// How many local days back a job that folds over days (validate-streaks) starts when it
    /// meets a user for the first time; older days are taken as they stand.
    public let catchUpDays: Int?
    /// For a job that drains a queue (dispatch): how long a run keeps taking what falls due, so
    /// that cron's start every minute and the drain together leave no gap.
    public let drainSeconds: Int?
    /// The job's default `--concurrency`: how many items of a batch its outside step works on at
    /// once (dispatch: every user of the batch).
    public let concurrency: Int?
    /// For a queue job: how many batches a run works on at once (`--lanes`), each claimed on its
    /// own connection.
    public let lanes: Int?
    /// For dispatch: how long after its time each type of notification is still worth sending.
    public let shelfLife: ShelfLife?
    /// For prune: how many days each table it keeps bounded keeps its rows (`RetentionRule`).
    public let retentionDays: [String: Int]?
    /// For a job that reads through the due index: when its weekly sweep (`--sweep`) runs, in
    /// crontab syntax (off-peak).
    public let sweepSchedule: String?
    /// How many shards its Kubernetes CronJob runs at once (`--shard i/N`); 1 when absent. The
    /// README's table says why each job has the number it has.
    public let shards: Int?
    public let killSwitch: String
    /// Whether the job runs when its kill-switch variable is unset (push-trigger ships off).
    public let enabledByDefault: Bool
    public let batchSize: Int

    public init(
        name: String, summary: String, schedule: String, localTime: LocalTime?, dueForMinutes: Int? = nil,
        pauseBetweenBatchesMilliseconds: Int? = nil, catchUpDays: Int? = nil, drainSeconds: Int? = nil, concurrency: Int? = nil, lanes: Int? = nil,
        shelfLife: ShelfLife? = nil,
        retentionDays: [String: Int]? = nil, sweepSchedule: String? = nil, shards: Int? = nil,
        killSwitch: String, enabledByDefault: Bool, batchSize: Int
    ) {
        self.name = name
        self.summary = summary
        self.schedule = schedule
        self.localTime = localTime
        self.dueForMinutes = dueForMinutes
        self.pauseBetweenBatchesMilliseconds = pauseBetweenBatchesMilliseconds
        self.catchUpDays = catchUpDays
        self.drainSeconds = drainSeconds
        self.concurrency = concurrency
        self.lanes = lanes
        self.shelfLife = shelfLife
        self.retentionDays = retentionDays
        self.sweepSchedule = sweepSchedule
        self.shards = shards
        self.killSwitch = killSwitch
        self.enabledByDefault = enabledByDefault
        self.batchSize = batchSize
    }

    func validated(file: String) throws(NudgeError) -> JobDefinition {
        func fail(_ why: String) -> NudgeError { NudgeError(.configuration, "jobs/\(file): \(why)") }
        guard file == name + ".json" else { throw fail("the file must be named after the job, \(name).json") }
        do throws(NudgeError) {
            let regular = try CronSchedule(schedule)
            if let sweepSchedule {
                // A sweep started in the same minute as a run of the job would find its lock
                // taken and exit 75: that week's proof would silently not happen.
                let sweep = try CronSchedule(sweepSchedule)
                if !Set(sweep.hours).isDisjoint(with: regular.hours) && !Set(sweep.minutes).isDisjoint(with: regular.minutes) {
                    throw NudgeError(.configuration, "sweepSchedule '\(sweepSchedule)' starts in a minute the job's schedule starts it too")
                }
            }
        } catch {
            throw fail(error.message)
        }
        if let shards, !(1...4_096).contains(shards) { throw fail("shards must be between 1 and 4096") }
        guard killSwitch == Environment.killSwitchName(forJob: name) else {
            throw fail("killSwitch must be \(Environment.killSwitchName(forJob: name))")
        }
        guard (1...10_000).contains(batchSize) else { throw fail("batchSize must be between 1 and 10000") }
        if let dueForMinutes {
            guard localTime != nil else { throw fail("dueForMinutes needs a localTime") }
            guard (1...1_440).contains(dueForMinutes) else { throw fail("dueForMinutes must be between 1 and 1440") }
        }
        if let pause = pauseBetweenBatchesMilliseconds, !(0...60_000).contains(pause) {
            throw fail("pauseBetweenBatchesMilliseconds must be between 0 and 60000")
        }
        if let days = catchUpDays, !(1...3_660).contains(days) {
            throw fail("catchUpDays must be between 1 and 3660")
        }
        if let seconds = drainSeconds, !(0...3_600).contains(seconds) {
            throw fail("drainSeconds must be between 0 and 3600")
        }
        if let concurrency, !(1...1_000).contains(concurrency) {
            throw fail("concurrency must be between 1 and 1000")
        }
        if let lanes, !(1...64).contains(lanes) {
            throw fail("lanes must be between 1 and 64")
        }
        if let retentionDays {
            do {
                _ = try RetentionRule.configured(retentionDays)
            } catch {
                throw fail(error.message)
            }
        }
        return self
    }
}

/// Every job definition, read from `jobs/`.
public struct JobCatalog: Sendable {
    public let definitions: [JobDefinition]

    public init(definitions: [JobDefinition]) {
        self.definitions = definitions.sorted { $0.name < $1.name }
    }

    public init(directory: URL) throws(NudgeError) {
        let files: [String]
        do {
            files = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasSuffix(".json") }
        } catch {
            throw NudgeError(.configuration, "cannot read the job definitions in \(directory.path)")
        }
        var definitions: [JobDefinition] = []
        for file in files {
            let definition: JobDefinition
            do {
                let data = try Data(contentsOf: directory.appendingPathComponent(file))
                definition = try JSONDecoder().decode(JobDefinition.self, from: data)
            } catch {
                throw NudgeError(.configuration, "jobs/\(file) is not a valid job definition: \(error)")
            }
            definitions.append(try definition.validated(file: file))
        }
        self.init(definitions: definitions)
    }

    public func definition(named name: String) -> JobDefinition? {
        definitions.first { $0.name == name }
    }
}
