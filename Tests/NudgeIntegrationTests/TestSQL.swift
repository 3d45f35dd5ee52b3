import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// The tests' SQL: PostgreSQL's simple query protocol, spoken in this process and awaited without
/// holding a thread. A script of several statements runs as one request in one implicit
/// transaction (a failing statement undoes the others), and every value comes back as the
/// server's text, printed as `psql -At` prints it: columns joined by `|`, rows by new lines,
/// NULL as nothing. (PostgresNIO speaks only the extended protocol, one statement at a time with
/// binary values; the tests' fixtures are scripts, and their checks compare text.)
///
/// Each call runs as a session of its own would, as each psql process did: nothing a script sets
/// outlives it (`discard all` after it), and a transaction it leaves open is rolled back with its
/// session. The sessions are kept for the next call on the same database (`Idle`) instead of
/// started and ended for each, which cost the server more than most scripts; a test that needs
/// nobody else on a database (a copy, PostgreSQL's counters) closes them first (`closeIdle`).
/// They are named `test-sql` (`application_name`), and run on an event loop of their own, never
/// the stand-ins' or Nudge's.
enum TestSQL {
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    /// How long one script may take once connected before its session is closed and the test
    /// told: far above any fixture's or check's time, so that a wait that never ends (a lock a
    /// test forgot) fails its test instead of holding the run. The server bounds the statement
    /// itself a little sooner (`statement_timeout`), so that it never runs after the test gave up.
    static let bound: TimeAmount = .minutes(3)
    static let statementBound = "170s"

    /// How long a held or pinned session may stay open: longer than any test (`scripts/test`
    /// bounds the whole integration run at 35 minutes).
    static let heldBound: TimeAmount = .minutes(40)

    /// `sql` run on the database `url` names (a `postgres://user@host/db?host=SOCKET&port=N` URL,
    /// as `scripts/pg` prints; trust authentication, as the test server has on its socket).
    static func run(_ sql: String, url: String) async throws -> String {
        let wait = Waits.begin("TestSQL on \((try? Address(url).database) ?? url): \(sql.prefix(120))")
        defer { Waits.end(wait) }
        if let idle = await Idle.shared.take(url) {
            do {
                return try await run(sql, on: idle, url: url)
            } catch is SessionEnded {
                // A kept session the server ended while it waited (a test that ends every
                // session on its database), found closed as the script went, before any answer:
                // the server most likely never had it (a session ended in the middle of a script
                // rolls it back; only one ended between its commit and its answer would run it
                // twice). Once more, on a session of its own.
            }
        }
        do {
            return try await run(sql, on: try await Pinned(url: url, mode: .kept), url: url)
        } catch let ended as SessionEnded {
            throw TestFailure("SQL failed: \(ended)\n\(sql)")
        }
    }

    private static func run(_ sql: String, on session: Pinned, url: String) async throws -> String {
        let answer: (rows: String, idle: Bool)
        do {
            answer = try await session.send(sql)
        } catch let refused as Refused {
            await keepOrEnd(session, url: url, idle: session.idle)
            throw refused
        } catch {
            await session.end()
            throw error
        }
        await keepOrEnd(session, url: url, idle: answer.idle)
        return answer.rows
    }

    /// A session back to the idle ones, reset, when its script left no transaction open; ended
    /// (its transaction rolled back) when it did.
    private static func keepOrEnd(_ session: Pinned, url: String, idle: Bool) async {
        guard idle, (try? await session.send("discard all")) != nil else {
            await session.end()
            return
        }
        await Idle.shared.give(session, url: url)
    }

    /// Ends the idle sessions kept on the database `url` names, whatever their role, and returns
    /// once they are closed: before the database is copied, or its sessions' counters read.
    static func closeIdle(_ url: String) async {
        guard let database = try? Address(url).database else { return }
        let wait = Waits.begin("TestSQL: closing the idle sessions on \(database)")
        defer { Waits.end(wait) }
        let (idle, ending) = await Idle.shared.takeAll(database: database)
        for session in idle { await session.end() }
        for task in ending { await task.value }
    }

