import Foundation
import NIOSSL
import PostgresNIO

/// A `postgres://` URL, as libpq reads it: `postgres://user:password@host:port/database`, or a
/// Unix socket with `?host=/socket/folder&port=5432`; `sslmode` and `sslrootcert` mean what they
/// mean to libpq 16, which refuses `verify-ca` against the system's roots.
///
/// A password is never given to a server that is not verified: over TCP to a host other than
/// loopback, a URL with a password must verify the server's certificate (`verify-ca` or
/// `verify-full`, or `require` with `sslrootcert`), unless `NUDGE_DB_ALLOW_INSECURE_PASSWORD=true`.
/// PostgresNIO answers a server's request for a clear-text (or MD5) password with it, so anyone
/// in the path who declines TLS, or presents any certificate, would otherwise be given it.
public struct DatabaseURL: Sendable, CustomStringConvertible {
    public enum Endpoint: Sendable, Equatable {
        case tcp(host: String, port: Int)
        /// The socket file itself (`<folder>/.s.PGSQL.<port>`), as PostgresClient wants it.
        case unixSocket(path: String)
    }

    /// libpq's `sslmode`: how hard the connection insists on TLS and what it checks.
    public enum TLSMode: String, Sendable, CaseIterable {
        /// Never TLS.
        case disable
        /// libpq tries without TLS first; Nudge, like `prefer`, tries TLS first and falls back.
        case allow
        /// TLS when the server offers it, without checking its certificate (unless `sslrootcert`
        /// is given); plain otherwise.
        case prefer
        /// TLS or nothing, without checking the certificate (unless `sslrootcert` is given: then
        /// as `verify-ca`, as libpq does).
        case require
        /// TLS with a certificate signed by a trusted root; any host name.
        case verifyCA = "verify-ca"
        /// TLS with a certificate signed by a trusted root, for this very host.
        case verifyFull = "verify-full"
    }

    public let endpoint: Endpoint
    public let username: String
    public let password: String?
    public let database: String
    public let tlsMode: TLSMode
    /// `sslrootcert`: the only roots trusted for the server's certificate (`system`: the system's).
    public let rootCertificate: String?
    /// `NUDGE_DB_CA_FILE`: the roots trusted for the server's certificate when `sslrootcert` is
    /// not given (alone, as `sslrootcert` would be). Not `NUDGE_CA_FILE`, the providers': a
    /// private CA trusted for a stand-in or a proxy may not vouch for the database too.
    public let extraTrustedRoots: String?

