import Foundation
import Logging

@testable import NudgeCore

/// The checkout this test file lives in.
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

let repositoryCatalog: JobCatalog = try! JobCatalog(directory: packageRoot.appendingPathComponent("jobs"))

func definition(_ name: String) -> JobDefinition { repositoryCatalog.definition(named: name)! }

func runContext(_ name: String, now: String, window: DayWindow? = nil) -> RunContext {
    let instant = ISO8601DateFormatter().date(from: now)!
    return RunContext(
        definition: definition(name), runID: 1, now: instant, startedAt: instant, clock: FixedClock(instant),
        window: window, dryRun: false, logger: Logger(label: "test"), concurrency: 1)
}
