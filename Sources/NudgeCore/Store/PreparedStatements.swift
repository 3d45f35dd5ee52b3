import Logging
import PostgresNIO
import Synchronization

extension PostgresConnection {
    /// Runs `statement` as a named prepared statement of this connection: the first time a text
    /// (with its parameters' types) is sent, the server parses it once; from then on each run
    /// only binds and executes it, and after five runs PostgreSQL keeps one generic plan instead
    /// of planning again when it finds that plan as good as the ones it made for the values.
    /// For what a run sends once per batch with the same text: a page, a job's facts, a batch's
    /// writes (design.md). Over a run of 2,000 batches that is about a second of parsing and
    /// planning saved.
    ///
    /// A statement's name is a hash of its text and types, so a text is prepared once per
    /// connection whichever code sends it. The texts a run sends are bounded (a batch's writes
    /// vary only by which of their steps they have); each new one costs one more round trip, its
    /// first time on a connection. Behind PgBouncer (session pooling, as the run lock needs
    /// already) this works as on a direct connection.
    ///
    /// PostgresNIO remembers a statement that failed to prepare on a connection and fails every
    /// later use of its name at once, without asking the server; a failure whose cause passes (a
    /// deadlock, a lock wait that timed out) would then fail the rest of the run. So a text that
    /// failed once, preparing or running, is sent as an ad hoc statement from then on in this
    /// process.
    func prepared(
        _ statement: SQLFragment,
        logger: Logger
    ) async throws -> AsyncThrowingMapSequence<PostgresRowSequence, PostgresRow> {
        let query = try statement.query()
        let text = PreparedText(sql: query.sql, types: statement.parameterTypes)
        let name = text.name
        if PreparedText.failed.withLock({ $0.contains(name) }) {
            return try await self.query(query, logger: logger).map { $0 }
        }
        do {
            // PostgresNIO names a prepared statement by its type (`PostgresPreparedStatement`'s
            // static `name` and `sql`), read in the calling task before the statement is sent: a
            // task-local gives that type this statement's text for the call.
            return try await NamedStatement.$text.withValue(text) {
                try await execute(NamedStatement(bindings: query.binds), logger: logger)
            }
        } catch {
            PreparedText.failed.withLock { _ = $0.insert(name) }
            throw error
        }
    }
}

/// A statement's text and its parameters' types, named by a hash of both.
struct PreparedText: Sendable {
    let sql: String
    let types: [PostgresDataType]
    /// `nudge_` and the 64-bit FNV-1a hash of the text and the types' ids, in hex.
    let name: String

    /// The names of the texts that failed once in this process: sent ad hoc from then on.
    static let failed = Mutex<Set<String>>([])

    init(sql: String, types: [PostgresDataType]) {
        self.sql = sql
        self.types = types
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        func mix(_ byte: UInt8) {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        for byte in sql.utf8 { mix(byte) }
        for type in types {
            mix(0)
            withUnsafeBytes(of: type.rawValue.littleEndian) { $0.forEach(mix) }
        }
        name = "nudge_" + String(hash, radix: 16)
    }
}

/// The prepared statement `PostgresConnection.prepared` runs: its text is the task's
/// `PreparedText`, its rows are returned as they come.
private struct NamedStatement: PostgresPreparedStatement {
    typealias Row = PostgresRow

    @TaskLocal static var text = PreparedText(sql: "", types: [])

    static var name: String { text.name }
    static var sql: String { text.sql }
    static var bindingDataTypes: [PostgresDataType] { text.types }

    let bindings: PostgresBindings

    func makeBindings() throws -> PostgresBindings { bindings }
    func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
}