    /// The sessions `run` keeps between calls: a few, the oldest ended when there are more.
    actor Idle {
        static let shared = Idle()
        /// Few enough that, with the runs' own pools, the test server's connections suffice.
        static let most = 12
        private typealias Entry = (url: String, database: String, session: Pinned)
        private var sessions: [Entry] = []
        /// The sessions being ended (the oldest, or one the server closed), until they are:
        /// `closeIdle` waits for those on its database too.
        private var ending: [Int: (database: String, task: Task<Void, Never>)] = [:]
        private var endings = 0

        func take(_ url: String) -> Pinned? {
            let dead = sessions.filter { !$0.session.isOpen }
            sessions.removeAll { entry in dead.contains { $0.session === entry.session } }
            for entry in dead { retire(entry) }
            guard let index = sessions.lastIndex(where: { $0.url == url }) else { return nil }
            return sessions.remove(at: index).session
        }

        func give(_ session: Pinned, url: String) {
            sessions.append((url, (try? Address(url).database) ?? "", session))
            while sessions.count > Self.most { retire(sessions.removeFirst()) }
        }

        func takeAll(database: String) -> (idle: [Pinned], ending: [Task<Void, Never>]) {
            let taken = sessions.filter { $0.database == database }.map(\.session)
            sessions.removeAll { $0.database == database }
            return (taken, ending.values.filter { $0.database == database }.map(\.task))
        }

        private func retire(_ entry: Entry) {
            endings += 1
            let id = endings
            ending[id] = (
                entry.database,
                Task {
                    await entry.session.end()
                    self.ended(id)
                }
            )
        }

        private func ended(_ id: Int) { ending[id] = nil }
    }

    /// A session that has run `sql` and holds on to what it took (an advisory lock, a row lock of
    /// an open transaction) until `end()`: another program, as a test sees it.
    static func hold(_ sql: String, url: String) async throws -> Pinned {
        let session = try await Pinned(url: url, mode: .held)
        do {
            _ = try await session.run(sql)
        } catch {
            await session.end()
            throw error
        }
        return session
    }

    /// One session of the server's, whose scripts run one at a time in the order they came; every
    /// script sent after it ended is refused. What it is for is its `Mode`.
    final class Pinned: Sendable {
        enum Mode {
            /// One of the sessions `run` keeps between calls: each script bounded (`bound`, and
            /// `statementBound` on the server's side), the session named `test-sql`, and reset
            /// (`discard all`) or ended by `run` after each script.
            case kept
            /// One kept for a scenario's thousands of calls (`TestDatabase.pinned`), each run as
            /// `run` would but without a session started and ended for each; what a script sets
            /// stays for the next (a scenario does not rely on either). A script that leaves a
            /// transaction open is refused, and ends the session. Bounded by `heldBound` alone.
            case pinned
            /// One `hold` keeps: what its scripts took (an advisory lock, an open transaction's
            /// row locks) stays until `end()`. Bounded by `heldBound` alone.
            case held
        }

        private typealias Request = (sql: String, answer: CheckedContinuation<(rows: String, idle: Bool), any Error>)
        private let requests: AsyncStream<Request>.Continuation
        private let task: Task<Void, Never>
        private let mode: Mode
        private let state = State()
        /// Which database, for `Waits`.
        private let database: String

        private final class State: Sendable {
            /// Whether the server's end of the session is still there.
            let open = Mutex(true)
            /// Whether the session was in no transaction after its last script.
            let idle = Mutex(true)
        }