    /// - Parameters:
    ///   - extraTrustedRoots: `NUDGE_DB_CA_FILE`.
    ///   - allowInsecurePassword: `NUDGE_DB_ALLOW_INSECURE_PASSWORD`: the password may go to a
    ///     server that is not verified.
    public init(_ text: String, extraTrustedRoots: String? = nil, allowInsecurePassword: Bool = false) throws(NudgeError) {
        guard let components = URLComponents(string: text),
            components.scheme == "postgres" || components.scheme == "postgresql"
        else {
            throw NudgeError(.configuration, "DATABASE_URL must be a postgres:// URL")
        }
        let query = Dictionary(
            (components.queryItems ?? []).map { ($0.name, $0.value ?? "") },
            uniquingKeysWith: { _, last in last })
        let port = Int(query["port"] ?? "") ?? components.port ?? 5432
        if let socketFolder = query["host"], socketFolder.hasPrefix("/") {
            endpoint = .unixSocket(path: socketFolder + "/.s.PGSQL.\(port)")
        } else {
            endpoint = .tcp(
                host: query["host"].flatMap { $0.isEmpty ? nil : $0 }
                    ?? components.host.flatMap { $0.isEmpty ? nil : $0 } ?? "localhost",
                port: port)
        }
        username = components.user.flatMap { $0.removingPercentEncoding } ?? "postgres"
        password = components.password.flatMap { $0.removingPercentEncoding }
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        database = path.isEmpty ? username : path
        rootCertificate = query["sslrootcert"].flatMap { $0.isEmpty ? nil : $0 }
        // As libpq 16: `sslrootcert=system` makes `verify-full` the default, and refuses any weaker mode.
        guard let mode = TLSMode(rawValue: query["sslmode"] ?? (rootCertificate == "system" ? "verify-full" : "prefer")) else {
            throw NudgeError(
                .configuration,
                """
                DATABASE_URL: sslmode must be one of \(TLSMode.allCases.map(\.rawValue).joined(separator: ", "))
                """)
        }
        tlsMode = mode
        self.extraTrustedRoots = extraTrustedRoots.flatMap { $0.isEmpty ? nil : $0 }
        if rootCertificate == "system" && mode != .verifyFull {
            throw NudgeError(
                .configuration,
                """
                DATABASE_URL: sslmode=\(mode.rawValue) may not be used with sslrootcert=system: any certificate a public \
                authority issued, to anyone, would pass; use sslmode=verify-full
                """)
        }
        if mode == .verifyCA && rootCertificate == nil && self.extraTrustedRoots == nil {
            throw NudgeError(
                .configuration,
                """
                DATABASE_URL: sslmode=verify-ca needs the server's own root certificate in sslrootcert (or NUDGE_DB_CA_FILE): \
                against the system's roots it checks no host name, and any certificate a public authority issued, to \
                anyone, would pass; give sslrootcert=/path/to/root.crt, or use sslmode=verify-full
                """)
        }
        if query["sslcert"] != nil || query["sslkey"] != nil {
            throw NudgeError(.configuration, "DATABASE_URL: client certificates (sslcert, sslkey) are not supported")
        }
        for file in [rootCertificate, self.extraTrustedRoots].compactMap({ $0 }) where file != "system" {
            guard FileManager.default.isReadableFile(atPath: file) else {
                throw NudgeError(.configuration, "cannot read the trusted root certificates in \(file)")
            }
        }
        if case .tcp(let host, _) = endpoint, password?.isEmpty == false, !Self.isLoopback(host), !verifiesServer,
            !allowInsecurePassword
        {
            throw NudgeError(
                .configuration,
                """
                DATABASE_URL: the password would be given to \(host) without verifying that it is the server: with \
                sslmode=\(mode.rawValue)\(rootCertificate == nil ? "" : " and sslrootcert") anyone between Nudge and it can \
                decline TLS or show any certificate and ask for the password in clear text; use \
                sslmode=verify-full&sslrootcert=system (a server whose certificate a public authority issued) or \
                sslmode=verify-full&sslrootcert=/path/to/its-root.crt, or set NUDGE_DB_ALLOW_INSECURE_PASSWORD=true \
                to accept that risk
                """)
        }
    }

    /// Whether every connection checks the server's certificate against trusted roots (libpq's
    /// `require` with `sslrootcert` is `verify-ca`).
    public var verifiesServer: Bool {
        switch tlsMode {
        case .verifyCA, .verifyFull: true
        case .require: rootCertificate != nil
        case .disable, .allow, .prefer: false
        }
    }

    /// A host that is this machine: `localhost`, `127.0.0.0/8`, `::1`.
    static func isLoopback(_ host: String) -> Bool {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if bare.lowercased() == "localhost" || bare == "::1" { return true }
        let octets = bare.split(separator: ".", omittingEmptySubsequences: false)
        return octets.count == 4 && octets.first == "127" && octets.allSatisfy { UInt8($0) != nil }
    }

    /// Where the database is, without the password: safe for logs and error messages.
    public var description: String {
        switch endpoint {
        case .tcp(let host, let port): "\(username)@\(host):\(port)/\(database)"
        case .unixSocket(let path): "\(username)@\(path)/\(database)"
        }
    }

