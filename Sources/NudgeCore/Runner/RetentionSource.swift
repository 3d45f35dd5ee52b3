import Foundation
import PostgresNIO

/// A bounded slice of one table's rows past their age, oldest first: what `prune` deletes in one
/// batch's statement, so that no delete holds its locks for long. The rows are those whose age is
/// after `after` (the slice before's last age; nil for the first) and at most `through`.
public struct RetentionChunk: Sendable, Equatable {
    public let rule: RetentionRule
    /// The rule's place in the source's list, which the chunk's id carries.
    public let ordinal: Int
    /// Ages as whole microseconds since 1970 (an instant) or days since 1970 (a day).
    public let after: Int64?
    public let through: Int64
    /// How many rows the slice held when its page read it.
    public let rows: Int
    /// Rows older than this go (`days` before the run's instant).
    public let cutoff: Date

    /// The chunk's id: its rule's place, then its last age, so that ids follow the order the
    /// chunks are read in and a checkpoint says where to go on.
    public var id: UUID { RetentionSource.id(ordinal: ordinal, through: through) }
}

/// The rows past their age of each table of `rules`, in bounded chunks: a keyset source whose
/// items are chunks (at most the batch size of rows each, by the table's age column), so that
/// the runner's lock, checkpoint, kill switch, dry run and ledger serve `prune` as they serve
/// every job. A page is the next chunk: of the same table after the last age read, or of the
/// next table. Rows that share the chunk's last age all go with it; a row whose delete failed
/// is left for the next day's run (the next chunk starts after it).
public struct RetentionSource: WorkSource {
    public typealias Item = RetentionChunk

    public let rules: [RetentionRule]

    public init(rules: [RetentionRule]) {
        self.rules = rules
    }

    public var noun: String { "chunk" }

    public func scopeProblem(_ options: RunOptions) -> String? {
        guard options.users.isEmpty, options.window == nil, options.shard.count == 1, !options.sweep else {
            return "prune runs over whole tables: it takes no --user, --date, --from/--to, --shard or --sweep"
        }
        return nil
    }

    static func id(ordinal: Int, through: Int64) -> UUID {
        let bits = UInt64(bitPattern: through)
        return UUID(uuid: (UInt8(ordinal), UInt8(bits >> 56), UInt8(bits >> 48 & 0xFF), UInt8(bits >> 40 & 0xFF),
                           UInt8(bits >> 32 & 0xFF), UInt8(bits >> 24 & 0xFF), UInt8(bits >> 16 & 0xFF), UInt8(bits >> 8 & 0xFF),
                           UInt8(bits & 0xFF), 0, 0, 0, 0, 0, 0, 0))
    }

    /// The rule's place and the last age of the chunk whose id is `id`.
    static func position(of id: UUID) -> (ordinal: Int, through: Int64) {
        let b = id.uuid
        let high = UInt64(b.1) << 56 | UInt64(b.2) << 48 | UInt64(b.3) << 40 | UInt64(b.4) << 32
        let low = UInt64(b.5) << 24 | UInt64(b.6) << 16 | UInt64(b.7) << 8 | UInt64(b.8)
        return (Int(b.0), Int64(bitPattern: high | low))
    }

    /// The instant before which `rule`'s rows go, for a run at `now`.
    static func cutoff(_ rule: RetentionRule, now: Date) -> Date {
        now.addingTimeInterval(-Double(rule.days) * 86_400)
    }

    /// The SQL that selects a chunk's rows of `rule`: past the cutoff, after `after`, at most
    /// `through` (nil: no upper end).
    static func rows(of rule: RetentionRule, cutoff: Date, after: Int64?, through: Int64?) -> SQLFragment {
        let age: SQLFragment = "\(unescaped: rule.ageColumn)"
        let past: SQLFragment = rule.ageIsDay
            ? "\(age) < \(LocalDate(daysSinceEpoch: Int((cutoff.timeIntervalSince1970 / 86_400).rounded(.down))))"
            : "\(age) < \(cutoff)"
        func bound(_ value: Int64) -> SQLFragment {
            rule.ageIsDay ? "date '1970-01-01' + \(Int32(clamping: value))" : "'epoch'::timestamptz + \(value) * interval '1 microsecond'"
        }
        let from: SQLFragment = after.map { "\(age) > \(bound($0))" } ?? "true"
        let to: SQLFragment = through.map { "\(age) <= \(bound($0))" } ?? "true"
        return "\(past) and \(from) and \(to) and (\(unescaped: rule.condition))"
    }

    public func page(_ request: PageRequest, calendars: CalendarCache,
                     on connection: PostgresConnection) async throws -> [Paged<RetentionChunk>] {
        var start = request.after.map(Self.position(of:))
        for ordinal in (start?.ordinal ?? 0)..<rules.count {
            let rule = rules[ordinal]
            let after = start?.ordinal == ordinal ? start?.through : nil
            start = nil
            let cutoff = Self.cutoff(rule, now: request.now)
            let last: SQLFragment = rule.ageIsDay
                ? "max(age) - date '1970-01-01'"
                : "(extract(epoch from max(age)) * 1000000)::int8"
            let query: SQLFragment = """
                select count(*)::int8, (\(last))::int8
                  from (select \(unescaped: rule.ageColumn) as age from \(unescaped: rule.table)
                         where \(request.notPaused) and \(Self.rows(of: rule, cutoff: cutoff, after: after, through: nil))
                         order by \(unescaped: rule.ageColumn)
                         limit \(request.limit)) chunk
                """
            for try await (rows, through) in try await connection.query(try query.query(), logger: request.logger)
                .decode((Int, Int64?).self) {
                guard rows > 0, let through else { continue }
                let chunk = RetentionChunk(rule: rule, ordinal: ordinal, after: after, through: through, rows: rows, cutoff: cutoff)
                return [.item(chunk.id, chunk)]
            }
        }
        return []
    }

    /// No count: how many chunks there are is known only once they are read.
    public func count(_ request: PageRequest, on connection: PostgresConnection) async throws -> Int? { nil }
}