        init(url: String, mode: Mode) async throws {
            let (stream, requests) = AsyncStream<Request>.makeStream()
            let (ready, isReady) = AsyncThrowingStream<Void, any Error>.makeStream()
            let database = (try? Address(url).database) ?? url
            self.database = database
            self.requests = requests
            self.mode = mode
            let state = self.state
            let kept = mode == .kept
            task = Task {
                var pending: Request?
                do {
                    try await session(url, bound: heldBound, kept: kept, closed: { state.open.withLock { $0 = false } }) { session in
                        isReady.finish()
                        for await request in stream {
                            pending = request
                            do {
                                let rows = try await session.run(request.sql, within: kept ? bound : nil)
                                let idle = session.messages.transactionStatus == UInt8(ascii: "I")
                                state.idle.withLock { $0 = idle }
                                pending = nil
                                request.answer.resume(returning: (rows, idle))
                            } catch let refused as Refused {
                                let idle = session.messages.transactionStatus == UInt8(ascii: "I")
                                state.idle.withLock { $0 = idle }
                                pending = nil
                                request.answer.resume(throwing: refused)   // the session goes on, as after any refused script
                            }
                        }
                    }
                } catch {
                    isReady.finish(throwing: error)
                    pending?.answer.resume(throwing: error)
                }
                state.open.withLock { $0 = false }
                requests.finish()
                for await request in stream { request.answer.resume(throwing: TestFailure("the pinned session has ended")) }
            }
            let wait = Waits.begin("TestSQL: opening a session on \(database)")
            defer { Waits.end(wait) }
            for try await _ in ready {}
        }

        var isOpen: Bool { state.open.withLock { $0 } }

        /// Whether the session was in no transaction after its last script.
        var idle: Bool { state.idle.withLock { $0 } }

        func run(_ sql: String) async throws -> String {
            let answer = try await send(sql)
            guard answer.idle || mode == .held else {
                await end()
                throw TestFailure("a pinned session's script left a transaction open: \(sql)")
            }
            return answer.rows
        }

        /// `sql`'s rows, and whether the session is in no transaction after it.
        func send(_ sql: String) async throws -> (rows: String, idle: Bool) {
            let wait = Waits.begin("TestSQL: a session on \(database) running \(sql.prefix(120))")
            defer { Waits.end(wait) }
            return try await withCheckedThrowingContinuation { answer in
                if case .terminated = requests.yield((sql, answer)) {
                    answer.resume(throwing: TestFailure("the pinned session has ended"))
                }
            }
        }

        /// Ends the session once the scripts sent before have run, and returns once it is closed
        /// (its locks released).
        func end() async {
            let wait = Waits.begin("TestSQL: ending a session on \(database)")
            defer { Waits.end(wait) }
            requests.finish()
            await task.value
        }
    }

    /// A session of its own for `body`, closed after it (and after `bound` whatever happens).
    /// `kept`: bounded statements (`statementBound`) and the name `test-sql`; `closed` is told when
    /// the session's connection closes, from either end.
    static func session<T: Sendable>(
        _ url: String, bound: TimeAmount = bound, kept: Bool = false,
        closed: (@Sendable () -> Void)? = nil,
        _ body: (inout Session) async throws -> T
    ) async throws -> T {
        let address = try Address(url)
        let channel = try await ClientBootstrap(group: group)
            .connectTimeout(.seconds(10))
            .connect(to: address.socket) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        if let closed { channel.channel.closeFuture.whenComplete { _ in closed() } }
        let timer = channel.channel.eventLoop.scheduleTask(in: bound) { channel.channel.close(promise: nil) }
        defer { timer.cancel() }
        return try await channel.executeThenClose { inbound, outbound in
            var session = Session(messages: Messages(inbound.makeAsyncIterator()), outbound: outbound, channel: channel.channel)
            try await outbound.write(
                Self.startup(
                    user: address.user, database: address.database,
                    options: bound == Self.bound || kept ? "-c statement_timeout=\(statementBound)" : nil,
                    name: kept ? "test-sql" : nil))
            // Opening the session is bounded like a script.
            let opening = channel.channel.eventLoop.scheduleTask(in: Self.bound) { channel.channel.close(promise: nil) }
            do {
                try await session.messages.untilReady()
                opening.cancel()
            } catch let failure as SQLFailure {
                opening.cancel()
                throw TestFailure("could not open a session on \(address.database): \(failure.message)")
            } catch {
                opening.cancel()
                throw TestFailure("could not open a session on \(address.database): \(error)")
            }
            let value = try await body(&session)
            // Terminate, and wait for the server to close: its session has then ended, its locks
            // gone with it (a database it was on can be copied at once).
            try? await outbound.write(ByteBuffer(bytes: [UInt8(ascii: "X"), 0, 0, 0, 4]))
            while (try? await session.messages.inbound.next()) != nil {}
            return value
        }
    }

