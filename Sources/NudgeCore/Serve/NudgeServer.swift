import Foundation
import Hummingbird
import Logging
import NIOCore
import PostgresNIO
import ServiceLifecycle
import Synchronization
import UnixSignals

/// `nudge serve`: the small HTTP server for what comes back from the outside (docs/serve.md). Routes:
/// - `POST /unsubscribe?token=…`: the one-click request a mail client sends from
///   `List-Unsubscribe-Post` (RFC 8058), or the button of the page below: 200 and the email
///   type off; 400 for a forged, altered or unknown token, which changes nothing.
/// - `GET /unsubscribe?token=…`: a small page that says what will stop, with a button that
///   POSTs (a link followed by a mail scanner must not unsubscribe anyone).
/// - `POST /webhooks/twilio`: Twilio's status callbacks for the SMS dispatch sent
///   (`SMSStatus`), signed in `X-Twilio-Signature` under `TWILIO_AUTH_TOKEN`: 403 for one that is
///   unsigned or badly signed (or when Twilio is not configured), which changes nothing.
/// - `POST /webhooks/resend`: Resend's webhooks (`ResendWebhook`, `EmailEvents`), signed as
///   Svix signs them under `RESEND_WEBHOOK_SECRET`: 401 for a missing, wrong or stale signature
///   (or when the secret is not set), or a delivery seen before (a replay: the same `svix-id` and
///   a `svix-timestamp` not newer), which changes nothing; 200 for an event recorded, a retry of
///   one (the same `svix-id`, newer: not applied again), or one Nudge has nothing to record of.
/// - `GET /health`: 200 when the database answered its last check (every 5 seconds, in the
///   background: a load balancer's probes never reach the database), 503 when it did not.
///   `GET /health?db=1`, which asks the database now, is answered only on a listener of its own
///   (`NUDGE_HEALTH_PORT`, on 127.0.0.1: `healthRouter`), which no proxy forwards: a proxy on this
///   machine that adds no forwarding header makes the internet's requests look local.
///
/// Fit for the internet (`ServerLimits`): idle and slow connections are closed, a body too large
/// is refused unread, past a cap the longest-idle connection makes room for a new one, past the
/// requests waiting on the database it allows it says 503 at once; a failure is logged at warning with its
/// route (never its query, which carries the unsubscribe token). Pages carry a CSP that allows
/// nothing but their inline style and their form, no framing, no referrer.
public enum NudgeServer {
    /// How long a request waits for the database.
    static let databaseTimeout: Duration = .seconds(5)
    /// The largest callback body read.
    static let largestForm = 64 * 1024
    /// How often `/health` asks the database, and how old its last answer may be.
    static let healthEvery: Duration = .seconds(5)
    static let healthFreshFor: Duration = .seconds(15)

    /// `twilioPreviousAuthToken`: through a rotation of Twilio's auth token, the one replaced
    /// (`TWILIO_AUTH_TOKEN_PREVIOUS`): a callback signed with either is Twilio's.
    public static func router(
        database: Database, links: UnsubscribeLinks, twilioAuthToken: String?,
        twilioPreviousAuthToken: String? = nil,
        resendWebhookSecret: ResendWebhookSecret? = nil, limits: ServerLimits = ServerLimits(),
        health: HealthCheck? = nil,
        clock: any RunClock = SystemClock()
    ) -> Router<ServeContext> {
        router(
            database: database, links: links, twilioAuthToken: twilioAuthToken, twilioPreviousAuthToken: twilioPreviousAuthToken,
            resendWebhookSecret: resendWebhookSecret, limits: limits, health: health, slots: nil, clock: clock)
    }

