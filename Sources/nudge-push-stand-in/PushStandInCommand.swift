import Foundation
import NudgeStandIns
import Synchronization

/// `nudge-push-stand-in --dir DIR [--unregistered FILE] [--log FILE] [--apns-port N] [--fcm-port N] [--resend-port N]
/// [--twilio-port N] [--resend-webhook URL]`: a local APNs (HTTP/2 over TLS, with a private CA it makes), a local FCM with its OAuth2
/// token endpoint, a local Resend and a local Twilio, for the demo and the benchmarks. Each email Resend's
/// stand-in takes is written to DIR/mail/ (`<n>.html`, `<n>.txt`); each SMS Twilio's takes is reported
/// `delivered` to its status callback two seconds later, signed, as Twilio would. With `--resend-webhook`, each
/// email is reported to that URL as Resend's webhooks report it (signed under the `RESEND_WEBHOOK_SECRET` it
/// writes to `env`): delivered, or 1 in 50 addresses bounced hard, and about 2 in 5 opened. It writes into DIR the CA's certificate
/// (`ca.pem`), the APNs provider key (`apns-key.p8`), the FCM service account
/// (`service-account.json`) and `env`, the variables that point nudge at them (to `source`);
/// then it serves until stopped, keeping in DIR/resend-requests how many requests Resend's has
/// had (a batch request is one). Device tokens listed in `--unregistered` (one per line) are
/// answered as uninstalled apps are (APNs 410 Unregistered, FCM 404 UNREGISTERED); every other
/// one is accepted. `--log` appends one line per push received (provider, the status answered,
/// token's start, collapse id, title).
@main
struct PushStandInCommand {
    static func main() async throws {
        var folder: String?
        var unregisteredPath: String?
        var logPath: String?
        var apnsPort = 0
        var fcmPort = 0
        var resendPort = 0
        var twilioPort = 0
        var resendWebhook: URL?
        var arguments = CommandLine.arguments.dropFirst().makeIterator()
        while let argument = arguments.next() {
            switch argument {
            case "--dir": folder = arguments.next()
            case "--unregistered": unregisteredPath = arguments.next()
            case "--log": logPath = arguments.next()
            case "--apns-port": apnsPort = Int(arguments.next() ?? "") ?? -1
            case "--fcm-port": fcmPort = Int(arguments.next() ?? "") ?? -1
            case "--resend-port": resendPort = Int(arguments.next() ?? "") ?? -1
            case "--twilio-port": twilioPort = Int(arguments.next() ?? "") ?? -1
            case "--resend-webhook": resendWebhook = URL(string: arguments.next() ?? "")
            default: fail(usage)
            }
        }
        guard let folder else { fail(usage) }
        guard (0...65_535).contains(apnsPort), (0...65_535).contains(fcmPort), (0...65_535).contains(resendPort),
            (0...65_535).contains(twilioPort)
        else { fail("ports must be between 0 and 65535") }
        var unregistered: Set<String> = []
        if let unregisteredPath {
            guard let text = try? String(contentsOfFile: unregisteredPath, encoding: .utf8) else { fail("cannot read \(unregisteredPath)") }
            unregistered = Set(text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty })
        }
        var log: DeliveryLog?
        if let logPath {
            guard FileManager.default.createFile(atPath: logPath, contents: nil), let handle = FileHandle(forWritingAtPath: logPath)
            else { fail("cannot write \(logPath)") }
            log = DeliveryLog(handle)
        }
        let gone = unregistered
        let deliveries = log
        let ca = try StandInCA(validFor: 30 * 24 * 3600)
        StandInLoops.scriptsOnTheLoops()   // its scripts answer at once
        let apns = try await StandInAPNs.start(
            ca: ca, port: apnsPort, record: false,
            script: { request in
                let uninstalled = gone.contains(request.deviceToken)
                deliveries?.append(
                    "apns", answer: uninstalled ? "410" : "200", token: request.deviceToken, collapse: request.collapseID,
                    title: request.alert?.title)
                return uninstalled ? .reject(status: 410, reason: "Unregistered") : .accept
            })
        let fcm = try await StandInFCM.start(port: fcmPort, record: false) { request in
            let uninstalled = gone.contains(request.deviceToken)
            deliveries?.append(
                "fcm", answer: uninstalled ? "404" : "200", token: request.deviceToken, collapse: request.collapseKey,
                title: request.message["title"])
            return uninstalled ? .reject(status: 404, code: "UNREGISTERED", message: "Requested entity was not found.") : .accept
        }
        let directory = URL(fileURLWithPath: folder, isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let mail = directory.appendingPathComponent("mail", isDirectory: true)
        try FileManager.default.createDirectory(at: mail, withIntermediateDirectories: true)
        let counter = Mutex(0)
        let webhookSecret = StandInResend.makeWebhookSecret()
        let webhook = resendWebhook
        let mailbox = Mutex<StandInResend?>(nil)
        let resend = try await StandInResend.start(
            port: resendPort,
            onSent: { email in
                // What Resend tells of each email: delivered a second later (or, for an address of
                // which a hash says so, 1 in 50, a hard bounce), and opened by about 2 in 5 a minute on.
                if let url = webhook, let resend = mailbox.withLock({ $0 }) {
                    let address = email.to.first ?? ""
                    let hash = address.unicodeScalars.reduce(UInt32(2_166_136_261)) { ($0 ^ $1.value) &* 16_777_619 }
                    Task {
                        try? await Task.sleep(for: .seconds(1))
                        if hash % 50 == 0 {
                            _ = try? await resend.notify(
                                email, type: "email.bounced", to: url, secret: webhookSecret,
                                bounce: ("Permanent", "General"))
                            return
                        }
                        _ = try? await resend.notify(email, type: "email.delivered", to: url, secret: webhookSecret)
                        if (hash / 50) % 5 < 2 {
                            try? await Task.sleep(for: .seconds(1))
                            _ = try? await resend.notify(
                                email, type: "email.opened", to: url, secret: webhookSecret,
                                at: Date().addingTimeInterval(60))
                        }
                    }
                }
                let number = counter.withLock { count -> Int in
                    count += 1
                    return count
                }
                try? Data((email.html ?? "").utf8).write(to: mail.appendingPathComponent("\(number).html"))
                try? Data((email.text ?? "").utf8).write(to: mail.appendingPathComponent("\(number).txt"))
                deliveries?.append(
                    "resend", answer: "200", token: email.to.first ?? "", collapse: "\(number)", title: email.subject,
                    whole: true)
            })
        mailbox.withLock { $0 = resend }
        let receipts = Mutex<StandInTwilio?>(nil)
        let twilio = try await StandInTwilio.start(
            port: twilioPort,
            onSent: { message in
                deliveries?.append("twilio", answer: "201", token: message.to ?? "", collapse: message.sid, title: message.body)
                guard message.statusCallback != nil, let twilio = receipts.withLock({ $0 }) else { return }
                Task {
                    try? await Task.sleep(for: .seconds(2))
                    _ = try? await twilio.report(message, status: "delivered")
                }
            })
        receipts.withLock { $0 = twilio }
        let ca_pem = directory.appendingPathComponent("ca.pem").path
        let key = directory.appendingPathComponent("apns-key.p8").path
        let account = directory.appendingPathComponent("service-account.json").path
        try ca.writeCertificate(to: ca_pem)
        try Data(apns.privateKeyPEM.utf8).write(to: URL(fileURLWithPath: key))
        try fcm.writeServiceAccount(to: account)
        chmod(key, 0o600)
        chmod(account, 0o600)
        let env = """
            export NUDGE_CA_FILE='\(ca_pem)'
            export APNS_KEY_ID='\(apns.keyID)' APNS_TEAM_ID='\(apns.teamID)' APNS_BUNDLE_ID='\(apns.bundleID)'
            export APNS_PRIVATE_KEY='\(key)' APNS_ENVIRONMENT=sandbox APNS_BASE_URL='\(apns.baseURL)'
            export GOOGLE_APPLICATION_CREDENTIALS='\(account)' FCM_BASE_URL='\(fcm.baseURL)'
            export RESEND_API_KEY='\(resend.apiKey)' RESEND_FROM='FitCircle <coach@fitcircle.example>' RESEND_BASE_URL='\(resend.baseURL)' RESEND_REQUESTS_PER_SECOND=100
            export RESEND_WEBHOOK_SECRET='\(webhookSecret)'
            export TWILIO_ACCOUNT_SID='\(twilio.accountSID)' TWILIO_AUTH_TOKEN='\(twilio.authToken)' TWILIO_FROM='+15005550006' TWILIO_BASE_URL='\(twilio.baseURL)'
            export TWILIO_API_KEY_SID='\(twilio.apiKeySID)' TWILIO_API_KEY_SECRET='\(twilio.apiKeySecret)'

            """
        try Data(env.utf8).write(to: directory.appendingPathComponent("env"))
        // Written straight to the file descriptor: whoever started the stand-ins waits for this line.
        FileHandle.standardOutput.write(
            Data("push stand-ins listening: APNs \(apns.baseURL), FCM \(fcm.baseURL), Resend \(resend.baseURL), Twilio \(twilio.baseURL)\n".utf8))
        // How many requests Resend's stand-in has had (a batch is one), for the benchmarks.
        let requests = directory.appendingPathComponent("resend-requests")
        while true {
            try? Data("\(resend.requestCount)\n".utf8).write(to: requests, options: .atomic)
            try await Task.sleep(for: .seconds(1))
        }
    }

    static let usage = """
        usage: nudge-push-stand-in --dir DIR [--unregistered FILE] [--log FILE] [--apns-port N] [--fcm-port N] [--resend-port N] \
        [--twilio-port N] [--resend-webhook URL]
        """

    static func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data((message + "\n").utf8))
        exit(64)
    }
}

/// One line per push received, appended as it comes.
private final class DeliveryLog: Sendable {
    private let handle: Mutex<FileHandle>

    init(_ handle: FileHandle) {
        self.handle = Mutex(handle)
    }

    /// `whole`: the address as it is (an email's), not a token's start.
    func append(_ provider: String, answer: String, token: String, collapse: String?, title: String?, whole: Bool = false) {
        // A phone number shows its last two digits only.
        let shown = whole ? token : provider == "twilio" ? "…" + token.suffix(2) : token.prefix(12) + "…"
        let line = "\(provider)\t\(answer)\t\(shown)\t\(collapse ?? "-")\t\(title ?? "")\n"
        handle.withLock { $0.write(Data(line.utf8)) }
    }
}
