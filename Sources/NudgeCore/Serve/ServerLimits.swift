import Foundation
import Logging

/// What `nudge serve` allows a client, so that no client (slow, idle, or sending too much) can take
/// the server from the others. Read from the environment (`NUDGE_HTTP_*`), with defaults fit for a
/// server on the internet behind nothing.
public struct ServerLimits: Sendable, Equatable {
    /// A connection with no request in progress (kept alive, or still sending its head) is
    /// closed after this long.
    public var idleTimeout: Duration = .seconds(30)
    /// A request's body must have come this long after its head: otherwise 408 and the
    /// connection closed. (The head itself must come within `idleTimeout`.)
    public var bodyTimeout: Duration = .seconds(10)
    /// Open connections kept at most; past it, the connections idle the longest are closed to make
    /// room, never the new one.
    public var maxConnections = 1_000
    /// Requests waiting on the database at once; past it, 503 with `Retry-After` at once. A
    /// request still sending its body waits on nothing and takes no slot.
    public var maxInFlight = 64
    /// The largest request body of any route: a larger one is refused (413) without being read,
    /// and its connection closed.
    public var maxBody = 256 * 1024

    public init() {}

    public init(environment: Environment) throws(NudgeError) {
        idleTimeout = .seconds(try environment.integer("NUDGE_HTTP_IDLE_TIMEOUT_SECONDS", default: 30, in: 1...3_600))
        bodyTimeout = .seconds(try environment.integer("NUDGE_HTTP_BODY_TIMEOUT_SECONDS", default: 10, in: 1...600))
        maxConnections = try environment.integer("NUDGE_HTTP_MAX_CONNECTIONS", default: 1_000, in: 2...100_000)
        maxInFlight = try environment.integer("NUDGE_HTTP_MAX_IN_FLIGHT", default: 64, in: 1...10_000)
    }
}

/// The process's limit on open files, which bounds the connections a server can hold.
public enum FileDescriptors {
    /// Raises the soft limit to `wanted` (within the hard limit); says so when it cannot.
    public static func raiseSoftLimit(toAtLeast wanted: Int, logger: Logger) {
        #if os(Linux)
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        #else
        let resource = RLIMIT_NOFILE
        #endif
        var limit = rlimit()
        guard getrlimit(resource, &limit) == 0 else { return }
        guard limit.rlim_cur < rlim_t(wanted) else { return }
        let target = min(rlim_t(wanted), limit.rlim_max)
        limit.rlim_cur = target
        if setrlimit(resource, &limit) != 0 || target < rlim_t(wanted) {
            logger.warning(
                "the open-file limit is below what NUDGE_HTTP_MAX_CONNECTIONS needs: raise LimitNOFILE",
                metadata: ["nudge.limit": "\(target)", "nudge.wanted": "\(wanted)"])
        }
    }
}

/// What `nudge serve`, the one process that faces the internet, may hold: its own env file
/// (`/etc/nudge/serve.env`) with the database URL of the `nudge_serve` role, the unsubscribe
/// secret, the public URL and the webhooks' secrets (Twilio's auth token, Resend's webhook
/// secret). A provider's key in its environment is refused: a flaw in the server would give it away.
public enum ServeEnvironment {
    /// The keys that send on Nudge's behalf or cost money: the jobs' alone.
    public static let providerKeys = [
        "APNS_PRIVATE_KEY", "GOOGLE_APPLICATION_CREDENTIALS", "RESEND_API_KEY",
        "TWILIO_API_KEY_SECRET", "ANTHROPIC_API_KEY", "OPENAI_API_KEY",
    ]

    public static func check(_ environment: Environment) throws(NudgeError) {
        let held = providerKeys.filter { environment[$0].map { !$0.isEmpty } ?? false }
        guard held.isEmpty else {
            throw NudgeError(
                .configuration,
                """
                nudge serve faces the internet and must not hold the providers' keys, but \(held.joined(separator: ", ")) \
                \(held.count == 1 ? "is" : "are") set: give it an env file of its own (NUDGE_ENV_FILE=/etc/nudge/serve.env, as the \
                nudge-serve unit does) with DATABASE_URL (the nudge_serve role), NUDGE_UNSUBSCRIBE_SECRET, NUDGE_PUBLIC_URL, \
                TWILIO_AUTH_TOKEN and RESEND_WEBHOOK_SECRET only
                """)
        }
    }

    /// The jobs' files `nudge serve` must not be able to open: the jobs' env file
    /// (`NUDGE_JOBS_ENV_FILE`, or `env` beside serve's own env file), the owner's (`owner.env`)
    /// and the providers' key folder (`keys`) beside it, and those of the standard install
    /// (`/etc/nudge/env`, `owner.env`, `keys`) wherever serve's own env file is.
    public static func jobsFiles(_ environment: Environment) -> [String] {
        let own = environment["NUDGE_ENV_FILE"].flatMap { $0.isEmpty ? nil : $0 }
        let folder = own.map { URL(fileURLWithPath: $0).deletingLastPathComponent().path } ?? "/etc/nudge"
        let jobs = environment["NUDGE_JOBS_ENV_FILE"].flatMap { $0.isEmpty ? nil : $0 } ?? folder + "/env"
        var files = [jobs, folder + "/owner.env", folder + "/keys"]
        for standard in ["/etc/nudge/env", "/etc/nudge/owner.env", "/etc/nudge/keys"] where !files.contains(standard) {
            files.append(standard)
        }
        return files.filter { $0 != own }
    }

    /// Refuses to serve when this process can open one of `paths` (`jobsFiles`): a flaw in the
    /// server would then give away the jobs' secrets. A path that does not exist passes.
    public static func refuseReadable(_ paths: [String]) throws(NudgeError) {
        let readable = paths.filter { path in
            let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
            guard descriptor >= 0 else { return false }
            close(descriptor)
            return true
        }
        guard readable.isEmpty else {
            throw NudgeError(
                .configuration,
                """
                nudge serve faces the internet and must not be able to read the jobs' files, but it can open \
                \(readable.joined(separator: ", ")): run it as its own user (nudge-serve, as the nudge-serve unit does; \
                scripts/install makes the jobs' env file root:nudge 640 and the keys folder root:nudge 750), \
                or, when the jobs' env file is elsewhere, name it with NUDGE_JOBS_ENV_FILE
                """)
        }
    }
}
