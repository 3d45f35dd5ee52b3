import Foundation
import NudgeStandIns
import Synchronization

/// `nudge-llm-stand-in [--port N] [--latency-ms N] [--arrivals FILE]`: a local server that speaks
/// the Anthropic Messages API and OpenAI chat completions and answers every prompt with canned
/// copy after `--latency-ms`, for the demo, the push-trigger benchmark and trying push-trigger
/// without an LLM. It prints its URL, then serves until stopped. `--arrivals` appends each
/// request's arrival (seconds since the stand-in started) to FILE, for the benchmark's
/// requests-per-minute.
@main
struct StandInCommand {
    static func main() async throws {
        var port = 0
        var latency = Duration.zero
        var arrivalsPath: String?
        var arguments = CommandLine.arguments.dropFirst().makeIterator()
        while let argument = arguments.next() {
            switch argument {
            case "--port": port = Int(arguments.next() ?? "") ?? -1
            case "--latency-ms": latency = .milliseconds(Int(arguments.next() ?? "") ?? 0)
            case "--arrivals": arrivalsPath = arguments.next()
            default: fail("usage: nudge-llm-stand-in [--port N] [--latency-ms N] [--arrivals FILE]")
            }
        }
        guard (0...65_535).contains(port) else { fail("--port must be between 0 and 65535") }
        var arrivals: ArrivalLog?
        if let arrivalsPath {
            guard FileManager.default.createFile(atPath: arrivalsPath, contents: nil),
                let handle = FileHandle(forWritingAtPath: arrivalsPath)
            else { fail("cannot write \(arrivalsPath)") }
            arrivals = ArrivalLog(handle)
        }
        let answerAfter = latency
        let log = arrivals
        StandInLoops.scriptsOnTheLoops()   // its script answers at once
        let server = try await StandInLLM.start(port: port, record: false) { request in
            log?.append(request.receivedAt)
            return (.reply(CannedCopy.reply(to: request.prompt)), answerAfter)
        }
        // Written straight to the file descriptor: whoever started the stand-in waits for this line.
        FileHandle.standardOutput.write(Data("LLM stand-in (canned copy, no model) listening on \(server.baseURL)\n".utf8))
        while true { try await Task.sleep(for: .seconds(3600)) }
    }

    static func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data((message + "\n").utf8))
        exit(64)
    }
}

private final class ArrivalLog: Sendable {
    private let handle: Mutex<FileHandle>
    private let started = ContinuousClock.now

    init(_ handle: FileHandle) {
        self.handle = Mutex(handle)
    }

    func append(_ instant: ContinuousClock.Instant) {
        let seconds = (instant - started).components
        let line = String(format: "%.4f\n", Double(seconds.seconds) + Double(seconds.attoseconds) / 1e18)
        handle.withLock { $0.write(Data(line.utf8)) }
    }
}
