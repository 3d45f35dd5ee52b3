import Crypto
import Foundation

/// Users and their tracking, inserted set-based. User n's id is `md5('user-n')`, so ids spread
/// over every shard; each user checks in on about 7 days in 10, by a hash of (user, day).
enum Fixture {
    static let zones: [String?] = [
        "America/New_York", "Europe/Paris", "Australia/Sydney", "Australia/Lord_Howe", "Asia/Kolkata",
        "Asia/Kathmandu", "Pacific/Chatham", "Pacific/Kiritimati", "Pacific/Pago_Pago", "America/St_Johns",
        "America/Sao_Paulo", nil,
    ]

    static func userID(_ n: Int) -> String {
        let hex = md5Hex("user-\(n)")
        return [
            hex.prefix(8), hex.dropFirst(8).prefix(4), hex.dropFirst(12).prefix(4), hex.dropFirst(16).prefix(4),
            hex.dropFirst(20),
        ].map(String.init).joined(separator: "-")
    }

    /// `count` users (numbered from `first`) signed up at `signup`, with tracking on the local days
    /// `from` through `to`.
    static func population(
        _ database: TestDatabase, count: Int, first: Int = 1, zones: [String?] = zones,
        signup: String, from: String, to: String
    ) async throws {
        let zoneArray = "array[" + zones.map { $0.map { "'\($0)'" } ?? "null" }.joined(separator: ",") + "]::text[]"
        try await database.psql(
            """
            begin;
            insert into users (id, timezone, locale, created_at)
            select md5('user-' || n)::uuid, (\(zoneArray))[1 + n % \(zones.count)],
                   case when n % 3 = 0 then 'fr' else 'en' end, '\(signup)'::timestamptz
              from generate_series(\(first), \(first + count - 1)) n;
            insert into daily_tracking (user_id, date, steps, mood, energy)
            select md5('user-' || n)::uuid, d::date, 2000 + (n * 37 + extract(doy from d)::int * 101) % 9000,
                   case when c.checked then 1 + n % 5 end, case when c.checked then 1 + (n + 2) % 5 end
              from generate_series(\(first), \(first + count - 1)) n,
                   generate_series('\(from)'::date, '\(to)'::date, '1 day') d,
                   lateral (select ('x' || substr(md5(n || ':' || d::date), 1, 4))::bit(16)::int % 10 < 7 as checked) c;
            commit;
            """)
    }

    /// PostgreSQL's `md5(text)`, computed here: no process per id.
    private static func md5Hex(_ text: String) -> String {
        Insecure.MD5.hash(data: Data(text.utf8)).map { String(format: "%02x", $0) }.joined()
    }
}
