import Foundation
import NIOHTTP1
import Testing

@testable import NudgeCore

@Suite struct UnsubscribeLinkTests {
    let links = try! UnsubscribeLinks(secret: "7c1e0b5a9d2f48e3a6b4c8d0e2f1a3b5c7d9e0f1a2b3c4d5e6f708192a3b4c5d", publicURL: "https://nudge.example.com/")
    let user = UUID(uuidString: "6f1c2a9e-0b7d-4c1e-9a51-3f0c5e8d2b74")!

    @Test func aTokenNamesItsUserAndTypeAndNothingElsePasses() throws {
        let token = links.token(user: user, type: .weeklyDigest)
        #expect(links.verify(token)?.user == user)
        #expect(links.verify(token)?.type == .weeklyDigest)
        #expect(links.url(user: user, type: .weeklyDigest) == "https://nudge.example.com/unsubscribe?token=\(token)")
        // Another type or user with the same signature, a changed signature, another secret: refused.
        let parts = token.split(separator: ".").map(String.init)
        #expect(parts.count == 4)
        #expect(links.verify("\(parts[0]).monthly_report.\(parts[2]).\(parts[3])") == nil)
        #expect(links.verify("\(UUID().uuidString.lowercased()).\(parts[1]).\(parts[2]).\(parts[3])") == nil)
        #expect(links.verify("\(parts[0]).\(parts[1]).\(parts[2]).\(parts[3].dropLast())A") == nil)
        #expect(links.verify("\(parts[0]).\(parts[1]).00000000.\(parts[3])") == nil)
        let other = try UnsubscribeLinks(secret: "5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c", publicURL: "https://nudge.example.com")
        #expect(other.verify(token) == nil)
        for junk in ["", "..", "abc", "\(parts[0]).\(parts[1])", token + ".x", "\(parts[0]).welcome.\(parts[2]).\(parts[3])"] {
            #expect(links.verify(junk) == nil, "\(junk)")
        }
        // Only URL-safe characters.
        #expect(token.allSatisfy { $0.isLetter || $0.isNumber || "-_.".contains($0) })
    }