    /// What the connection checks of the server's certificate, by `sslmode`.
    /// As libpq: a root certificate given (`sslrootcert`) is checked in every mode that uses TLS.
    var certificateVerification: CertificateVerification {
        switch tlsMode {
        case .disable, .allow, .prefer, .require: rootCertificate == nil ? .none : .noHostnameVerification
        case .verifyCA: .noHostnameVerification
        case .verifyFull: .fullVerification
        }
    }

    var tlsConfiguration: TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.certificateVerification = certificateVerification
        // A connection Nudge gives up on closes within a second: the TLS goodbye a silent server
        // never answers is not awaited for the default five (`Database.answer` waits for the close).
        configuration.shutdownTimeout = .seconds(1)
        if let rootCertificate {
            if rootCertificate != "system" { configuration.trustRoots = .file(rootCertificate) }
        } else if let extraTrustedRoots {
            configuration.trustRoots = .file(extraTrustedRoots)
        }
        return configuration
    }

    /// The pool's configuration. Every session the pool opens tells the server who it is
    /// (`application_name`), bounds each statement (`statement_timeout`, also for a transaction
    /// left idle) and has the server probe a silent client (TCP keepalive), so that a run cut off
    /// from its client frees its locks within a minute.
    public func clientConfiguration(
        applicationName: String, statementTimeout: Duration?,
        connections: Int = 4
    ) -> PostgresClient.Configuration {
        var configuration: PostgresClient.Configuration
        switch endpoint {
        case .tcp(let host, let port):
            let tls: PostgresClient.Configuration.TLS =
                switch tlsMode {
                case .disable: .disable
                case .allow, .prefer: .prefer(tlsConfiguration)
                case .require, .verifyCA, .verifyFull: .require(tlsConfiguration)
                }
            configuration = .init(
                host: host, port: port, username: username, password: password,
                database: database, tls: tls)
        case .unixSocket(let path):
            configuration = .init(unixSocketPath: path, username: username, password: password, database: database)
        }
        configuration.options.connectTimeout = .seconds(5)
        configuration.options.maximumConnections = max(1, connections)
        configuration.options.additionalStartupParameters = Self.sessionParameters(
            applicationName: applicationName, statementTimeout: statementTimeout)
        return configuration
    }

    /// The same settings for one connection of its own, outside the pool: the one that finds out
    /// why a server cannot be reached, which the pool keeps to itself while it retries.
    func connectionConfiguration(applicationName: String, statementTimeout: Duration?) throws -> PostgresConnection.Configuration {
        var configuration: PostgresConnection.Configuration
        switch endpoint {
        case .tcp(let host, let port):
            let tls: PostgresConnection.Configuration.TLS =
                switch tlsMode {
                case .disable: .disable
                case .allow, .prefer: .prefer(try NIOSSLContext(configuration: tlsConfiguration))
                case .require, .verifyCA, .verifyFull: .require(try NIOSSLContext(configuration: tlsConfiguration))
                }
            configuration = .init(host: host, port: port, username: username, password: password, database: database, tls: tls)
        case .unixSocket(let path):
            configuration = .init(unixSocketPath: path, username: username, password: password, database: database)
        }
        configuration.options.connectTimeout = .seconds(5)
        configuration.options.additionalStartupParameters = Self.sessionParameters(
            applicationName: applicationName, statementTimeout: statementTimeout)
        return configuration
    }

    static func sessionParameters(applicationName: String, statementTimeout: Duration?) -> [(String, String)] {
        var parameters = [
            ("application_name", String(applicationName.prefix(63))),
            // The server's side of TCP keepalive: a client gone silent is dropped after about a
            // minute, and with it the advisory lock of its run. Ignored on a Unix socket.
            ("tcp_keepalives_idle", "30"), ("tcp_keepalives_interval", "10"), ("tcp_keepalives_count", "3"),
        ]
        if let statementTimeout {
            let milliseconds = String(statementTimeout.components.seconds * 1000 + statementTimeout.components.attoseconds / 1_000_000_000_000_000)
            parameters.append(("statement_timeout", milliseconds))
            parameters.append(("idle_in_transaction_session_timeout", milliseconds))
        }
        return parameters
    }
}
