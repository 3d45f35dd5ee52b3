import Foundation
import Logging
import PostgresNIO

/// A user as the runner pages them: what every job needs to place the user in time.
public struct UserRow: Sendable, Equatable {
    public let id: UUID
    public let timezone: String?
    public let locale: String
    public let createdAt: Date
}

/// A named batch job. The runner owns paging, isolation, locks, the ledger and kill switches; a
/// job owns only its rules: what kind of work it pages (its `source`), what to read for a batch,
/// what to decide for one item (a pure function), and the set-based writes that carry out a
/// batch's decisions. A job that needs more opts in to it by conforming to a capability
/// (JobCapabilities.swift): outside calls, bookkeeping kept between batches and runs, reports of
/// its own.
public protocol Job: Sendable {
    /// What the job pages: the users due for it (`DueSource`), a user's due notifications,
    /// circles… Every job names its own: there is no default that would walk every user.
    associatedtype Source: WorkSource
    /// Everything the job reads about one item, loaded for the whole batch at once.
    associatedtype Facts: Sendable
    /// What the job decided to change for one item.
    associatedtype Change: Sendable

    var definition: JobDefinition { get }

    var source: Source { get }

    /// Reads what the batch's items need in a constant number of set-based queries
    /// (`= any($ids)`), never one per item.
    func loadFacts(for items: [Source.Item], run: RunContext, on connection: PostgresConnection) async throws -> [UUID: Facts]

    /// Decides for one item from its facts and the run's clock, touching nothing else. A thrown
    /// error fails this item alone, with the error's description as the recorded reason.
    func decide(for item: Source.Item, facts: Facts?, run: RunContext) throws -> Decision<Change>

    /// The set-based writes that carry out the batch's changes (`unnest` of the batch's arrays, never
    /// a statement per user). The runner sends them with the work marks, the outbox and the
    /// checkpoint as one statement; when it fails, it retries user by user, so that only the guilty
    /// user fails.
    func writes(for changes: [PlannedChange<Change>], run: RunContext) -> BatchWrites

    /// How many statements `loadFacts` sends one after the other at most: the runner waits for
    /// their answers that many statement time-outs.
    var readStatements: Int { get }
}

extension Job {
    public var readStatements: Int { 1 }
}

/// Thrown by a job's outside step to skip one user with a reason the ledger records (push-trigger:
/// the LLM's copy was rejected). The user counts as skipped, not failed, and is not marked done.
public struct UserSkip: Error, Sendable, CustomStringConvertible {
    public let reason: String

    public init(_ reason: String) {
        self.reason = reason
    }

    public var description: String { reason }
}

/// Thrown by a job to end the run cleanly after the batch in flight (a run-level budget is spent).
/// The users it stopped stay undone for a later run.
public struct RunStop: Error, Sendable, CustomStringConvertible {
    public let reason: String

    public init(_ reason: String) {
        self.reason = reason
    }

    public var description: String { reason }
}

/// A user with the calendar of their time zone.
public struct UserInTime: Sendable {
    public let user: UserRow
    public let calendar: LocalCalendar
}

public enum Decision<Change: Sendable>: Sendable {
    /// Nothing is due for this user now; the words say why (for `--user` runs and dry-run reports).
    case nothingDue(String)
    /// Nothing is due now, and the change only records when it will be (the item's next instant
    /// in the due index): written with the batch like any change, counted and reported as
    /// nothing due, with the words. It calls no outside service.
    case later(PlannedChange<Change>, String)
    case act(PlannedChange<Change>)
}

/// One item's decided change, with the work marks and notifications it implies.
public struct PlannedChange<Change: Sendable>: Sendable {
    /// The item's id: the user's, for the jobs that page users.
    public let itemID: UUID
    public let change: Change
    /// The logical local days this change completes, each with its outcome ("kept", "reset").
    public let work: [WorkMark]
    public let notifications: [OutboxMessage]
    /// What to count in the run's report: outcome names and how often they occur.
    public let tally: [String: Int]

    public init(itemID: UUID, change: Change, work: [WorkMark], notifications: [OutboxMessage], tally: [String: Int]) {
        self.itemID = itemID
        self.change = change
        self.work = work
        self.notifications = notifications
        self.tally = tally
    }
}

