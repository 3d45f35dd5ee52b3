import Foundation
import Testing

/// A server posing as PostgreSQL, as anyone between Nudge and its database could: it declines
/// TLS, or accepts it with a self-signed certificate, and asks for the password in clear text.
/// It writes what it was told, one line a message, to `events`.
private let fakePostgres = #"""
    import socket, ssl, struct, sys
    host, mode, portfile, events, cert, key = sys.argv[1:7]
    def note(line):
        with open(events, "a") as f:
            f.write(line + "\n")
    def read(conn, n):
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, 0))
    server.listen(8)
    with open(portfile, "w") as f:
        f.write(str(server.getsockname()[1]) + "\n")
    while True:
        conn, _ = server.accept()
        conn.settimeout(10)
        try:
            note("connected")
            length, code = struct.unpack("!ii", read(conn, 8))
            if code == 80877103:
                if mode == "tls":
                    conn.sendall(b"S")
                    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                    context.load_cert_chain(cert, key)
                    try:
                        conn = context.wrap_socket(conn, server_side=True)
                    except Exception as error:
                        note("handshake failed")
                        continue
                    note("tls")
                else:
                    conn.sendall(b"N")
                length = struct.unpack("!i", read(conn, 4))[0]
                read(conn, length - 4)
            else:
                read(conn, length - 8)
            note("startup")
            conn.sendall(b"R" + struct.pack("!ii", 8, 3))
            kind = read(conn, 1)
            length = struct.unpack("!i", read(conn, 4))[0]
            body = read(conn, length - 4)
            if kind == b"p":
                note("password " + body.rstrip(b"\0").decode())
            fields = b"SFATAL\0C28P01\0Mpassword authentication failed\0\0"
            conn.sendall(b"E" + struct.pack("!i", len(fields) + 4) + fields)
        except Exception as error:
            note("ended: " + type(error).__name__)
        finally:
            conn.close()
    """#

/// One fake server on an address of this machine's that is not loopback.
private struct FakePostgres {
    let host: String
    let port: Int
    let events: URL
    let process: RunningProcess

    /// `mode`: `decline` (answers the TLS request with N) or `tls` (a self-signed certificate).
    static func start(_ mode: String) async throws -> FakePostgres {
        let host = try await outsideAddress()
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nudge-fake-pg-\(UUID())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let cert = folder.appendingPathComponent("server.crt").path
        let key = folder.appendingPathComponent("server.key").path
        let made = try await runProcessOffThePool(
            "/usr/bin/openssl",
            [
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-subj", "/CN=\(host)", "-addext", "subjectAltName=IP:\(host)", "-days", "1",
                "-keyout", key, "-out", cert,
            ])
        #expect(made.status == 0, "\(made.stderr)")
        let script = folder.appendingPathComponent("fake.py")
        try Data(fakePostgres.utf8).write(to: script)
        let portFile = try ReadyPipe(in: folder)
        let events = folder.appendingPathComponent("events")
        let process = try RunningProcess(
            "/usr/bin/env", ["python3", script.path, host, mode, portFile.path, events.path, cert, key],
            environment: ProcessInfo.processInfo.environment)
        let port = try #require(Int(try await portFile.message("the fake server's port", from: process)))
        return FakePostgres(host: host, port: port, events: events, process: process)
    }

    var told: String { (try? String(contentsOf: events, encoding: .utf8)) ?? "" }

    func stop() {
        // SIGKILL: the test process ignores SIGTERM, and its children inherit that.
        process.signal(SIGKILL)
        let process = process
        Task { _ = await process.finished() }   // its output files go with it
    }
}

/// The database password stays secret: PostgresNIO gives it to any server that asks for it in
/// clear text, so Nudge never lets a server it has not verified ask (docs/operations.md,
/// "Configuration").
@Suite(.dropsItsDatabases) struct DatabasePasswordTests {
    private static let password = "pw-\(UUID().uuidString.prefix(8))"

    @Test(arguments: [("decline", ""), ("decline", "?sslmode=prefer"), ("tls", "?sslmode=require"), ("decline", "?sslmode=allow")])
    func aServerNotVerifiedIsNeverGivenThePassword(_ mode: String, _ query: String) async throws {
        let fake = try await FakePostgres.start(mode)
        defer { fake.stop() }
        let database = try await TestDatabase.fresh(migrated: false)
        let result = try await database.nudge(
            ["runs"],
            environment: [
                "DATABASE_URL": "postgres://nudge:\(Self.password)@\(fake.host):\(fake.port)/nudge\(query)"
            ])
        #expect(result.status == 1)
        #expect(result.stderr.contains("without verifying that it is the server"), "\(result.stderr)")
        #expect(result.stderr.contains("sslmode=verify-full&sslrootcert=system"))
        #expect(result.stderr.contains("NUDGE_DB_ALLOW_INSECURE_PASSWORD"))
        #expect(!result.stderr.contains(Self.password))
        #expect(!fake.told.contains("password"), "\(fake.told)")
    }

    /// The same server, verified with a root it does not have, ends in the handshake; and the
    /// fake does catch a password when the operator has accepted the risk.
    @Test func aVerifyingConnectionFailsItsHandshakeAndTheRiskCanBeAccepted() async throws {
        let tlsFake = try await FakePostgres.start("tls")
        defer { tlsFake.stop() }
        let otherRoot = try TLSServer().certificate
        let database = try await TestDatabase.fresh(migrated: false)
        let verified = try await database.nudge(
            ["runs"],
            environment: [
                "DATABASE_URL": "postgres://nudge:\(Self.password)@\(tlsFake.host):\(tlsFake.port)/nudge?sslmode=verify-full&sslrootcert=\(otherRoot)"
            ])
        #expect(verified.status == 1)
        #expect(verified.stderr.contains("the server's certificate could not be verified"), "\(verified.stderr)")
        #expect(!tlsFake.told.contains("password"), "\(tlsFake.told)")

        let fake = try await FakePostgres.start("decline")
        defer { fake.stop() }
        let accepted = try await database.nudge(
            ["runs"],
            environment: [
                "DATABASE_URL": "postgres://nudge:\(Self.password)@\(fake.host):\(fake.port)/nudge?sslmode=prefer",
                "NUDGE_DB_ALLOW_INSECURE_PASSWORD": "true",
            ])
        #expect(accepted.status == 1)
        #expect(fake.told.contains("password \(Self.password)"), "\(fake.told)")
        #expect(!accepted.stderr.contains(Self.password))
    }
}
