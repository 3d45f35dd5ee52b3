import Foundation
import NudgeStandIns

/// Loopback APNs (HTTP/2 over TLS, a private CA made for the test) and FCM (with its OAuth2
/// token endpoint), and the environment that points `nudge` at them.
struct PushStandIns: Sendable {
    let ca: StandInCA
    let apns: StandInAPNs
    let fcm: StandInFCM
    let folder: URL

    static func start(
        apnsClock: @escaping @Sendable () -> Date = { Date() }, recordRequests: Bool = true,
        apns apnsScript: @escaping StandInAPNs.Script = { _ in .accept },
        fcm fcmScript: @escaping StandInFCM.Script = { _ in .accept }
    ) async throws -> PushStandIns {
        let ca = try StandInCA()
        let apns = try await StandInAPNs.start(ca: ca, record: recordRequests, clock: apnsClock, script: apnsScript)
        let fcm = try await StandInFCM.start(record: recordRequests, script: fcmScript)
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nudge-push-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try ca.writeCertificate(to: folder.appendingPathComponent("ca.pem").path)
        try fcm.writeServiceAccount(to: folder.appendingPathComponent("service-account.json").path)
        try Data(apns.privateKeyPEM.utf8).write(to: folder.appendingPathComponent("apns-key.p8"))
        // Key files readable by their owner alone, as Nudge insists.
        for key in ["apns-key.p8", "service-account.json"] { chmod(folder.appendingPathComponent(key).path, 0o600) }
        return PushStandIns(ca: ca, apns: apns, fcm: fcm, folder: folder)
    }

    /// What `nudge run dispatch` needs to reach both stand-ins.
    var environment: [String: String] {
        [
            "NUDGE_CA_FILE": folder.appendingPathComponent("ca.pem").path,
            "APNS_KEY_ID": apns.keyID,
            "APNS_TEAM_ID": apns.teamID,
            "APNS_BUNDLE_ID": apns.bundleID,
            "APNS_PRIVATE_KEY": folder.appendingPathComponent("apns-key.p8").path,
            "APNS_ENVIRONMENT": "sandbox",
            "APNS_BASE_URL": apns.baseURL,
            "GOOGLE_APPLICATION_CREDENTIALS": folder.appendingPathComponent("service-account.json").path,
            "FCM_BASE_URL": fcm.baseURL,
            // Generous: a debug build under the test suite's load is slow, and a push that times
            // out is retried (its collapse id makes that harmless, but the tests count requests).
            "NUDGE_PUSH_TIMEOUT_SECONDS": "10",
        ]
    }

    func shutdown() async {
        await apns.shutdown()
        await fcm.shutdown()
        try? FileManager.default.removeItem(at: folder)
    }
}

/// Users with devices and queued notifications, inserted with SQL.
enum Outbox {
    /// An APNs device token (64 hex digits) for user n's device d.
    static func iosToken(_ n: Int, _ d: Int = 1) -> String {
        String(repeating: String(format: "%08x", n * 100 + d), count: 8)
    }

    static func androidToken(_ n: Int, _ d: Int = 1) -> String {
        "fcm-\(n)-\(d):APA91b" + String(repeating: "x", count: 40)
    }

    /// User n (id `Fixture.userID(n)`) in `zone`, with `ios` iPhones and `android` Android phones.
    static func user(
        _ database: TestDatabase, _ n: Int, zone: String? = "UTC", locale: String = "en", ios: Int = 1,
        android: Int = 0, signup: String = "2026-01-01T00:00:00Z"
    ) async throws {
        let id = Fixture.userID(n)
        var sql = "insert into users (id, timezone, locale, created_at) values ('\(id)', \(zone.map { "'\($0)'" } ?? "null"), '\(locale)', '\(signup)');"
        for d in 0..<ios where ios > 0 {
            sql += "insert into user_push_tokens (user_id, device_token, platform) values ('\(id)', '\(iosToken(n, d + 1))', 'ios');"
        }
        for d in 0..<android where android > 0 {
            sql += "insert into user_push_tokens (user_id, device_token, platform) values ('\(id)', '\(androidToken(n, d + 1))', 'android');"
        }
        try await database.psql(sql)
    }

    /// Queues one email of `type` for user n, due at `instant` (the user's address is set apart).
    @discardableResult
    static func email(_ database: TestDatabase, _ n: Int, type: String = "weekly_digest", at instant: String) async throws -> Int64 {
        let id = Fixture.userID(n)
        let text = try await database.value(
            """
            insert into notification_outbox (dedupe_key, job, user_id, local_day, notification_type, channel, deliver_after, title,
                                             body, payload)
            values ('test:\(id):\(type):email', 'test', '\(id)', '\(instant.prefix(10))', '\(type)', 'email', '\(instant)',
                    'For user \(n)', 'A note for user \(n).', '{"email_type":"\(type)","html":"<p>user \(n)</p>","tags":{}}')
            returning id
            """)
        guard let outboxID = Int64(text) else { throw TestFailure("no outbox id: \(text)") }
        return outboxID
    }

    /// Queues one notification for user n.
    @discardableResult
    static func queue(
        _ database: TestDatabase, _ n: Int, type: String, at deliverAfter: String, day: String? = nil,
        title: String = "Title", body: String = "Body", payload: String = "{}", key: String? = nil
    ) async throws -> Int64 {
        let id = Fixture.userID(n)
        let localDay = day ?? String(deliverAfter.prefix(10))
        let dedupe = key ?? "test:\(id):\(localDay):\(type):\(UUID().uuidString)"
        // Without a day, the one the instant falls on in the user's zone, as a job sets it.
        let dayValue =
            day.map { "'\($0)'" }
            ?? "(timestamptz '\(deliverAfter)' at time zone coalesce((select timezone from users where id = '\(id)'), 'UTC'))::date"
        let text = try await database.value(
            """
            insert into notification_outbox (dedupe_key, job, user_id, local_day, notification_type, deliver_after, title, body, payload)
            values ('\(dedupe)', 'test', '\(id)', \(dayValue), '\(type)', '\(deliverAfter)', $$\(title)$$, $$\(body)$$, '\(payload)'::jsonb)
            returning id
            """)
        guard let outboxID = Int64(text) else { throw TestFailure("no outbox id: \(text)") }
        return outboxID
    }
}