    /// A rotation: links signed by the old secret keep working while it is the previous one, new
    /// links are signed by the new one, and once the old secret is dropped its links stop.
    @Test func aRotationKeepsOldLinksWorkingThroughThePreviousSecret() throws {
        let old = links.token(user: user, type: .weeklyDigest)
        let rotated = try UnsubscribeLinks(
            secret: "e4d3c2b1a0f9e8d7c6b5a49382716051f4e3d2c1b0a998877665544332211ff0",
            previous: "7c1e0b5a9d2f48e3a6b4c8d0e2f1a3b5c7d9e0f1a2b3c4d5e6f708192a3b4c5d",
            publicURL: "https://nudge.example.com")
        #expect(rotated.verify(old)?.user == user)
        let new = rotated.token(user: user, type: .weeklyDigest)
        #expect(new != old)
        #expect(links.verify(new) == nil)
        // The key id names the signer: an old token relabelled with the new id is refused.
        let oldParts = old.split(separator: ".").map(String.init)
        let newParts = new.split(separator: ".").map(String.init)
        #expect(rotated.verify("\(oldParts[0]).\(oldParts[1]).\(newParts[2]).\(oldParts[3])") == nil)
        // A token from before key ids (user.type.signature) is checked against both secrets.
        #expect(rotated.verify("\(oldParts[0]).\(oldParts[1]).\(oldParts[3])")?.type == .weeklyDigest)
        let after = try UnsubscribeLinks(secret: "e4d3c2b1a0f9e8d7c6b5a49382716051f4e3d2c1b0a998877665544332211ff0", publicURL: "https://nudge.example.com")
        #expect(after.verify(old) == nil)
        #expect(after.verify(new)?.user == user)
        #expect(throws: NudgeError.self) {
            try UnsubscribeLinks(
                secret: "e4d3c2b1a0f9e8d7c6b5a49382716051f4e3d2c1b0a998877665544332211ff0", previous: "short", publicURL: "https://nudge.example.com")
        }
        #expect(throws: NudgeError.self) {
            try UnsubscribeLinks(
                secret: "e4d3c2b1a0f9e8d7c6b5a49382716051f4e3d2c1b0a998877665544332211ff0",
                previous: "e4d3c2b1a0f9e8d7c6b5a49382716051f4e3d2c1b0a998877665544332211ff0",
                publicURL: "https://nudge.example.com")
        }
    }

    /// The secret that signs every link must be worth 32 random bytes: a hex string of 64
    /// characters or base64 of 44 pass; a short one, a 32-character hex one (16 bytes), a phrase,
    /// and a long string of few characters are refused, the previous secret of a rotation too.
    @Test func aWeakSecretIsRefusedWithWhy() {
        #expect(UnsubscribeLinks.weakness(of: "7c1e0b5a9d2f48e3a6b4c8d0e2f1a3b5c7d9e0f1a2b3c4d5e6f708192a3b4c5d") == nil)
        #expect(UnsubscribeLinks.weakness(of: "q3Zk8vR1mT0xW7yB2nH5cJ9fL4sD6gP8aE1uI3oK7rM=") == nil)
        #expect(UnsubscribeLinks.weakness(of: "0123456789abcdef0123456789abcdef")?.contains("fewer than 256 bits") == true)
        #expect(UnsubscribeLinks.weakness(of: "correct horse battery staple and some more words to be long")?.contains("phrase") == true)
        #expect(UnsubscribeLinks.weakness(of: "a-secret-of-at-least-thirty-two-characters-and-then-some-more")?.contains("phrase") == true)
        #expect(UnsubscribeLinks.weakness(of: String(repeating: "ab1", count: 30))?.contains("distinct characters") == true)
        #expect(UnsubscribeLinks.weakness(of: "short")?.contains("shorter than 32") == true)
        #expect(throws: NudgeError.self) {
            try UnsubscribeLinks(
                secret: "7c1e0b5a9d2f48e3a6b4c8d0e2f1a3b5c7d9e0f1a2b3c4d5e6f708192a3b4c5d",
                previous: "the-old-secret-was-a-phrase-of-words", publicURL: "https://nudge.example.com")
        }
    }

    @Test func aShortSecretOrAnAddressThatIsNotAURLIsRefused() {
        #expect(throws: NudgeError.self) { try UnsubscribeLinks(secret: "short", publicURL: "https://nudge.example.com") }
        for bad in ["nudge.example.com", "ftp://nudge.example.com", "https://nudge.example.com/?a=b", "", "http://nudge.example.com"] {
            #expect(throws: NudgeError.self, "\(bad)") {
                try UnsubscribeLinks(secret: "7c1e0b5a9d2f48e3a6b4c8d0e2f1a3b5c7d9e0f1a2b3c4d5e6f708192a3b4c5d", publicURL: bad)
            }
        }
    }
}

@Suite struct DigestEmailTests {
    let templates = try! EmailTemplates(directory: packageRoot.appendingPathComponent("templates/email"), emails: [DigestEmail.template])

    let postal = "FitCircle Inc., 548 Market St, San Francisco, CA 94104"

    func week(
        steps: Int? = 52_341, activity: Bool = true, streak: Int = 7, met: Int = 6, of days: Int = 7,
        next: Int = 55_000, source: WeekInReview.NextGoalSource = .progress
    ) -> WeekInReview {
        WeekInReview(
            monday: LocalDate(year: 2026, month: 11, day: 16)!, steps: steps, stepsGoal: 50_000, daysGoalMet: met,
            daysWithGoal: days, streak: streak, streakHeldAllWeek: true, weightChange: -1.2,
            ranks: [.init(circle: "Work Warriors", rank: 2)], topAchievement: .bestWeek(daysMet: 6, of: 7),
            nextWeekStepsGoal: next, nextGoalSource: source, nextGoalCircleID: source == .circle ? UUID() : nil,
            hadActivity: activity)
    }

