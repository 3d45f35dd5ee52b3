import Foundation
import Logging

/// The seam every way out of Nudge plugs into: one provider of one channel, asked to take one
/// notification for one address, answering with what became of it. APNs and FCM carry the push
/// channel; email (Resend) and SMS (Twilio) plug in beside them.
public protocol PushService: Sendable {
    var provider: DeliveryProvider { get }

    /// Sends one delivery to one device; never throws: every failure is a `SendResult`.
    func send(_ push: PushRequest, context: SendContext) async -> SendResult

    /// A harmless request that tells whether the provider answers again, sending nobody
    /// anything (FCM: a message validated, not sent); nil for a provider that offers none (APNs),
    /// whose probe is a few real notifications.
    func probe(context: SendContext) async -> ProbeAnswer?

    /// Ends the service's connections.
    func shutdown() async
}

extension PushService {
    public func probe(context: SendContext) async -> ProbeAnswer? { nil }
}

/// One push for one device.
public struct PushRequest: Sendable {
    public let content: PushContent
    public let device: Device
    /// The same for every device and every retry of one delivery: the device shows it once.
    public let collapseID: String
    /// APNs' `apns-id`: the same for a retry to the same device.
    public let requestID: UUID
    /// Until when the provider keeps it for an offline device: APNs' `apns-expiration` and FCM's
    /// `ttl` are worked out from it as the request leaves (`keepFor(at:)`).
    public let keepUntil: Date
    /// A call preview: sent at once (APNs priority 10, FCM high); others too, at priority 10,
    /// since each is an alert the user sees.
    public let timeCritical: Bool

    public init(delivery: PlannedDelivery, device: Device, timeCritical: Bool) {
        content = delivery.content
        self.device = device
        collapseID = delivery.collapseID
        requestID = Digest.uuid("\(delivery.collapseID):\(device.key)")
        keepUntil = delivery.keepUntil
        self.timeCritical = timeCritical
    }

    /// How many seconds the provider keeps it when it leaves at `now` (at least one).
    public func keepFor(at now: Date) -> TimeInterval {
        DispatchRules.keepFor(until: keepUntil, at: now)
    }
}

/// What a send may use besides the request: the run's database (where provider tokens are kept)
/// and its logger.
public struct SendContext: Sendable {
    public let database: Database?
    public let logger: Logger
    /// The run's clock: what is left of a push's shelf life is read from it as the push leaves.
    public let clock: any RunClock
    /// What a wait for a turn is slept on: the run's wait clock.
    public let waitClock: any WaitClock
    /// Asked once the push has a connection, just before it leaves: a result keeps it from
    /// leaving (its provider was found down while it waited, say), nil lets it go.
    public let leaving: @Sendable () -> SendResult?

    public init(
        database: Database?, logger: Logger, clock: any RunClock = SystemClock(), waitClock: any WaitClock = SystemWaitClock(),
        leaving: @escaping @Sendable () -> SendResult? = { nil }
    ) {
        self.database = database
        self.logger = logger
        self.clock = clock
        self.waitClock = waitClock
        self.leaving = leaving
    }

    /// The same, with `leaving` asked before the push leaves.
    public func leaving(_ check: @escaping @Sendable () -> SendResult?) -> SendContext {
        SendContext(database: database, logger: logger, clock: clock, waitClock: waitClock, leaving: check)
    }
}

/// The delivery services configured in the environment: each provider ready, or the reason it
/// is not ("not configured": its notifications wait in the outbox, nothing is dropped).
public struct DeliveryServices: Sendable {
    /// The push clients to send with (none on a dry run).
    public let services: [DeliveryProvider: any PushService]
    /// The email client (none on a dry run, or without Resend's configuration).
    public let email: ResendClient?
    /// The SMS client (none on a dry run, or without Twilio's configuration).
    public let sms: TwilioClient?
    /// Each provider: ready when configured (on a dry run too, which decides as a real run
    /// would and sends nothing), else why not.
    public let states: [DeliveryProvider: ProviderState]
    /// How long a send waits for the provider's answer (`NUDGE_PUSH_TIMEOUT_SECONDS`).
    public let timeout: Duration
    /// Who each configured provider is configured as (key and team ids, topic, project, sender,
    /// endpoint; never a secret): a provider paused for its configuration is tried again at once
    /// by a dispatcher configured otherwise.
    public let identities: [DeliveryProvider: String]

    public init(
        services: [DeliveryProvider: any PushService], email: ResendClient? = nil, sms: TwilioClient? = nil,
        states: [DeliveryProvider: ProviderState], timeout: Duration, identities: [DeliveryProvider: String] = [:]
    ) {
        self.services = services
        self.email = email
        self.sms = sms
        self.states = states
        self.timeout = timeout
        self.identities = identities
    }

    /// Whether `provider` offers a harmless probe (one that sends nobody anything): FCM, Resend
    /// and Twilio do; APNs does not, and is probed with a few real notifications.
    public static func probesHarmlessly(_ provider: DeliveryProvider) -> Bool {
        provider != .apns
    }

    /// `provider`'s harmless probe; nil when it has none or is not configured here. Resend's
    /// takes its turn under the run's shared pace.
    public func probe(_ provider: DeliveryProvider, context: SendContext) async -> ProbeAnswer? {
        switch provider {
        case .apns, .fcm:
            return await services[provider]?.probe(context: context)
        case .resend:
            guard let email else { return nil }
            return await email.probe(pace: context.database.map { email.sharedPace($0, logger: context.logger) }, waitClock: context.waitClock)
        case .twilio:
            return await sms?.probe()
        }
    }

