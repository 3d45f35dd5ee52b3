import Foundation
import Testing

@testable import NudgeCore

@Suite struct ResendWebhookTests {
    /// Svix's own example (its documentation's secret, message id, timestamp and body): the
    /// signature its Python library (`svix` 1.84.1, `Webhook.sign`) computes for them.
    static let secret = try! ResendWebhookSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    static let body = Array(#"{"test": 2432232314}"#.utf8)
    static let id = "msg_p5jXN8AQM9LWM0D4loKWxJek"
    static let timestamp = "1614265330"
    static let svixSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

    private func verify(
        id: String? = id, timestamp: String? = timestamp, signatures: String? = svixSignature, body: [UInt8] = body,
        secret: ResendWebhookSecret = secret, at now: TimeInterval = 1_614_265_330
    ) throws(ResendWebhook.Refusal) {
        try ResendWebhook.verify(
            id: id, timestamp: timestamp, signatures: signatures, body: body, secret: secret,
            now: Date(timeIntervalSince1970: now))
    }

    @Test func signsAsSvixSigns() {
        #expect(ResendWebhook.signature(id: Self.id, timestamp: Self.timestamp, body: Self.body, secret: Self.secret) == Self.svixSignature)
    }

    @Test func acceptsItsSignatureWithinFiveMinutesAmongOthers() throws {
        try verify()
        try verify(at: 1_614_265_330 + 300)
        try verify(at: 1_614_265_330 - 300)
        // Several signatures while a secret rotates, and versions Nudge does not know, are fine.
        try verify(signatures: "v1,\(Data(repeating: 1, count: 32).base64EncodedString()) v2,abc \(Self.svixSignature)")
    }

    @Test func refusesWhatIsNotSigned() {
        #expect(throws: ResendWebhook.Refusal.tooOld) { try verify(at: 1_614_265_330 + 301) }
        #expect(throws: ResendWebhook.Refusal.tooNew) { try verify(at: 1_614_265_330 - 301) }
        #expect(throws: ResendWebhook.Refusal.missingHeaders) { try verify(id: nil) }
        #expect(throws: ResendWebhook.Refusal.missingHeaders) { try verify(signatures: nil) }
        #expect(throws: ResendWebhook.Refusal.badTimestamp) { try verify(timestamp: "soon") }
        #expect(throws: ResendWebhook.Refusal.noMatchingSignature) { try verify(body: Array(#"{"test": 2432232315}"#.utf8)) }
        #expect(throws: ResendWebhook.Refusal.noMatchingSignature) { try verify(id: "msg_other") }
        #expect(throws: ResendWebhook.Refusal.noMatchingSignature) { try verify(signatures: "v2," + Self.svixSignature.dropFirst(3)) }
        #expect(throws: ResendWebhook.Refusal.noMatchingSignature) { try verify(signatures: "v1,not-base64") }
        #expect(throws: ResendWebhook.Refusal.noMatchingSignature) {
            try verify(secret: try ResendWebhookSecret("whsec_" + Data(repeating: 9, count: 24).base64EncodedString()))
        }
    }

    @Test func aSecretThatIsNotOneIsAConfigurationError() {
        #expect(throws: NudgeError.self) { try ResendWebhookSecret("whsec_") }
        #expect(throws: NudgeError.self) { try ResendWebhookSecret("whsec_not base64!") }
        #expect(throws: NudgeError.self) { try ResendWebhookSecret("whsec_" + Data(repeating: 1, count: 8).base64EncodedString()) }
    }

    /// Resend's documented `email.bounced` example, and the forms of its fields Nudge reads.
    @Test func readsResendsEvents() throws {
        let bounced =
            #"{"type":"email.bounced","created_at":"2024-11-22T23:41:12.126Z","data":{"broadcast_id":"8b146471-e88e-4322-86af-016cd36fd216","created_at":"2024-11-22T23:41:11.894719+00:00","email_id":"56761188-7520-42d8-8898-ff6fc54ce618","from":"Acme <onboarding@resend.dev>","to":["Delivered@Resend.dev"],"subject":"Sending this example","template_id":"43f68331-0622-4e15-8202-246a0388854b","bounce":{"message":"The recipient's email address is on the suppression list because it has a recent history of producing hard bounces.","subType":"Suppressed","type":"Permanent"},"tags":{"category":"confirm_email"}}}"#
        let event = try #require(ResendWebhook.parse(Array(bounced.utf8)))
        #expect(event.type == "email.bounced" && event.emailID == "56761188-7520-42d8-8898-ff6fc54ce618")
        #expect(event.to == "delivered@resend.dev")
        #expect(event.bounceType == "Permanent" && event.bounceSubType == "Suppressed" && event.isHardBounce)
        #expect(abs(try #require(event.occurredAt).timeIntervalSince1970 - 1_732_318_872.126) < 0.000_001)
        #expect(abs(try #require(ResendWebhook.timestamp("2024-11-22T23:41:11.894719+00:00")).timeIntervalSince1970 - 1_732_318_871.894_719) < 0.000_001)
        #expect(ResendWebhook.timestamp("2024-11-22T23:41:11+02:00")!.timeIntervalSince1970 == 1_732_311_671)
        let soft = try #require(ResendWebhook.parse(Array(bounced.replacingOccurrences(of: "\"Permanent\"", with: "\"Transient\"").utf8)))
        #expect(!soft.isHardBounce)
        let contact = try #require(ResendWebhook.parse(Array(#"{"type":"contact.created","created_at":"x","data":{"id":"c"}}"#.utf8)))
        #expect(contact.emailID == nil && contact.occurredAt == nil)
        #expect(ResendWebhook.parse(Array("not json".utf8)) == nil)
        #expect(ResendWebhook.parse(Array(#"{"data":{}}"#.utf8)) == nil)
    }
}