    /// The example of docs/jobs/weekly-digest.md, in both parts and both languages, numbers as each
    /// locale writes them.
    @Test func theSeedsExampleInBothPartsAndBothLanguages() {
        let english = DigestEmail.render(
            week(), copy: DigestCopy(locale: "en"), name: "Sam", email: "sam@example.com",
            unsubscribeURL: "https://n.example/unsubscribe?token=t&x", dashboardURL: nil,
            postalAddress: postal, templates: templates)
        #expect(english.subject == "Your Week in Review: 52,341 steps, 7-day streak 🔥")
        for part in [english.html, english.text] {
            for fact in [
                "52,341", "104%", "7", "-1.2 lbs", "Work Warriors", "55,000",
                "You hit your daily goal 6 out of 7 days — your best week yet!", "Hi Sam,",
            ] {
                #expect(part.contains(fact), "\(fact)")
            }
        }
        #expect(english.text.contains("- Steps: 52,341 (104% of goal)"))
        #expect(english.text.contains("- Streak: 7 days maintained"))
        #expect(english.text.contains("Your weekly step goal is increasing to 55,000 based on your progress."))
        #expect(english.text.contains("https://n.example/unsubscribe?token=t&x"))
        // CAN-SPAM: the sender's postal address in both parts' footer.
        #expect(english.text.contains(postal) && english.html.contains(postal))
        #expect(english.html.contains("https://n.example/unsubscribe?token=t&amp;x"))
        #expect(!english.text.contains("\n\n\n"))
        #expect(!english.html.contains("View Full Dashboard"))

        let french = DigestEmail.render(
            week(), copy: DigestCopy(locale: "fr"), name: "Léa", email: "lea@example.com",
            unsubscribeURL: "https://n.example/u", dashboardURL: "https://app.example/d",
            postalAddress: postal, templates: templates)
        #expect(french.subject == "Ta semaine en bref : 52\u{202F}341 pas, série de 7 jours 🔥")
        for part in [french.html, french.text] {
            // Kilograms for French readers: 1.2 lb is 0.5 kg.
            for fact in ["52\u{202F}341", "104\u{00A0}%", "-0,5\u{00A0}kg", "55\u{202F}000", "Bonjour Léa,", "ta meilleure semaine"] {
                #expect(part.contains(fact), "\(fact)")
            }
        }
        #expect(french.html.contains("Voir mon tableau de bord") && french.text.contains("https://app.example/d"))
    }

    /// A quiet week gets a short, kind email with no number but next week's goal.
    @Test func aQuietWeekHasNoMadeUpNumbers() {
        let quiet = WeekInReview(
            monday: LocalDate(year: 2026, month: 11, day: 16)!, steps: nil, stepsGoal: 50_000, daysGoalMet: 0,
            daysWithGoal: 0, streak: 0, streakHeldAllWeek: false, weightChange: nil, ranks: [],
            topAchievement: nil, nextWeekStepsGoal: 50_000, nextGoalSource: .standard, nextGoalCircleID: nil,
            hadActivity: false)
        let email = DigestEmail.render(
            quiet, copy: DigestCopy(locale: "en"), name: nil, email: "a@example.com",
            unsubscribeURL: "https://n.example/u", dashboardURL: nil, postalAddress: postal,
            templates: templates)
        // Read on Sunday evening or on Monday morning, it is true: no "tomorrow".
        #expect(!email.text.contains("tomorrow") && email.text.contains("A fresh week starts on Monday."))
        #expect(!DigestCopy(locale: "en").pushBody(quiet).contains("tomorrow"))
        #expect(!DigestCopy(locale: "fr").pushBody(quiet).contains("demain"))
        #expect(email.subject == "Your Week in Review: a fresh week awaits")
        #expect(email.text.contains("Hi there,"))
        #expect(email.text.contains("quiet one"))
        #expect(!email.text.contains("Steps:") && !email.html.contains("Leaderboard"))
    }