    /// The routes, their database work under `slots` (shared with the health listener's).
    static func router(
        database: Database, links: UnsubscribeLinks, twilioAuthToken: String?, twilioPreviousAuthToken: String?,
        resendWebhookSecret: ResendWebhookSecret?, limits: ServerLimits, health: HealthCheck?,
        slots: DatabaseSlots?, clock: any RunClock
    ) -> Router<ServeContext> {
        let router = Router(context: ServeContext.self)
        router.add(middleware: ServeMiddleware(logger: database.logger))
        let slots = slots ?? DatabaseSlots(limit: limits.maxInFlight)
        let health = health ?? HealthCheck()
        let formOrigin = PublicURL.origin(of: links.publicURL)
        router.post(RouterPath(stringLiteral: ResendWebhook.path)) { request, _ -> Response in
            let body = Array(buffer: try await collect(request, upTo: ResendWebhook.largestBody))
            let header = { (name: String) -> String? in request.headers[.init(name)!] }
            let received = clock.now()
            guard let secret = resendWebhookSecret else {
                database.logger.notice("Resend webhook refused: RESEND_WEBHOOK_SECRET is not set")
                return page(.unauthorized, text: "unauthorized\n")
            }
            do {
                try ResendWebhook.verify(
                    id: header("svix-id"), timestamp: header("svix-timestamp"), signatures: header("svix-signature"),
                    body: body, secret: secret, now: received)
            } catch {
                database.logger.notice("Resend webhook refused", metadata: [LogKey.reason: "\(error)"])
                return page(.unauthorized, text: "unauthorized\n")
            }
            guard let event = ResendWebhook.parse(body), let svixID = header("svix-id"),
                let deliveredAt = header("svix-timestamp").flatMap({ Int64($0) })
            else {
                // Signed by Resend, so not worth its retries for a day: answered, and said.
                database.logger.warning("Resend webhook: a signed body that is not an event Nudge can read; answered 200, not kept")
                return page(.ok, text: "not an event\n")
            }
            let outcome = try await ask(database, slots) { connection in
                try await EmailEvents.record(
                    event, svixID: svixID, deliveredAt: deliveredAt, receivedAt: received, on: connection,
                    logger: database.logger)
            }
            var metadata: Logger.Metadata = ["nudge.event": "\(event.type)", "nudge.svix_id": "\(svixID)"]
            if let emailID = event.emailID { metadata["nudge.email_id"] = "\(emailID)" }
            switch outcome {
            case .replayed:
                database.logger.notice("Resend webhook refused: a delivery seen before (a replay)", metadata: metadata)
                return page(.unauthorized, text: "unauthorized\n")
            case .busy:
                database.logger.info("Resend webhook: another event of its email is being recorded; answered 503", metadata: metadata)
                var busy = page(.serviceUnavailable, text: "another event of this email is being recorded; try again\n")
                busy.headers[.retryAfter] = "5"
                return busy
            case .recorded(_, logged: true), .retried, .ignored, .repeated:
                database.logger.info("Resend webhook", metadata: metadata.merging(["nudge.outcome": "\(outcome)"]) { $1 })
            case .recorded(_, logged: false):
                // Kept: the email's log may be written yet (its batch's write applies it); if
                // it never is, the email was not Nudge's. Logged once: its svix-id is recorded.
                database.logger.notice("Resend webhook for an email with no log of Nudge's (yet): kept", metadata: metadata)
            }
            return page(.ok, text: "ok\n")
        }
        router.post(RouterPath(stringLiteral: TwilioWebhook.path)) { request, _ -> Response in
            let body = try await collect(request, upTo: largestForm)
            // Twilio signs the URL it was given: NUDGE_PUBLIC_URL's, whatever proxy is in between.
            let url = links.publicURL + TwilioWebhook.path + (request.uri.query.map { "?" + $0 } ?? "")
            let signature = request.headers[.init("X-Twilio-Signature")!]
            guard let fields = FormEncoding.decode(String(buffer: body)),
                [twilioAuthToken, twilioPreviousAuthToken].contains(where: { token in
                    token.map { TwilioWebhook.isGenuine(signature: signature, url: url, fields: fields, authToken: $0) } ?? false
                })
            else {
                database.logger.notice("Twilio callback refused: not signed with TWILIO_AUTH_TOKEN (nor TWILIO_AUTH_TOKEN_PREVIOUS)")
                return page(.forbidden, text: "forbidden\n")
            }
            let outbox = request.uri.queryParameters.get("outbox").flatMap { Int64($0) }
            let outcome = try await ask(database, slots) { connection in
                try await SMSStatus.record(fields: fields, outboxID: outbox, on: connection, logger: database.logger)
            }
            database.logger.info("Twilio callback", metadata: ["nudge.outcome": "\(outcome)", "nudge.outbox_id": "\(outbox ?? 0)"])
            return page(.ok, text: "ok\n")
        }
        router.get("/health") { request, _ -> Response in
            if request.uri.queryParameters.get("db") == "1" {
                // Never here, whoever seems to ask: a proxy on this machine makes everyone local.
                return page(.notFound, text: "the database check is answered on NUDGE_HEALTH_PORT, at 127.0.0.1\n")
            }
            return health.isHealthy ? page(.ok, text: "ok\n") : page(.serviceUnavailable, text: "the database does not answer\n")
        }
        router.get("/unsubscribe") { request, _ -> Response in
            guard let (user, type) = request.uri.queryParameters.get("token").flatMap(links.verify) else {
                return page(.badRequest, html: UnsubscribePages.invalid(locale: "en"), formOrigin: formOrigin)
            }
            let state = try await ask(database, slots) { connection in
                try await Unsubscribe.state(user: user, type: type, on: connection, logger: database.logger)
            }
            guard let state else { return page(.badRequest, html: UnsubscribePages.invalid(locale: "en"), formOrigin: formOrigin) }
            return page(
                .ok,
                html: UnsubscribePages.confirm(
                    action: links.url(user: user, type: type), type: type,
                    alreadyOff: !state.subscribed, locale: state.locale),
                formOrigin: formOrigin)
        }
        router.post("/unsubscribe") { request, _ -> Response in
            guard let (user, type) = request.uri.queryParameters.get("token").flatMap(links.verify) else {
                database.logger.notice("unsubscribe refused: the token is not genuine")
                return page(.badRequest, html: UnsubscribePages.invalid(locale: "en"), formOrigin: formOrigin)
            }
            let outcome = try await ask(database, slots) { connection in
                try await Unsubscribe.apply(user: user, type: type, on: connection, logger: database.logger)
            }
            switch outcome {
            case .unknownUser:
                return page(.badRequest, html: UnsubscribePages.invalid(locale: "en"), formOrigin: formOrigin)
            case .done(let locale, let changed):
                database.logger.info(
                    "unsubscribed",
                    metadata: [
                        LogKey.userID: "\(user.uuidString.lowercased())",
                        "nudge.email_type": "\(type.rawValue)",
                        "nudge.changed": "\(changed)",
                    ])
                return page(.ok, html: UnsubscribePages.done(type: type, locale: locale), formOrigin: formOrigin)
            }
        }
        return router
    }

