import Foundation

/// Which LLM Nudge writes copy with, and how hard it may push the provider: read from the
/// environment, checked before the run touches the database.
public struct LLMConfiguration: Sendable, Equatable {
    public enum Provider: String, Sendable, Equatable {
        /// The Anthropic Messages API.
        case anthropic
        /// Any OpenAI-compatible chat-completions server (OpenAI, a self-hosted llama.cpp or vLLM).
        case openAI = "openai"
    }

    public static let defaultAnthropicModel = "claude-haiku-4-5-20251001"
    public static let anthropicVersion = "2023-06-01"

    public var provider: Provider
    /// The API's root: `https://api.anthropic.com`, or an OpenAI-compatible server's `…/v1`.
    public var baseURL: String
    /// Sent in a header, never logged, recorded or shown in an error.
    public var apiKey: String?
    public var model: String
    public var maxTokens: Int
    /// How long one request may take, response included.
    public var timeout: Duration
    /// Requests sent in any 60 seconds, across every concurrent user of a run.
    public var requestsPerMinute: Int
    /// Further attempts after a retryable failure (429, 500, 502, 503, 529, a lost connection).
    public var maxRetries: Int
    /// The first backoff; each retry doubles it, up to `maxBackoff`, with jitter.
    public var initialBackoff: Duration
    public var maxBackoff: Duration
    /// `NUDGE_CA_FILE`: roots trusted besides the system's.
    public var extraTrustedRoots: String?

    public init(
        provider: Provider, baseURL: String, apiKey: String?, model: String, maxTokens: Int = 150,
        timeout: Duration = .seconds(30), requestsPerMinute: Int = 50, maxRetries: Int = 4,
        initialBackoff: Duration = .milliseconds(500), maxBackoff: Duration = .seconds(20)
    ) {
        self.provider = provider
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.apiKey = apiKey
        self.model = model
        self.maxTokens = maxTokens
        self.timeout = timeout
        self.requestsPerMinute = requestsPerMinute
        self.maxRetries = maxRetries
        self.initialBackoff = initialBackoff
        self.maxBackoff = maxBackoff
    }

    /// `NUDGE_LLM_PROVIDER` (`anthropic`, the default, or `openai`); for Anthropic `ANTHROPIC_API_KEY`
    /// and `ANTHROPIC_BASE_URL`, for OpenAI-compatible servers `OPENAI_API_KEY` (optional: a local
    /// server may need none), `OPENAI_BASE_URL` and `NUDGE_LLM_MODEL`; `NUDGE_LLM_REQUESTS_PER_MINUTE`,
    /// `NUDGE_LLM_TIMEOUT_SECONDS`, `NUDGE_LLM_MAX_RETRIES`.
    public init(environment: Environment) throws(NudgeError) {
        let providerName = environment["NUDGE_LLM_PROVIDER"]?.lowercased() ?? Provider.anthropic.rawValue
        guard let provider = Provider(rawValue: providerName) else {
            throw NudgeError(.configuration, "NUDGE_LLM_PROVIDER must be anthropic or openai, not '\(providerName)'")
        }
        switch provider {
        case .anthropic:
            self.init(
                provider: .anthropic,
                baseURL: try Self.url(environment, "ANTHROPIC_BASE_URL", default: "https://api.anthropic.com"),
                apiKey: try environment.require(
                    "ANTHROPIC_API_KEY",
                    hint: "push-trigger writes its copy with the Anthropic Messages API; set the key, or NUDGE_LLM_PROVIDER=openai with OPENAI_BASE_URL"),
                model: environment["NUDGE_LLM_MODEL"] ?? Self.defaultAnthropicModel)
        case .openAI:
            self.init(
                provider: .openAI,
                baseURL: try Self.url(environment, "OPENAI_BASE_URL", default: "https://api.openai.com/v1"),
                apiKey: environment["OPENAI_API_KEY"],
                model: try environment.require(
                    "NUDGE_LLM_MODEL", hint: "name the model the OpenAI-compatible server should run"))
        }
        requestsPerMinute = try environment.integer("NUDGE_LLM_REQUESTS_PER_MINUTE", default: 50, in: 1...100_000)
        timeout = .seconds(try environment.integer("NUDGE_LLM_TIMEOUT_SECONDS", default: 30, in: 1...600))
        maxRetries = try environment.integer("NUDGE_LLM_MAX_RETRIES", default: 4, in: 0...10)
        extraTrustedRoots = environment["NUDGE_CA_FILE"]
    }

    private static func url(_ environment: Environment, _ name: String, default value: String) throws(NudgeError) -> String {
        try ProviderHTTP.baseURL(environment, name, default: value)
    }
}
