import Foundation
import NudgeStandIns
import Testing
@testable import NudgeCore

@Suite(.serialized) struct DispatchDeliveryTests {
    /// One user with an iPhone and an Android phone, one with users.fcm_token only: each device
    /// gets the notification once, in its platform's shape, and every attempt is logged.
    @Test func everyDeviceGetsItOnceInItsPlatformsShape() async throws {
        let database = try await TestDatabase.fresh()
        let push = try await PushStandIns.start()
        defer { Task { await push.shutdown() } }
        try Outbox.user(database, 1, ios: 1, android: 1)
        try Outbox.user(database, 2, ios: 0)
        try database.psql("update users set fcm_token = 'legacy-token-2:APA91b' where id = '\(Fixture.userID(2))'")
        let first = try Outbox.queue(database, 1, type: "streak_at_risk", at: "2026-03-10T09:00:00Z", title: "🔥 Your 12-day streak is at risk",
                                     body: "Check in today", payload: #"{"type":"streak_at_risk","deep_link":"fitcircle://checkin","streak":12}"#)
        let second = try Outbox.queue(database, 2, type: "proactive_push", at: "2026-03-10T09:00:00Z", title: "Hi", body: "How did it go?")

        let result = try await database.nudge(["run", "dispatch", "--now", "2026-03-10T09:00:30Z"], environment: push.environment)
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")

        let apns = push.apns.requests
        #expect(apns.count == 1)
        let request = try #require(apns.first)
        #expect(request.deviceToken == Outbox.iosToken(1))
        #expect(request.headers["apns-topic"] == push.apns.bundleID)
        #expect(request.headers["apns-push-type"] == "alert")
        #expect(request.headers["apns-priority"] == "10")
        #expect(request.headers["apns-collapse-id"] == "nudge-\(first)")
        #expect(request.headers["apns-id"].flatMap(UUID.init(uuidString:)) != nil)
        #expect(Int(request.headers["apns-expiration"] ?? "") != nil)
        #expect(request.alert?.title == "🔥 Your 12-day streak is at risk")
        #expect(request.data["deep_link"] == "fitcircle://checkin")
        #expect(request.data["streak"] == "12")

        let fcm = push.fcm.requests
        #expect(Set(fcm.map(\.deviceToken)) == [Outbox.androidToken(1), "legacy-token-2:APA91b"])
        #expect(fcm.allSatisfy { $0.accessToken == push.fcm.issuedTokens.first })
        #expect(fcm.first { $0.deviceToken == "legacy-token-2:APA91b" }?.collapseKey == "nudge-\(second)")

        #expect(try database.psql("select status || ' ' || array_length(delivered_to, 1) from notification_outbox order by id")
                == "sent 2\nsent 1")
        #expect(try database.count("select count(*) from notification_logs where status = 'sent' and provider_id is not null") == 3)
        #expect(try database.value("select provider_id from notification_logs where provider = 'apns'")
                == request.headers["apns-id"])
    }
}