public struct WorkMark: Sendable, Equatable {
    public let localDay: LocalDate
    public let outcome: String
    /// Why the outcome is what it is, when the outcome alone does not say (`job_work.detail`).
    public let detail: String?
    /// For a job that decides several things per user and day (reminders: each notification
    /// type), which one: marked under `job:part` in `job_work.job`, one mark per part and day.
    public let part: String?

    public init(localDay: LocalDate, outcome: String, detail: String? = nil, part: String? = nil) {
        self.localDay = localDay
        self.outcome = outcome
        self.detail = detail
        self.part = part
    }

    /// The `job_work.job` this mark is recorded under, for job `job`.
    public func job(_ job: String) -> String {
        part.map { "\(job):\($0)" } ?? job
    }
}

/// A notification a job decided on, for `dispatch` to deliver. Its deduplication key (job,
/// recipient, logical day, type) makes replaying a decision insert nothing new.
public struct OutboxMessage: Sendable, Equatable {
    public let type: String
    public let localDay: LocalDate
    public let deliverAfter: Date
    public let title: String
    public let body: String
    /// A JSON object, as text.
    public let payload: String
    /// Whom it is for: nil for the user the change is about (the item of a job that pages
    /// users); a member, for a job that pages circles.
    public let recipient: UUID?
    public let channel: DeliveryChannel
    /// What tells this one apart from the user's others of its type in the deduplication key.
    public let occasion: Occasion?

    /// A message's occasion: within its local day (leaderboard-refresh: the hour it was decided
    /// in), or one that names it whatever the day (a call's preview: the call and its time, which a
    /// change of the user's time zone must not make into a second preview).
    public enum Occasion: Sendable, Equatable {
        case withinDay(String)
        case alone(String)
    }

    public init(
        type: String, localDay: LocalDate, deliverAfter: Date, title: String, body: String, payload: String,
        recipient: UUID? = nil, channel: DeliveryChannel = .push, occasion: Occasion? = nil
    ) {
        self.type = type
        self.localDay = localDay
        self.deliverAfter = deliverAfter
        self.title = title
        self.body = body
        self.payload = payload
        self.recipient = recipient
        self.channel = channel
        self.occasion = occasion
    }

    public func dedupeKey(job: String, userID: UUID) -> String {
        let kind = type + channel.suffix
        switch occasion {
        case nil: return "\(job):\(userID.uuidString.lowercased()):\(localDay):\(kind)"
        case .withinDay(let occasion): return "\(job):\(userID.uuidString.lowercased()):\(localDay):\(kind):\(occasion)"
        case .alone(let occasion): return "\(job):\(userID.uuidString.lowercased()):\(kind):\(occasion)"
        }
    }
}

/// What a job knows about the run it is part of.
public struct RunContext: Sendable {
    public let definition: JobDefinition
    public let runID: Int64
    /// The instant the batch is decided at: `--now` for a run at an explicit instant; otherwise the
    /// real time when the batch began, so that a user reached late in a long run is decided at the
    /// hour it really is.
    public internal(set) var now: Date
    /// The instant the run started at (`--now`, or the real time then).
    public let startedAt: Date
    /// The run's clock, for a job's outside step to ask the time again when it reaches a user.
    public let clock: any RunClock
    /// What the run's waits are measured on (`RunOptions.waitClock`), for a job's outside step
    /// that bounds a wait of its own.
    public internal(set) var waitClock: any WaitClock = SystemWaitClock()
    /// The local days a backfill is limited to (`--date`, `--from/--to`); nil for a normal run.
    public let window: DayWindow?
    public let dryRun: Bool
    public internal(set) var logger: Logger
    /// How many items of a batch `complete` may work on at once (`--concurrency`).
    public let concurrency: Int
    /// The run's database, for a job's outside step that keeps state of its own there (dispatch's
    /// provider tokens, the providers' shared pace); the batch's reads and writes go through the
    /// runner. Nil for decisions made outside a run (tests of the rules).
    public internal(set) var database: Database? = nil
    /// The batch's page number in the run, across lanes.
    public internal(set) var pageID: Int64 = 0
    /// `--user`: the only users the run may act for (empty: everyone). A job whose items are
    /// not users (circles) keeps its notifications to them.
    public internal(set) var users: [UUID] = []

    /// What names the batch's claims, for a queue (`PageRequest.claim`).
    public var claim: Int64 { PageRequest.claim(runID: runID, pageID: pageID) }
}
