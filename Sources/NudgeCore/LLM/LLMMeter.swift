import Foundation

/// What a run may spend on the LLM: `--max-llm-calls` and `--max-llm-tokens`; nil is no limit.
public struct LLMBudget: Sendable, Equatable {
    public var maxCalls: Int?
    public var maxTokens: Int?

    public init(maxCalls: Int? = nil, maxTokens: Int? = nil) {
        self.maxCalls = maxCalls
        self.maxTokens = maxTokens
    }
}

/// Counts a run's LLM calls and tokens against its budget, and keeps each response's usage until
/// the batch's bookkeeping records it.
public actor LLMMeter {
    public struct Call: Sendable, Equatable {
        public let userID: UUID
        public let model: String
        public let usage: TokenUsage
        /// "used", or why the reply was rejected.
        public let outcome: String
    }

    public let budget: LLMBudget
    public private(set) var calls = 0
    public private(set) var inputTokens = 0
    public private(set) var outputTokens = 0
    private var unrecorded: [Call] = []

    public init(budget: LLMBudget) {
        self.budget = budget
    }

    /// Counts one more call, or stops the run when the budget is spent. Tokens are known only
    /// once replies arrive, so the calls in flight may take the run past its token budget by
    /// at most their own cost.
    public func admit() throws(RunStop) {
        if let maxCalls = budget.maxCalls, calls >= maxCalls {
            throw RunStop("the run's LLM budget of \(maxCalls) call\(maxCalls == 1 ? "" : "s") (--max-llm-calls) is spent")
        }
        if let maxTokens = budget.maxTokens, inputTokens + outputTokens >= maxTokens {
            throw RunStop("the run's LLM budget of \(maxTokens) tokens (--max-llm-tokens) is spent")
        }
        calls += 1
    }

    public func record(_ call: Call) {
        inputTokens += call.usage.inputTokens
        outputTokens += call.usage.outputTokens
        unrecorded.append(call)
    }

    /// The responses not yet written to `llm_calls`, handed over once.
    public func drain() -> [Call] {
        defer { unrecorded = [] }
        return unrecorded
    }
}