    /// Plurals by each language's rules (French's "one" is 0 and 1), in the push, the subject and both parts.
    @Test func pluralsInBothLanguagesAtOneAndTwo() {
        let french = DigestCopy(locale: "fr")
        let english = DigestCopy(locale: "en")
        #expect([0, 1, 2].map(french.days) == ["jour", "jour", "jours"])
        #expect([0, 1, 2].map(english.days) == ["days", "day", "days"])
        #expect(french.pushBody(week(streak: 1)).contains("série de 1 jour maintenue"))
        #expect(french.pushBody(week(streak: 2)).contains("série de 2 jours maintenue"))
        #expect(french.subject(week(streak: 1)).hasSuffix("série de 1 jour 🔥"))
        #expect(french.achievement(.goalDays(daysMet: 1, of: 7)) == "Tu as atteint ton objectif du jour 1 jour sur 7.")
        #expect(english.achievement(.goalDays(daysMet: 1, of: 1)) == "You hit your daily goal 1 out of 1 day.")
        let one = DigestEmail.render(
            week(streak: 1, met: 1, of: 1), copy: french, name: nil, email: "a@example.com",
            unsubscribeURL: "https://n.example/u", dashboardURL: nil, postalAddress: postal, templates: templates)
        #expect(one.text.contains("- Série : 1 jour maintenue") && one.text.contains("atteint 1 jour sur 1"))
        #expect(!one.text.contains("1 jours") && !one.html.contains("1 jours"))
        let two = DigestEmail.render(
            week(streak: 2, met: 2, of: 7), copy: english, name: nil, email: "a@example.com",
            unsubscribeURL: "https://n.example/u", dashboardURL: nil, postalAddress: postal, templates: templates)
        #expect(two.text.contains("- Streak: 2 days maintained") && two.text.contains("met 2 of 7 days"))
        let single = DigestEmail.render(
            week(streak: 1, met: 1, of: 1), copy: english, name: nil, email: "a@example.com",
            unsubscribeURL: "https://n.example/u", dashboardURL: nil, postalAddress: postal, templates: templates)
        #expect(single.text.contains("- Streak: 1 day maintained") && single.text.contains("met 1 of 1 day\n"))
    }

    /// "Based on your progress" only when the goal is the user's own baseline.
    @Test func theNextGoalSaysWhereItComesFrom() {
        func text(_ week: WeekInReview) -> String {
            DigestEmail.render(
                week, copy: DigestCopy(locale: "en"), name: nil, email: "a@example.com", unsubscribeURL: "https://n.example/u",
                dashboardURL: nil, postalAddress: postal, templates: templates
            ).text
        }
        #expect(text(week(source: .progress)).contains("increasing to 55,000 based on your progress"))
        let circle = text(week(next: 70_000, source: .circle))
        #expect(circle.contains("Your FitCircle challenge sets your weekly step goal at 70,000.") && !circle.contains("progress"))
        #expect(text(week(next: 50_000, source: .standard)).contains("Your weekly step goal stays at 50,000."))
        #expect(!text(week(next: 60_000, source: .standard)).contains("progress"))
    }

    @Test func aMissingTemplateIsAConfigurationErrorThatNamesIt() {
        #expect(throws: NudgeError.self) {
            try EmailTemplates(directory: packageRoot.appendingPathComponent("templates/email"), emails: ["no_such_email"])
        }
    }
}

@Suite struct ResendTests {
    func headers(_ pairs: [(String, String)]) -> HTTPHeaders { HTTPHeaders(pairs) }

