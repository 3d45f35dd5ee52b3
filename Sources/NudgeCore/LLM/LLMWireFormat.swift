import Foundation

/// The tokens one response cost, as the provider counted them.
public struct TokenUsage: Sendable, Equatable {
    public var inputTokens: Int
    public var outputTokens: Int

    public init(inputTokens: Int, outputTokens: Int) {
        self.inputTokens = inputTokens
        self.outputTokens = outputTokens
    }

    public var total: Int { inputTokens + outputTokens }
}

/// What the model answered.
public struct LLMReply: Sendable, Equatable {
    public let text: String
    public let model: String
    public let usage: TokenUsage
}

/// The two wire formats Nudge speaks: request bodies out, replies and error bodies in.
enum LLMWireFormat {
    struct Request: Sendable {
        let path: String
        let headers: [(String, String)]
        let body: Data
    }

    static func request(prompt: String, configuration: LLMConfiguration) -> Request {
        let message: [String: Any] = ["role": "user", "content": prompt]
        let body: [String: Any] = ["model": configuration.model, "max_tokens": configuration.maxTokens, "messages": [message]]
        let data = try! JSONSerialization.data(withJSONObject: body, options: [.sortedKeys])
        var headers = [("content-type", "application/json"), ("accept", "application/json")]
        switch configuration.provider {
        case .anthropic:
            headers.append(("anthropic-version", LLMConfiguration.anthropicVersion))
            if let key = configuration.apiKey { headers.append(("x-api-key", key)) }
            return Request(path: "/v1/messages", headers: headers, body: data)
        case .openAI:
            if let key = configuration.apiKey { headers.append(("authorization", "Bearer \(key)")) }
            return Request(path: "/chat/completions", headers: headers, body: data)
        }
    }

    /// Parses a 200 response's body.
    static func reply(from body: Data, provider: LLMConfiguration.Provider) throws(LLMError) -> LLMReply {
        switch provider {
        case .anthropic:
            guard let message = try? JSONDecoder().decode(AnthropicMessage.self, from: body) else {
                throw .malformedResponse("the response is not a Messages API message")
            }
            let text = message.content.filter { $0.type == "text" }.compactMap(\.text).joined()
            return LLMReply(
                text: text, model: message.model ?? "",
                usage: TokenUsage(
                    inputTokens: message.usage?.inputTokens ?? 0,
                    outputTokens: message.usage?.outputTokens ?? 0))
        case .openAI:
            guard let completion = try? JSONDecoder().decode(ChatCompletion.self, from: body),
                let choice = completion.choices.first
            else {
                throw .malformedResponse("the response is not a chat completion with a choice")
            }
            return LLMReply(
                text: choice.message.content ?? "", model: completion.model ?? "",
                usage: TokenUsage(
                    inputTokens: completion.usage?.promptTokens ?? 0,
                    outputTokens: completion.usage?.completionTokens ?? 0))
        }
    }

    /// The provider's own words for an error response, shortened: both APIs put them in `error`.
    /// An authentication error's message may quote part of the key, so only its type is kept;
    /// anything key-like in another is blanked.
    static func errorDescription(from body: Data, status: Int) -> String? {
        guard let envelope = try? JSONDecoder().decode(ErrorEnvelope.self, from: body) else { return nil }
        let message = [401, 403].contains(status) ? nil : envelope.error.message.map(redactingKeys)
        let words = [envelope.error.type, message].compactMap { $0 }.joined(separator: ": ")
        return words.isEmpty ? nil : String(words.prefix(200))
    }

    private static func redactingKeys(_ text: String) -> String {
        text.split(separator: " ", omittingEmptySubsequences: false)
            .map { $0.hasPrefix("sk-") || $0.contains("sk-") ? "[redacted]" : String($0) }
            .joined(separator: " ")
    }

    private struct AnthropicMessage: Decodable {
        struct Block: Decodable {
            let type: String
            let text: String?
        }
        struct Usage: Decodable {
            let inputTokens: Int?
            let outputTokens: Int?
            enum CodingKeys: String, CodingKey {
                case inputTokens = "input_tokens"
                case outputTokens = "output_tokens"
            }
        }
        let type: String?
        let model: String?
        let content: [Block]
        let usage: Usage?
    }

    private struct ChatCompletion: Decodable {
        struct Choice: Decodable {
            struct Message: Decodable { let content: String? }
            let message: Message
        }
        struct Usage: Decodable {
            let promptTokens: Int?
            let completionTokens: Int?
            enum CodingKeys: String, CodingKey {
                case promptTokens = "prompt_tokens"
                case completionTokens = "completion_tokens"
            }
        }
        let model: String?
        let choices: [Choice]
        let usage: Usage?
    }

    private struct ErrorEnvelope: Decodable {
        struct Detail: Decodable {
            let type: String?
            let message: String?
        }
        let error: Detail
    }
}