    /// Builds the services the environment configures, runs `body` with them, and shuts them
    /// down on every path out. A half-done configuration (a key without its team id) is an error
    /// that names what is missing, before anything is sent.
    public static func with<Result: Sendable>(
        _ environment: Environment, dryRun: Bool,
        _ body: (DeliveryServices) async throws -> Result
    ) async throws -> Result {
        var services: [DeliveryProvider: any PushService] = [:]
        var email: ResendClient?
        var sms: TwilioClient?
        var states: [DeliveryProvider: ProviderState] = [:]
        var identities: [DeliveryProvider: String] = [:]
        let http = ProviderHTTP(
            extraTrustedRoots: environment["NUDGE_CA_FILE"],
            timeout: .seconds(try environment.integer("NUDGE_PUSH_TIMEOUT_SECONDS", default: 10, in: 1...120)))
        do {
            if let configuration = try APNsConfiguration(environment: environment) {
                if !dryRun { services[.apns] = try APNsClient(configuration: configuration, http: http) }
                states[.apns] = .ready
                identities[.apns] = [
                    configuration.teamID, configuration.keyID, configuration.bundleID, configuration.environmentName,
                    configuration.baseURL,
                ].joined(separator: " ")
            } else {
                states[.apns] = .unavailable("APNs is not configured (APNS_KEY_ID, APNS_TEAM_ID, APNS_PRIVATE_KEY, APNS_BUNDLE_ID)")
            }
            if let configuration = try FCMConfiguration(environment: environment) {
                if !dryRun { services[.fcm] = try FCMClient(configuration: configuration, http: http) }
                states[.fcm] = .ready
                identities[.fcm] = [
                    configuration.projectID, configuration.clientEmail, configuration.privateKeyID,
                    configuration.baseURL,
                ].joined(separator: " ")
            } else {
                states[.fcm] = .unavailable("FCM is not configured (GOOGLE_APPLICATION_CREDENTIALS)")
            }
            if let configuration = try ResendConfiguration(environment: environment) {
                if !dryRun { email = try ResendClient(configuration: configuration, http: http) }
                states[.resend] = .ready
                identities[.resend] = [configuration.from, configuration.baseURL].joined(separator: " ")
            } else {
                states[.resend] = .unavailable("Resend is not configured (RESEND_API_KEY, RESEND_FROM)")
            }
            if let configuration = try TwilioConfiguration(environment: environment) {
                if !dryRun { sms = try TwilioClient(configuration: configuration, http: http) }
                states[.twilio] = .ready
                identities[.twilio] = [configuration.accountSID, configuration.credentialID, configuration.from, configuration.baseURL]
                    .joined(separator: " ")
            } else {
                states[.twilio] = .unavailable("Twilio is not configured (TWILIO_ACCOUNT_SID, TWILIO_API_KEY_SID, TWILIO_API_KEY_SECRET, TWILIO_FROM)")
            }
        } catch {
            for service in services.values { await service.shutdown() }
            await email?.shutdown()
            await sms?.shutdown()
            throw error
        }
        let all = DeliveryServices(
            services: services, email: email, sms: sms, states: states, timeout: http.timeout,
            identities: identities)
        do {
            let result = try await body(all)
            for service in services.values { await service.shutdown() }
            await email?.shutdown()
            await sms?.shutdown()
            return result
        } catch {
            for service in services.values { await service.shutdown() }
            await email?.shutdown()
            await sms?.shutdown()
            throw error
        }
    }

    /// What `nudge list` says of each provider.
    public static func describe(_ environment: Environment) -> [(DeliveryProvider, String)] {
        DeliveryProvider.allCases.map { provider in
            do {
                switch provider {
                case .apns:
                    guard let configuration = try APNsConfiguration(environment: environment) else {
                        return (provider, "not configured (APNS_KEY_ID, APNS_TEAM_ID, APNS_PRIVATE_KEY, APNS_BUNDLE_ID)")
                    }
                    return (provider, "configured: \(configuration.environmentName), topic \(configuration.bundleID)")
                case .fcm:
                    guard let configuration = try FCMConfiguration(environment: environment) else {
                        return (provider, "not configured (GOOGLE_APPLICATION_CREDENTIALS)")
                    }
                    return (provider, "configured: project \(configuration.projectID)")
                case .resend:
                    guard let configuration = try ResendConfiguration(environment: environment) else {
                        return (provider, "not configured (RESEND_API_KEY, RESEND_FROM)")
                    }
                    return (provider, "configured: from \(configuration.from)")
                case .twilio:
                    guard let configuration = try TwilioConfiguration(environment: environment) else {
                        return (provider, "not configured (TWILIO_ACCOUNT_SID, TWILIO_API_KEY_SID, TWILIO_API_KEY_SECRET, TWILIO_FROM)")
                    }
                    return (
                        provider,
                        "configured: from \(configuration.from)"
                            + (configuration.usesAPIKey
                                ? ", with an API key"
                                : ", with the account's auth token (an API key would keep it for signatures alone)")
                            + (configuration.statusCallback == nil ? ", no status callbacks (NUDGE_PUBLIC_URL not set)" : "")
                    )
                }
            } catch {
                return (provider, "misconfigured: \(error)")
            }
        }
    }
}