    /// The request's body, at most `limit` bytes (413 past it). A body that stops coming ends
    /// with its connection (`ConnectionGuard`'s time-out): that is the client's doing, said as
    /// a 408 rather than as a failure of the server.
    private static func collect(_ request: Request, upTo limit: Int) async throws -> ByteBuffer {
        do {
            return try await request.body.collect(upTo: limit)
        } catch let error as any HTTPResponseError {
            throw error   // a body past `limit` among them: 413
        } catch {
            throw HTTPError(.requestTimeout, message: "the request's body did not come")
        }
    }

    /// One question to the database, answered within `databaseTimeout` once a connection is
    /// leased; `Overloaded` at once when `slots` are all taken. Only the database work holds a
    /// slot: a client slow to send its body holds none (it has `ServerLimits.bodyTimeout`).
    private static func ask<T: Sendable>(
        _ database: Database, _ slots: DatabaseSlots,
        _ question: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        guard slots.take() else { throw Overloaded() }
        defer { slots.give() }
        return try await database.withConnection { connection in
            try await Database.answer(within: databaseTimeout, on: connection) { try await question(connection) }
        }
    }

    /// The health listener's routes (`NUDGE_HEALTH_PORT`, bound to 127.0.0.1 alone, for a monitor
    /// on this machine): `GET /health` as on the main listener, and `GET /health?db=1`, which asks
    /// the database now, under the same slots as the other routes' database work.
    static func healthRouter(database: Database, health: HealthCheck, slots: DatabaseSlots) -> Router<ServeContext> {
        let router = Router(context: ServeContext.self)
        router.add(middleware: ServeMiddleware(logger: database.logger))
        router.get("/health") { request, _ -> Response in
            guard request.uri.queryParameters.get("db") == "1" else {
                return health.isHealthy ? page(.ok, text: "ok\n") : page(.serviceUnavailable, text: "the database does not answer\n")
            }
            guard slots.take() else { return page(.serviceUnavailable, text: "busy: every slot for the database is taken\n") }
            defer { slots.give() }
            return await health.check(database) ? page(.ok, text: "ok\n") : page(.serviceUnavailable, text: "the database does not answer\n")
        }
        return router
    }