    /// One open session.
    struct Session {
        fileprivate var messages: Messages
        fileprivate let outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>
        fileprivate let channel: any Channel

        /// `sql`'s rows, as `psql -At` prints them; a `Refused` with the server's error. With a
        /// `bound`, a script that has no answer by then closes the session and fails its test.
        mutating func run(_ sql: String, within bound: TimeAmount? = nil) async throws -> String {
            guard !sql.utf8.contains(0) else { throw TestFailure("SQL with a NUL byte cannot be sent: \(sql)") }
            let channel = self.channel
            let late = Late()
            let timer = bound.map { bound in
                channel.eventLoop.scheduleTask(in: bound) {
                    late.passed.withLock { $0 = true }
                    channel.close(promise: nil)
                }
            }
            defer { timer?.cancel() }
            do {
                try await outbound.write(TestSQL.query(sql))
            } catch {
                throw SessionEnded()   // the connection was closed already
            }
            do {
                return try await messages.results()
            } catch let failure as SQLFailure {
                throw Refused(message: failure.message, sql: sql)
            } catch let ended as SessionEnded {
                if late.passed.withLock({ $0 }) { throw TestFailure("SQL failed: no answer within TestSQL's bound (\(bound!))\n\(sql)") }
                throw ended
            } catch {
                throw TestFailure("SQL failed: \(error)\n\(sql)")
            }
        }
    }

    /// Whether a script's bound passed.
    private final class Late: Sendable {
        let passed = Mutex(false)
    }

    /// The session's connection closed before the server answered.
    struct SessionEnded: Error, CustomStringConvertible {
        var description: String { "the session ended before the server's answer (closed by the server, or by TestSQL's bound)" }
    }

    /// The server refused a script: its error as psql prints it, and the script.
    struct Refused: Error, CustomStringConvertible {
        let message: String
        let sql: String

        var description: String { "SQL failed: \(message)\n\(sql)" }
    }

    /// Where a test URL points.
    struct Address {
        let socket: SocketAddress
        let user: String
        let database: String

        init(_ url: String) throws {
            guard let parts = URLComponents(string: url), let user = parts.user else {
                throw TestFailure("not a test database URL: \(url)")
            }
            let query = Dictionary((parts.queryItems ?? []).map { ($0.name, $0.value ?? "") }) { _, last in last }
            let port = Int(query["port"] ?? "") ?? parts.port ?? 5432
            if let folder = query["host"], folder.hasPrefix("/") {
                socket = try SocketAddress(unixDomainSocketPath: "\(folder)/.s.PGSQL.\(port)")
            } else {
                // An address, never a name to look up: a lookup would block the caller's thread.
                let host = query["host"] ?? parts.host ?? "localhost"
                socket = try SocketAddress(ipAddress: host == "localhost" ? "127.0.0.1" : host, port: port)
            }
            self.user = user
            let path = parts.path.hasPrefix("/") ? String(parts.path.dropFirst()) : parts.path
            database = path.isEmpty ? self.user : path
        }
    }

    static func startup(user: String, database: String, options: String?, name: String?) -> ByteBuffer {
        var body = ByteBuffer()
        body.writeInteger(Int32(196_608))   // protocol 3.0
        var parameters = [("user", user), ("database", database), ("client_encoding", "UTF8")]
        if let options { parameters.append(("options", options)) }
        if let name { parameters.append(("application_name", name)) }
        for (key, value) in parameters {
            body.writeNullTerminatedString(key)
            body.writeNullTerminatedString(value)
        }
        body.writeInteger(UInt8(0))
        var message = ByteBuffer()
        message.writeInteger(Int32(body.readableBytes + 4))
        message.writeBuffer(&body)
        return message
    }

    static func query(_ sql: String) -> ByteBuffer {
        var message = ByteBuffer()
        message.writeInteger(UInt8(ascii: "Q"))
        message.writeInteger(Int32(sql.utf8.count + 5))
        message.writeNullTerminatedString(sql)
        return message
    }

