import Foundation
import NudgeStandIns

/// `nudge-llm-stand-in [--port N] [--latency-ms N]`: a local server that speaks the Anthropic
/// Messages API and OpenAI chat completions and answers every prompt with canned copy, for the
/// demo and for trying push-trigger without an LLM. It prints its URL, then serves until stopped.
@main
struct StandInCommand {
    static func main() async throws {
        var port = 0
        var latency = Duration.zero
        var arguments = CommandLine.arguments.dropFirst().makeIterator()
        while let argument = arguments.next() {
            switch argument {
            case "--port": port = Int(arguments.next() ?? "") ?? -1
            case "--latency-ms": latency = .milliseconds(Int(arguments.next() ?? "") ?? 0)
            default:
                FileHandle.standardError.write(Data("usage: nudge-llm-stand-in [--port N] [--latency-ms N]\n".utf8))
                exit(64)
            }
        }
        guard (0...65_535).contains(port) else {
            FileHandle.standardError.write(Data("--port must be between 0 and 65535\n".utf8))
            exit(64)
        }
        let answerAfter = latency
        let server = try await StandInLLM.start(port: port) { request in
            (.reply(CannedCopy.reply(to: request.prompt)), answerAfter)
        }
        // Written straight to the file descriptor: whoever started the stand-in waits for this line.
        FileHandle.standardOutput.write(Data("LLM stand-in (canned copy, no model) listening on \(server.baseURL)\n".utf8))
        while true { try await Task.sleep(for: .seconds(3600)) }
    }
}
