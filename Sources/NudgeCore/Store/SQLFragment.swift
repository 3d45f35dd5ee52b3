import PostgresNIO

/// SQL text with its bound values, that composes into a larger statement: the runner splices a
/// job's writes, the work marks, the outbox and the checkpoint into one statement per batch. An
/// interpolated value stays a bound parameter wherever the fragment ends up; a nested fragment
/// brings its own; only `unescaped:` text is spliced verbatim.
public struct SQLFragment: Sendable, ExpressibleByStringInterpolation {
    fileprivate enum Piece: Sendable {
        case text(String)
        /// A bound value: its type (`.null` for a nil, which the server infers) and how to bind it.
        case value(PostgresDataType, @Sendable (inout PostgresQuery.StringInterpolation) throws -> Void)
    }

    fileprivate var pieces: [Piece]

    public init(stringLiteral value: String) {
        pieces = [.text(value)]
    }

    public init(stringInterpolation: StringInterpolation) {
        pieces = stringInterpolation.pieces
    }

    public struct StringInterpolation: StringInterpolationProtocol, Sendable {
        fileprivate var pieces: [Piece] = []

        public init(literalCapacity: Int, interpolationCount: Int) {
            pieces.reserveCapacity(2 * interpolationCount + 1)
        }

        public mutating func appendLiteral(_ literal: String) {
            pieces.append(.text(literal))
        }

        public mutating func appendInterpolation<Value: PostgresDynamicTypeEncodable & Sendable>(_ value: Value) {
            pieces.append(.value(value.psqlType) { $0.appendInterpolation(value) })
        }

        public mutating func appendInterpolation<Value: PostgresDynamicTypeEncodable & Sendable>(_ value: Value?) {
            pieces.append(.value(value?.psqlType ?? .null) { $0.appendInterpolation(value) })
        }

        public mutating func appendInterpolation<Value: PostgresThrowingDynamicTypeEncodable & Sendable>(_ value: Value) {
            pieces.append(.value(value.psqlType) { try $0.appendInterpolation(value) })
        }

        public mutating func appendInterpolation(_ fragment: SQLFragment) {
            pieces += fragment.pieces
        }

        public mutating func appendInterpolation(unescaped text: String) {
            pieces.append(.text(text))
        }
    }

    /// The fragments one after the other, with `separator` between them.
    public static func joined(_ fragments: [SQLFragment], separator: String) -> SQLFragment {
        var result = SQLFragment(stringLiteral: "")
        for (index, fragment) in fragments.enumerated() {
            if index > 0 { result.pieces.append(.text(separator)) }
            result.pieces += fragment.pieces
        }
        return result
    }

    /// The statement to send, values numbered `$1`, `$2`… in order.
    public func query() throws -> PostgresQuery {
        var interpolation = PostgresQuery.StringInterpolation(literalCapacity: 0, interpolationCount: pieces.count)
        for piece in pieces {
            switch piece {
            case .text(let text): interpolation.appendLiteral(text)
            case .value(_, let append): try append(&interpolation)
            }
        }
        return PostgresQuery(stringInterpolation: interpolation)
    }

    /// The types of the bound values, in order: what a named prepared statement of this text is
    /// parsed with (`PostgresConnection.prepared`).
    var parameterTypes: [PostgresDataType] {
        pieces.compactMap { piece in
            guard case .value(let type, _) = piece else { return nil }
            return type
        }
    }
}

/// The writes of one batch, sent as a single statement (one round trip, one implicit
/// transaction): named steps in a WITH clause, each a data-modifying statement or a select that
/// later steps read, and the expectations the statement must meet, read from the steps'
/// RETURNING rows; an unmet one aborts the whole statement (the runner then retries the batch
/// user by user).
///
/// PostgreSQL runs every step on the same snapshot: a step does not see another's rows, and no
/// two steps may modify the same row.
public struct BatchWrites: Sendable {
    private var steps: [(name: String, sql: SQLFragment)] = []
    private var expectations: [(condition: SQLFragment, message: String)] = []

    public init() {}

    public var isEmpty: Bool { steps.isEmpty }

    public mutating func step(_ name: String, _ sql: SQLFragment) {
        precondition(!steps.contains { $0.name == name }, "two batch write steps named \(name)")
        steps.append((name, sql))
    }

    /// `condition` is a boolean expression over the steps (`(select count(*) from updated) = 3`).
    public mutating func expect(_ condition: SQLFragment, else message: String) {
        expectations.append((condition, message))
    }

    public mutating func append(_ other: BatchWrites) {
        for step in other.steps { self.step(step.name, step.sql) }
        expectations += other.expectations
    }

    public var statement: SQLFragment {
        let checks: SQLFragment =
            expectations.isEmpty
            ? "true"
            : SQLFragment.joined(expectations.map { "nudge_expect(\($0.condition), \($0.message))" }, separator: " and ")
        guard !steps.isEmpty else { return "select \(checks)" }
        let with = SQLFragment.joined(steps.map { "\(unescaped: $0.name) as (\($0.sql))" }, separator: ",\n")
        return "with \(with)\nselect \(checks)"
    }
}