    /// Serves until a graceful shutdown (SIGTERM, SIGINT) and lets the requests in flight finish.
    /// `onRunning` gets the port it listens on (useful with port 0); with `healthPort`, the
    /// health listener is opened on 127.0.0.1 too, and `onHealthRunning` gets its port.
    /// `waitClock`: what the database check's interval and its answer's age are measured on.
    public static func run(
        database: Database, links: UnsubscribeLinks, twilioAuthToken: String?,
        twilioPreviousAuthToken: String? = nil,
        resendWebhookSecret: ResendWebhookSecret? = nil, limits: ServerLimits = ServerLimits(),
        clock: any RunClock = SystemClock(), waitClock: any WaitClock = SystemWaitClock(), host: String, port: Int,
        healthPort: Int? = nil, logger: Logger, onRunning: @escaping @Sendable (Int) async -> Void = { _ in },
        onHealthRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) async throws {
        let health = HealthCheck(clock: waitClock)
        let connections = OpenConnections(limit: limits.maxConnections)
        let slots = DatabaseSlots(limit: limits.maxInFlight)
        let app = Application(
            router: router(
                database: database, links: links, twilioAuthToken: twilioAuthToken,
                twilioPreviousAuthToken: twilioPreviousAuthToken, resendWebhookSecret: resendWebhookSecret,
                limits: limits, health: health, slots: slots, clock: clock),
            server: .http1(
                configuration: .init(
                    additionalChannelHandlers: [ConnectionGuard(limits: limits, connections: connections)],
                    idleTimeout: TimeAmount(limits.idleTimeout))),
            configuration: .init(address: .hostname(host, port: port), serverName: "nudge", backlog: 1_024),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? port) },
            logger: logger)
        let healthConnections = OpenConnections(limit: 64)
        let healthApp = healthPort.map { healthPort in
            Application(
                router: healthRouter(database: database, health: health, slots: slots),
                server: .http1(
                    configuration: .init(
                        additionalChannelHandlers: [ConnectionGuard(limits: limits, connections: healthConnections)],
                        idleTimeout: TimeAmount(limits.idleTimeout))),
                configuration: .init(address: .hostname("127.0.0.1", port: healthPort), serverName: "nudge", backlog: 64),
                onServerRunning: { channel in await onHealthRunning(channel.localAddress?.port ?? healthPort) },
                logger: logger)
        }
        // One group for both listeners: either ending, or failing (a port taken), ends serve; a
        // graceful shutdown (SIGTERM, SIGINT) drains both.
        var services = [ServiceGroupConfiguration.ServiceConfiguration(service: app)]
        if let healthApp { services.append(.init(service: healthApp)) }
        let listeners = ServiceGroup(
            configuration: .init(
                services: services, gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await health.keepChecking(database, every: healthEvery) }
            try await listeners.run()
            group.cancelAll()
        }
    }

    /// The headers of every answer: nothing to sniff, no referrer, no framing, no caching.
    private static func headers(contentType: String) -> HTTPFields {
        [
            .contentType: contentType, .cacheControl: "no-store", .init("X-Content-Type-Options")!: "nosniff",
            .init("Referrer-Policy")!: "no-referrer", .init("X-Frame-Options")!: "DENY",
        ]
    }

    /// A page: its CSP allows its inline style and a form posting to `formOrigin`, nothing else.
    static func page(_ status: HTTPResponse.Status, html: String, formOrigin: String) -> Response {
        var fields = headers(contentType: "text/html; charset=utf-8")
        fields[.contentSecurityPolicy] = """
            default-src 'none'; style-src 'unsafe-inline'; form-action 'self' \(formOrigin); frame-ancestors 'none'; base-uri 'none'
            """
        return Response(status: status, headers: fields, body: .init(byteBuffer: ByteBuffer(string: html)))
    }

    static func page(_ status: HTTPResponse.Status, text: String) -> Response {
        var fields = headers(contentType: "text/plain; charset=utf-8")
        fields[.contentSecurityPolicy] = "default-src 'none'; frame-ancestors 'none'"
        return Response(status: status, headers: fields, body: .init(byteBuffer: ByteBuffer(string: text)))
    }
}

