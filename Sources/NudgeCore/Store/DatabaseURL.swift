import Foundation
import PostgresNIO

/// A `postgres://` URL, as libpq reads it: `postgres://user:password@host:port/database`, or a
/// Unix socket with `?host=/socket/folder&port=5432`, and `sslmode` disable / prefer / require.
public struct DatabaseURL: Sendable, CustomStringConvertible {
    public enum Endpoint: Sendable, Equatable {
        case tcp(host: String, port: Int)
        /// The socket file itself (`<folder>/.s.PGSQL.<port>`), as PostgresClient wants it.
        case unixSocket(path: String)
    }

    public enum TLSMode: String, Sendable {
        case disable, prefer, require
    }

    public let endpoint: Endpoint
    public let username: String
    public let password: String?
    public let database: String
    public let tlsMode: TLSMode

    public init(_ text: String) throws(NudgeError) {
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
            endpoint = .tcp(host: components.host.flatMap { $0.isEmpty ? nil : $0 } ?? "localhost", port: port)
        }
        username = components.user.flatMap { $0.removingPercentEncoding } ?? "postgres"
        password = components.password.flatMap { $0.removingPercentEncoding }
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        database = path.isEmpty ? username : path
        guard let mode = TLSMode(rawValue: query["sslmode"] ?? "prefer") ?? (query["sslmode"] == "allow" ? .prefer : nil) else {
            throw NudgeError(.configuration, "DATABASE_URL: sslmode must be disable, prefer or require")
        }
        tlsMode = mode
    }

    /// Where the database is, without the password: safe for logs and error messages.
    public var description: String {
        switch endpoint {
        case .tcp(let host, let port): "\(username)@\(host):\(port)/\(database)"
        case .unixSocket(let path): "\(username)@\(path)/\(database)"
        }
    }

    public var clientConfiguration: PostgresClient.Configuration {
        var configuration: PostgresClient.Configuration
        switch endpoint {
        case .tcp(let host, let port):
            let tls: PostgresClient.Configuration.TLS = switch tlsMode {
            case .disable: .disable
            case .prefer: .prefer(.makeClientConfiguration())
            case .require: .require(.makeClientConfiguration())
            }
            configuration = .init(host: host, port: port, username: username, password: password,
                                  database: database, tls: tls)
        case .unixSocket(let path):
            configuration = .init(unixSocketPath: path, username: username, password: password, database: database)
        }
        configuration.options.connectTimeout = .seconds(5)
        configuration.options.maximumConnections = 4
        return configuration
    }
}