    /// An error the server sent, as psql prints it.
    struct SQLFailure: Error {
        let message: String

        init(_ body: ByteBuffer) {
            var body = body
            var fields: [UInt8: String] = [:]
            while let code = body.readInteger(as: UInt8.self), code != 0, let value = body.readNullTerminatedString() {
                fields[code] = value
            }
            var lines = ["\(fields[UInt8(ascii: "S")] ?? "ERROR"):  \(fields[UInt8(ascii: "M")] ?? "")"]
            for (code, label) in [("D", "DETAIL"), ("H", "HINT"), ("W", "CONTEXT")] {
                if let value = fields[UInt8(ascii: Unicode.Scalar(code)!)] { lines.append("\(label):  \(value)") }
            }
            message = lines.joined(separator: "\n")
        }
    }

    /// The backend's messages, one at a time, however the bytes arrived.
    struct Messages {
        var inbound: NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator
        var buffer = ByteBuffer()
        /// The session's state at the last ReadyForQuery: `I` idle, `T` in a transaction, `E` in a failed one.
        var transactionStatus: UInt8 = UInt8(ascii: "I")

        init(_ inbound: NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator) { self.inbound = inbound }

        mutating func next() async throws -> (type: UInt8, body: ByteBuffer) {
            while true {
                if buffer.readableBytes >= 5, let length = buffer.getInteger(at: buffer.readerIndex + 1, as: Int32.self) {
                    guard length >= 4 else { throw TestFailure("the server sent a message of length \(length)") }
                    if buffer.readableBytes >= 1 + Int(length) {
                        let type = buffer.readInteger(as: UInt8.self)!
                        buffer.moveReaderIndex(forwardBy: 4)
                        let body = buffer.readSlice(length: Int(length) - 4)!
                        return (type, body)
                    }
                }
                let read: ByteBuffer?
                do {
                    read = try await inbound.next()
                } catch {
                    throw SessionEnded()   // reset by the server
                }
                guard var more = read else { throw SessionEnded() }
                buffer.discardReadBytes()
                buffer.writeBuffer(&more)
            }
        }

        /// Authentication (the test server trusts its socket) and the session's parameters.
        mutating func untilReady() async throws {
            while true {
                let (type, body) = try await next()
                switch type {
                case UInt8(ascii: "R"):
                    guard body.getInteger(at: body.readerIndex, as: Int32.self) == 0 else {
                        throw TestFailure("the test server asks a password of this role: TestSQL speaks trust only")
                    }
                case UInt8(ascii: "E"): throw SQLFailure(body)
                case UInt8(ascii: "Z"): return
                default: continue   // parameter status, key data, notices
                }
            }
        }

        /// Every row of every statement's result, as `psql -At` prints them; the server's error,
        /// when a statement failed, once it is ready again.
        mutating func results() async throws -> String {
            var rows: [String] = []
            var failure: SQLFailure?
            while true {
                var (type, body) = try await next()
                switch type {
                case UInt8(ascii: "D"):
                    let columns = Int(body.readInteger(as: Int16.self) ?? 0)
                    var values: [String] = []
                    values.reserveCapacity(columns)
                    for _ in 0..<columns {
                        let length = Int(body.readInteger(as: Int32.self) ?? -1)
                        values.append(length < 0 ? "" : body.readString(length: length) ?? "")
                    }
                    rows.append(values.joined(separator: "|"))
                case UInt8(ascii: "E"): failure = SQLFailure(body)
                case UInt8(ascii: "Z"):
                    transactionStatus = body.readInteger(as: UInt8.self) ?? UInt8(ascii: "I")
                    if let failure { throw failure }
                    return rows.joined(separator: "\n")
                case UInt8(ascii: "G"), UInt8(ascii: "H"):
                    throw TestFailure("COPY from or to the client: run it as a psql script (TestDatabase.runScript)")
                default: continue   // row descriptions, command tags, notices
                }
            }
        }
    }
}