/// What `nudge serve`'s routes know of a request besides itself: where it came from.
public struct ServeContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let remoteAddress: SocketAddress?

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }

    /// Sent from this machine (loopback or a Unix socket): a proxy on it, an operator, a probe.
    var isFromThisMachine: Bool {
        switch remoteAddress {
        case .v4(let address)?: address.host.hasPrefix("127.")
        case .v6(let address)?: address.host == "::1" || address.host.hasPrefix("::ffff:127.")
        case .unixDomainSocket?: true
        case nil: false
        }
    }
}

/// Requests waiting on the database at once, at most `limit`: past it a request is answered 503
/// at once rather than queued behind a database that is slow.
final class DatabaseSlots: Sendable {
    private let taken = Mutex(0)
    let limit: Int

    init(limit: Int) {
        self.limit = limit
    }

    func take() -> Bool {
        taken.withLock { count in
            guard count < limit else { return false }
            count += 1
            return true
        }
    }

    func give() {
        taken.withLock { $0 -= 1 }
    }
}

/// More requests wait on the database than `NUDGE_HTTP_MAX_IN_FLIGHT` allows.
struct Overloaded: Error {}

/// Every route's frame: a failure is logged at warning with its method and path (never its
/// query: the unsubscribe token) and answered 503, the client's cue to retry: at once
/// (`Retry-After: 1`) when the server is overloaded, after 5 seconds when the database failed.
/// Overload is logged at most once every 10 seconds, with how many were refused.
struct ServeMiddleware: RouterMiddleware {
    typealias Context = ServeContext

    /// Refusals for overload since the last line that said so, and when that was.
    private final class OverloadLog: Sendable {
        let state = Mutex<(refused: Int, lastLogged: ContinuousClock.Instant?)>((0, nil))
    }

    let logger: Logger
    private let overloads = OverloadLog()

    init(logger: Logger) {
        self.logger = logger
    }

    func handle(
        _ request: Request, context: ServeContext,
        next: (Request, ServeContext) async throws -> Response
    ) async throws -> Response {
        let route = ["nudge.route": Logger.MetadataValue.string("\(request.method) \(request.uri.path)")]
        do {
            return try await next(request, context)
        } catch let error as any HTTPResponseError {
            logger.notice("request refused", metadata: route.merging(["nudge.status": "\(error.status.code)"]) { $1 })
            throw error
        } catch is Overloaded {
            let now = ContinuousClock.now
            let refused: Int? = overloads.state.withLock { state in
                state.refused += 1
                guard state.lastLogged.map({ now - $0 >= .seconds(10) }) ?? true else { return nil }
                defer { state = (0, now) }
                return state.refused
            }
            if let refused {
                logger.warning(
                    "overloaded: more requests waiting on the database than NUDGE_HTTP_MAX_IN_FLIGHT; answered 503",
                    metadata: route.merging(["nudge.refused": "\(refused)"]) { $1 })
            }
            return busy(retryAfter: 1, text: "busy: try again in a second\n")
        } catch {
            logger.warning("request failed; answered 503", metadata: route.merging([LogKey.reason: "\(describe(error))"]) { $1 })
            return busy(retryAfter: 5, text: "unavailable: try again shortly\n")
        }
    }

    private func busy(retryAfter seconds: Int, text: String) -> Response {
        var response = NudgeServer.page(.serviceUnavailable, text: text)
        response.headers[.retryAfter] = "\(seconds)"
        return response
    }
}

