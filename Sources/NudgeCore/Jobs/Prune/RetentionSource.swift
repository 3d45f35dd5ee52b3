import Foundation
import PostgresNIO

/// Where a chunk ends, in its table's order: the age of its last row (whole microseconds since
/// 1970 for an instant, days since 1970 for a day) and, for a table aged by the day, the row's
/// tiebreak (`RetentionRule.tiebreak`).
public struct RetentionPosition: Sendable, Equatable {
    public let age: Int64
    public let key: UUID?
}

/// A bounded slice of one table's rows past their age, oldest first: what `prune` deletes in one
/// batch's statement, so that no delete holds its locks for long. The rows are those after `after`
/// (the slice before's last; nil for the first) and at most `through`.
public struct RetentionChunk: Sendable, Equatable {
    public let rule: RetentionRule
    /// The rule's place in the source's list, which the chunk's id carries.
    public let ordinal: Int
    public let after: RetentionPosition?
    public let through: RetentionPosition
    /// How many rows the slice held when its page read it.
    public let rows: Int
    /// Rows older than this go (`days` before the run's instant).
    public let cutoff: Date

    /// The chunk's id: its rule's place, then its last position, so that ids follow the order the
    /// chunks are read in and a checkpoint says where to go on.
    public var id: UUID { RetentionSource.id(ordinal: ordinal, through: through) }
}