    @Test func eachAnswerMeansWhatResendSays() {
        let body = { (name: String) in Data(#"{"statusCode":0,"name":"\#(name)","message":"words"}"#.utf8) }
        #expect(ResendClient.classify(status: 200, headers: [:], body: Data(#"{"id":"e-1"}"#.utf8)) == .delivered(providerID: "e-1"))
        #expect(
            ResendClient.classify(status: 429, headers: headers([("retry-after", "7")]), body: body("rate_limit_exceeded"))
                == .throttled("Resend 429 rate_limit_exceeded: words", after: 7))
        #expect(
            ResendClient.classify(status: 429, headers: headers([("ratelimit-reset", "3")]), body: body("rate_limit_exceeded"))
                == .throttled("Resend 429 rate_limit_exceeded: words", after: 3))
        #expect(
            ResendClient.classify(status: 429, headers: [:], body: body("daily_quota_exceeded"))
                == .throttled("Resend 429 daily_quota_exceeded: words", after: 3600))
        #expect(
            ResendClient.classify(status: 500, headers: [:], body: body("internal_server_error"))
                == .unavailable("Resend 500 internal_server_error: words", after: nil))
        #expect(ResendClient.classify(status: 422, headers: [:], body: body("validation_error")) == .rejected("Resend 422 validation_error: words"))
        #expect(
            ResendClient.classify(status: 409, headers: [:], body: body("invalid_idempotent_request"))
                == .rejected("outcome unknown: Resend 409 invalid_idempotent_request: words"))
        #expect(
            ResendClient.classify(status: 409, headers: [:], body: body("concurrent_idempotent_requests"))
                == .notSent("Resend 409 concurrent_idempotent_requests: words", after: 5))
        // Nudge's sender or key, not the email: Resend is paused and the emails wait.
        #expect(
            ResendClient.classify(status: 422, headers: [:], body: body("invalid_from_address"))
                == .configuration("Resend 422 invalid_from_address: words"))
        // A wait that is not a finite number of seconds is ignored; none is longer than a day.
        #expect(
            ResendClient.classify(status: 429, headers: headers([("ratelimit-reset", "inf")]), body: body("rate_limit_exceeded"))
                == .throttled("Resend 429 rate_limit_exceeded: words", after: 1))
        #expect(
            ResendClient.classify(status: 503, headers: headers([("ratelimit-reset", "1e30")]), body: body("x"))
                == .unavailable("Resend 503 x: words", after: 86_400))
        #expect(ResendClient.classify(status: 403, headers: [:], body: body("invalid_api_key")) == .configuration("Resend 403 invalid_api_key: words"))
    }

    /// A batch's answer, email by email: the ids in order to the emails Resend took, its words to
    /// those it refused; an answer that does not account for every email sends none again.
    @Test func aBatchAnswerSettlesEachEmail() {
        let body = Data(#"{"data":[{"id":"a"},{"id":"c"}],"errors":[{"index":1,"message":"Invalid `to` field."}]}"#.utf8)
        #expect(
            ResendClient.classifyBatch(status: 200, headers: [:], body: body, count: 3)
                == [.delivered(providerID: "a"), .rejected("Resend refused it in its batch: Invalid `to` field."), .delivered(providerID: "c")])
        let short = Data(#"{"data":[{"id":"a"}]}"#.utf8)
        #expect(ResendClient.classifyBatch(status: 200, headers: [:], body: short, count: 2).allSatisfy { $0.isOutage })
        let limited = ResendClient.classifyBatch(
            status: 429, headers: ["retry-after": "3"],
            body: Data(#"{"name":"rate_limit_exceeded","message":"Too many."}"#.utf8), count: 2)
        #expect(limited == Array(repeating: .throttled("Resend 429 rate_limit_exceeded: Too many.", after: 3), count: 2))
        let mismatch = ResendClient.classifyBatch(
            status: 409, headers: [:],
            body: Data(#"{"name":"invalid_idempotent_request","message":"m"}"#.utf8), count: 1)
        #expect(mismatch[0].isOutage && mismatch[0].reason?.hasPrefix("outcome unknown: ") == true)
        // The key: a batch's own (its rows, in any order, and its nonce); the same rows in a new
        // batch get another.
        let nonce = UUID()
        #expect(ResendClient.batchKey(rows: [3, 1, 2], nonce: nonce) == ResendClient.batchKey(rows: [1, 2, 3], nonce: nonce))
        #expect(ResendClient.batchKey(rows: [1, 2], nonce: nonce) != ResendClient.batchKey(rows: [1, 2, 3], nonce: nonce))
        #expect(ResendClient.batchKey(rows: [1, 2, 3]) != ResendClient.batchKey(rows: [1, 2, 3]))
        #expect(ResendClient.batchKey(rows: [1, 2, 3]).count <= 256)
    }

    @Test func anEmailSettlesByItsAnswer() {
        let row = QueuedNotification(
            id: 9, type: "weekly_digest", channel: .email, localDay: LocalDate(year: 2026, month: 3, day: 22)!,
            deliverAfter: Date(timeIntervalSince1970: 0), title: "s", body: "t")
        let now = Date(timeIntervalSince1970: 1_000)
        let expiry = now.addingTimeInterval(48 * 3600)
        #expect(DispatchRules.settleEmail(row, result: .delivered(providerID: "x"), now: now, expiresAt: expiry, jitter: 0).status == .sent)
        let retry = DispatchRules.settleEmail(
            row, result: .retry("500, while Resend answered others", after: nil), now: now,
            expiresAt: expiry, jitter: 0)
        #expect(retry.status == .pending && retry.countsAsAttempt && retry.nextAttemptAt == now.addingTimeInterval(15))
        // No answer while Resend is not known to answer others: a wait (a quarter of the 1,000 s it
        // has waited, halved by the jitter), no attempt.
        let outage = DispatchRules.settleEmail(row, result: .unavailable("500", after: nil), now: now, expiresAt: expiry, jitter: 0)
        #expect(outage.status == .pending && !outage.countsAsAttempt && outage.nextAttemptAt == now.addingTimeInterval(125))
        let throttled = DispatchRules.settleEmail(row, result: .throttled("429", after: 7), now: now, expiresAt: expiry, jitter: 0)
        #expect(throttled.status == .pending && !throttled.countsAsAttempt && throttled.nextAttemptAt == now.addingTimeInterval(7))
        #expect(DispatchRules.settleEmail(row, result: .rejected("422"), now: now, expiresAt: expiry, jitter: 0).status == .failed)
        let last = QueuedNotification(
            id: 9, type: "weekly_digest", channel: .email, localDay: row.localDay, deliverAfter: row.deliverAfter,
            title: "s", body: "t", attempts: 4)
        #expect(DispatchRules.settleEmail(last, result: .retry("500", after: nil), now: now, expiresAt: expiry, jitter: 0).status == .failed)
        #expect(DispatchRules.settleEmail(last, result: .unavailable("500", after: nil), now: now, expiresAt: expiry, jitter: 0).status == .pending)
        // Resend down, paused or not configured: parked for it, until its shelf life ends, with no attempt spent.
        let parked = DispatchRules.settleEmail(row, result: .notSent("Resend is down", after: nil), now: now, expiresAt: expiry, jitter: 0)
        #expect(parked.status == .pending && !parked.countsAsAttempt && parked.parkedFor == .resend && parked.nextAttemptAt == expiry)
    }

    /// The rows of one batch request, whatever attempts each had before it joined the batch, come
    /// due again at the same instant, after a lost answer or a retry: the batch is claimed and
    /// sent again whole, once, not once per row.
    @Test func theRowsOfOneRequestComeDueTogether() {
        let now = Date(timeIntervalSince1970: 10_000)
        let expiry = now.addingTimeInterval(48 * 3600)
        let key = "nudge-batch-test"
        let rows = (0..<3).map { attempts in
            QueuedNotification(
                id: Int64(20 + attempts), type: "weekly_digest", channel: .email, localDay: LocalDate(year: 2026, month: 3, day: 22)!,
                deliverAfter: Date(timeIntervalSince1970: Double(attempts) * 100), title: "s", body: "t", attempts: attempts)
        }
        let highest = rows.map(\.attempts).max()
        for result: SendResult in [.unavailable("no answer", after: nil), .retry("500, while Resend answered others", after: nil)] {
            let next = Set(
                rows.map {
                    DispatchRules.settleEmail(
                        $0, result: result, now: now, expiresAt: expiry, jitter: DispatchJob.jitter(request: key),
                        waitingSince: now.addingTimeInterval(-600), attemptsOfRequest: highest
                    ).nextAttemptAt
                })
            #expect(next.count == 1, "\(result): \(next)")
        }
    }

    /// An email row goes to the user's address unless a switch (either table's), a missing or
    /// suppressed address or Resend's state holds it; quiet hours do not.
    @Test func anEmailRowIsPlannedByTheUsersEmailSwitchesAndAddress() throws {
        let payload = EmailPayload(emailType: "weekly_digest", html: "<p>hi</p>", unsubscribeURL: "https://n.example/u").json
        let now = ISO8601DateFormatter().date(from: "2026-03-22T23:00:00Z")!   // inside quiet hours
        let row = QueuedNotification(
            id: 5, type: "weekly_digest", channel: .email, localDay: LocalDate(year: 2026, month: 3, day: 22)!,
            deliverAfter: now.addingTimeInterval(-60), title: "Subject", body: "Text", payload: payload)
        let calendar = try CalendarCache().calendar(for: "Europe/London")
        func plan(
            _ preferences: DeliveryPreferences = .standard, address: String? = "a@example.com",
            resend: ProviderState = .ready
        ) -> DispatchRules.RowOutcome? {
            DispatchRules.plan(
                rows: [row], facts: .init(preferences: preferences, devices: [], address: address),
                providers: [.resend: resend], locale: "en", calendar: calendar, now: now
            ).outcomes[5]
        }
        #expect(plan() == .email(0))
        // An address that bounced hard, or whose owner complained, gets nothing, with the reason.
        let bounced = DispatchRules.plan(
            rows: [row],
            facts: .init(
                devices: [], address: "a@example.com",
                emailSuppression: "the address bounced hard on 2026-03-15"),
            providers: [.resend: .ready], locale: "en", calendar: calendar, now: now
        ).outcomes[5]
        #expect(bounced == .suppressed(step: "suppression", reason: "the address bounced hard on 2026-03-15"))
        let planned = DispatchRules.plan(
            rows: [row], facts: .init(devices: [], address: "a@example.com"), providers: [.resend: .ready],
            locale: "en", calendar: calendar, now: now
        ).emails[0]
        #expect(planned.batchKey == nil)
        // Re-claimed after its batch left without a recorded outcome: it goes again in that batch, as
        // it was (to the address it left for, the user's switches since notwithstanding), under its key,
        // until Resend no longer holds the key or the batch's shelf life ends; then it is not sent again.
        let key = ResendClient.batchKey(rows: [7, 5])
        func left(_ ago: TimeInterval, to address: String? = "old@example.com", batchExpires: Date? = nil) -> QueuedNotification {
            QueuedNotification(
                id: 5, type: "weekly_digest", channel: .email, localDay: row.localDay, deliverAfter: row.deliverAfter,
                title: "Subject", body: "Text", payload: payload, requestLeftAt: now.addingTimeInterval(-ago),
                requestKey: key, requestTo: address, requestExpiresAt: batchExpires)
        }
        func planLeft(_ row: QueuedNotification) -> DispatchRules.Plan {
            DispatchRules.plan(
                rows: [row], facts: .init(preferences: off, devices: [], address: "new@example.com"),
                providers: [.resend: .ready], locale: "en", calendar: calendar, now: now)
        }
        var off = DeliveryPreferences()
        off.emailSwitchedOff = ["email_preferences.weekly_digest"]
        let again = try #require(planLeft(left(30)).emails.first)
        #expect(again.batchKey == key && again.request.to == "old@example.com")
        #expect(
            again.request
                == DispatchRules.emailRequest(
                    subject: "Subject", text: "Text", payload: try #require(EmailPayload.decode(payload)),
                    to: "old@example.com"))
        #expect(again.expiresAt == now.addingTimeInterval(ResendClient.keyLifetime - 30))
        // A batch whose shelf life (its emails' earliest) ends first waits no longer than that.
        #expect(planLeft(left(30, batchExpires: now.addingTimeInterval(600))).emails.first?.expiresAt == now.addingTimeInterval(600))
        for lapsed in [left(ResendClient.keyLifetime), left(30, to: nil), left(30, batchExpires: now)] {
            guard case .failed(let why)? = planLeft(lapsed).outcomes[5] else {
                Issue.record("\(lapsed) was not failed")
                continue
            }
            #expect(why.hasPrefix("outcome unknown: "))
        }
        #expect(planned.request.unsubscribeURL == "https://n.example/u" && planned.request.html == "<p>hi</p>")
        #expect(plan(off) == .suppressed(step: "preferences", reason: "weekly_digest emails are off (email_preferences.weekly_digest: unsubscribed)"))
        off.emailSwitchedOff = ["email_weekly_digest"]
        if case .suppressed? = plan(off) {} else { Issue.record("notification_preferences.email_weekly_digest did not hold it") }
        var master = DeliveryPreferences()
        master.emailEnabled = false
        if case .suppressed? = plan(master) {} else { Issue.record("email_enabled did not hold it") }
        // The push switches do not hold an email.
        var pushOff = DeliveryPreferences()
        pushOff.pushEnabled = false
        #expect(plan(pushOff) == .email(0))
        if case .suppressed(let step, _)? = plan(address: nil) { #expect(step == "address") } else { Issue.record("no address") }
        if case .suppressed(let step, _)? = plan(address: "not an address") { #expect(step == "address") } else { Issue.record("bad address") }
        if case .waiting? = plan(resend: .unavailable("Resend is not configured")) {} else { Issue.record("not waiting") }
    }
}