/// The database's health as `/health` reports it: checked in the background, read from memory,
/// its age and the checks' interval measured on `clock` (the real time, unless a test moves it).
public final class HealthCheck: Sendable {
    private let clock: any WaitClock
    private let lastAnswer = Mutex<Duration?>(nil)

    public init(clock: any WaitClock = SystemWaitClock()) {
        self.clock = clock
    }

    /// Whether the database answered within `healthFreshFor`.
    var isHealthy: Bool {
        guard let last = lastAnswer.withLock({ $0 }) else { return false }
        return clock.now() - last <= NudgeServer.healthFreshFor
    }

    /// Notes an answer from the database, now.
    func answered() {
        let now = clock.now()
        lastAnswer.withLock { $0 = now }
    }

    /// Asks the database now; remembers when it answered.
    @discardableResult
    func check(_ database: Database) async -> Bool {
        do {
            try await database.withConnection { connection in
                try await Database.answer(within: NudgeServer.databaseTimeout, on: connection) {
                    _ = try await connection.query("select 1", logger: database.logger)
                }
            }
            answered()
            return true
        } catch {
            return false
        }
    }

    func keepChecking(_ database: Database, every interval: Duration) async {
        while !Task.isCancelled {
            await check(database)
            try? await clock.sleep(for: interval)
        }
    }
}

/// The unsubscribe pages: plain, inline-styled, in the user's language.
enum UnsubscribePages {
    static func confirm(action: String, type: EmailType, alreadyOff: Bool, locale: String) -> String {
        let french = locale == "fr"
        let what = escape(type.name(locale: locale))
        let heading = french ? "Se désabonner" : "Unsubscribe"
        let body =
            alreadyOff
            ? (french ? "Tu ne reçois déjà plus \(what)." : "You are already unsubscribed from \(what).")
            : (french
                ? "Tu ne recevras plus \(what). Les autres e-mails et les notifications push ne changent pas."
                : "You will no longer get \(what). Other emails and push notifications stay as they are.")
        let button = french ? "Me désabonner" : "Unsubscribe"
        let form =
            alreadyOff
            ? ""
            : """
            <form method="post" action="\(escape(action))">
            <button type="submit" style="padding:12px 20px;font-size:16px;background-color:#2563eb;color:#ffffff;border:0;border-radius:6px;cursor:pointer;">\(button)</button>
            </form>
            """
        return shell(
            title: heading, locale: locale,
            content: "<h1 style=\"font-size:22px;margin:0 0 16px 0;\">\(heading)</h1>\n<p style=\"margin:0 0 24px 0;\">\(body)</p>\n\(form)")
    }

    static func done(type: EmailType, locale: String) -> String {
        let french = locale == "fr"
        let what = escape(type.name(locale: locale))
        let heading = french ? "C’est fait" : "You're unsubscribed"
        let body =
            french
            ? "Tu ne recevras plus \(what). Tu peux les réactiver à tout moment dans les réglages de l’app."
            : "You will no longer get \(what). You can turn them back on at any time in the app's settings."
        return shell(
            title: heading, locale: locale, content: "<h1 style=\"font-size:22px;margin:0 0 16px 0;\">\(heading)</h1>\n<p style=\"margin:0;\">\(body)</p>")
    }

    static func invalid(locale: String) -> String {
        shell(
            title: "Invalid link", locale: locale,
            content: """
                <h1 style="font-size:22px;margin:0 0 16px 0;">This link is not valid</h1>
                <p style="margin:0;">Nothing was changed. Use the unsubscribe link of a recent email, or change your email settings in the app.</p>
                """)
    }

    private static func shell(title: String, locale: String, content: String) -> String {
        """
        <!DOCTYPE html>
        <html lang="\(locale == "fr" ? "fr" : "en")">
        <head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>\(escape(title))</title></head>
        <body style="margin:0;padding:40px 16px;background-color:#f4f5f7;font-family:Helvetica,Arial,sans-serif;color:#1f2933;font-size:16px;line-height:1.5;">
        <div style="max-width:480px;margin:0 auto;background-color:#ffffff;border-radius:8px;padding:32px;">
        \(content)
        </div>
        </body>
        </html>
        """
    }

    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }
}