/// The rows past their age of each table of `rules`, in bounded chunks: a keyset source whose
/// items are chunks (at most the batch size of rows each, in the order of the table's age column
/// and, for a table aged by the day, a tiebreak column), so that the runner's lock, checkpoint,
/// kill switch, dry run and ledger serve `prune` as they serve every job. A page is the next
/// chunk: of the same table after the last row read, or of the next table. Rows of an instant
/// table that share the chunk's last age all go with it (a batch's few rows); a row whose delete
/// failed is left for the next day's run (the next chunk starts after it).
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

    /// The id of a chunk of rule `ordinal` ending at `through`: the ordinal, then the age (8 bytes;
    /// 4 for a day), then the tiebreak's first 11 bytes.
    static func id(ordinal: Int, through: RetentionPosition) -> UUID {
        var bytes = [UInt8](repeating: 0, count: 16)
        bytes[0] = UInt8(ordinal)
        if let key = through.key {
            let day = UInt32(bitPattern: Int32(clamping: through.age))
            for index in 0..<4 { bytes[1 + index] = UInt8(day >> (24 - 8 * index) & 0xFF) }
            let k = key.uuid
            let keyBytes = [k.0, k.1, k.2, k.3, k.4, k.5, k.6, k.7, k.8, k.9, k.10]
            for index in 0..<11 { bytes[5 + index] = keyBytes[index] }
        } else {
            let bits = UInt64(bitPattern: through.age)
            for index in 0..<8 { bytes[1 + index] = UInt8(bits >> (56 - 8 * index) & 0xFF) }
        }
        return UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            ))
    }

    /// The rule's place and the last position of the chunk whose id is `id`, `tiebreak` telling
    /// how it was written. A tiebreak comes back with its last 5 bytes all ones: every row whose
    /// key shares the 11 bytes kept counts as read.
    static func position(of id: UUID, tiebreak: Bool) -> (ordinal: Int, through: RetentionPosition) {
        let u = id.uuid
        let b = [u.0, u.1, u.2, u.3, u.4, u.5, u.6, u.7, u.8, u.9, u.10, u.11, u.12, u.13, u.14, u.15]
        guard tiebreak else {
            let bits = (1...8).reduce(UInt64(0)) { $0 << 8 | UInt64(b[$1]) }
            return (Int(b[0]), RetentionPosition(age: Int64(bitPattern: bits), key: nil))
        }
        let day = (1...4).reduce(UInt32(0)) { $0 << 8 | UInt32(b[$1]) }
        let k = Array(b[5...15]) + [UInt8](repeating: 0xFF, count: 5)
        let key = UUID(uuid: (k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8], k[9], k[10], k[11], k[12], k[13], k[14], k[15]))
        return (Int(b[0]), RetentionPosition(age: Int64(Int32(bitPattern: day)), key: key))
    }

    /// The position of the checkpoint `id`, by the rules it was written for.
    func position(of id: UUID) -> (ordinal: Int, through: RetentionPosition) {
        let ordinal = Int(id.uuid.0)
        return Self.position(of: id, tiebreak: ordinal < rules.count && rules[ordinal].tiebreak != nil)
    }

    /// The instant before which `rule`'s rows go, for a run at `now`.
    static func cutoff(_ rule: RetentionRule, now: Date) -> Date {
        now.addingTimeInterval(-Double(rule.days) * 86_400)
    }

    /// The SQL that selects a chunk's rows of `rule`: past the cutoff, after `after`, at most
    /// `through` (nil: no upper end).
    static func rows(of rule: RetentionRule, cutoff: Date, after: RetentionPosition?, through: RetentionPosition?) -> SQLFragment {
        let age: SQLFragment = "\(unescaped: rule.ageColumn)"
        let past: SQLFragment =
            rule.ageIsDay
            ? "\(age) < \(LocalDate(daysSinceEpoch: Int((cutoff.timeIntervalSince1970 / 86_400).rounded(.down))))"
            : "\(age) < \(cutoff)"
        func bound(_ position: RetentionPosition, _ comparison: String) -> SQLFragment {
            let value: SQLFragment =
                rule.ageIsDay
                ? "date '1970-01-01' + \(Int32(clamping: position.age))"
                : "'epoch'::timestamptz + \(position.age) * interval '1 microsecond'"
            if let tiebreak = rule.tiebreak, let key = position.key {
                return "(\(age), \(unescaped: tiebreak)) \(unescaped: comparison) (\(value), \(key))"
            }
            return "\(age) \(unescaped: comparison) \(value)"
        }
        let from: SQLFragment = after.map { bound($0, ">") } ?? "true"
        let to: SQLFragment = through.map { bound($0, "<=") } ?? "true"
        return "\(past) and \(from) and \(to) and (\(unescaped: rule.condition))"
    }

    public func page(
        _ request: PageRequest, calendars: CalendarCache,
        on connection: PostgresConnection
    ) async throws -> [Paged<RetentionChunk>] {
        var start = request.after.map(position(of:))
        for ordinal in (start?.ordinal ?? 0)..<rules.count {
            let rule = rules[ordinal]
            let after = start?.ordinal == ordinal ? start?.through : nil
            start = nil
            let cutoff = Self.cutoff(rule, now: request.now)
            let order: SQLFragment =
                rule.tiebreak.map { "\(unescaped: rule.ageColumn), \(unescaped: $0)" }
                ?? "\(unescaped: rule.ageColumn)"
            let key: SQLFragment = rule.tiebreak.map { "\(unescaped: $0)" } ?? "null::uuid"
            let last: SQLFragment =
                rule.ageIsDay
                ? "(age - date '1970-01-01')::int8"
                : "(extract(epoch from age) * 1000000)::int8"
            let query: SQLFragment = """
                select count(*) over ()::int8, \(last), key
                  from (select \(unescaped: rule.ageColumn) as age, \(key) as key from \(unescaped: rule.table)
                         where \(request.notPaused) and \(Self.rows(of: rule, cutoff: cutoff, after: after, through: nil))
                         order by \(order)
                         limit \(request.limit)) chunk
                 order by age desc, key desc nulls last
                 limit 1
                """
            for try await (rows, age, key) in try await connection.query(try query.query(), logger: request.logger)
                .decode((Int, Int64, UUID?).self)
            {
                let chunk = RetentionChunk(
                    rule: rule, ordinal: ordinal, after: after,
                    through: RetentionPosition(age: age, key: key), rows: rows, cutoff: cutoff)
                return [.item(chunk.id, chunk)]
            }
        }
        return []
    }

    /// No count: how many chunks there are is known only once they are read.
    public func count(_ request: PageRequest, on connection: PostgresConnection) async throws -> Int? { nil }
}
