import Foundation
import Synchronization
import Testing

/// Every suite of these tests carries this trait: the databases a test makes (`TestDatabase.fresh`,
/// `clone`) are dropped when it ends, passed or failed, so that a run of 240 tests leaves the
/// server as it found it, not with 300 copies of the schema for its catalog and its disk to carry.
/// A database a test hands to something that outlives it (a server task it cancels on the way
/// out) is dropped with `(force)`: its sessions are ended with it. One several tests share (made
/// once, copied by each) is made outside any test's count: `MadeDatabases.$current.withValue(nil)`.
struct DropsItsDatabases: SuiteTrait, TestTrait, TestScoping {
    var isRecursive: Bool { true }

    /// Once per test case, never around a whole suite.
    func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        test.isSuite || testCase == nil ? nil : self
    }

    func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        let made = MadeDatabases()
        do {
            try await MadeDatabases.$current.withValue(made) { try await function() }
        } catch {
            await made.drop()
            throw error
        }
        await made.drop()
    }
}

extension Trait where Self == DropsItsDatabases {
    /// The databases a test makes are dropped when it ends.
    static var dropsItsDatabases: Self { DropsItsDatabases() }
}

/// The databases made by the test in progress (a task-local value, so that a test's own tasks
/// add to it too).
final class MadeDatabases: Sendable {
    @TaskLocal static var current: MadeDatabases?

    private let names = Mutex<[String]>([])

    /// Notes `name` as the current test's, to be dropped when it ends; outside a test with the
    /// trait, nothing.
    static func note(_ name: String) {
        current?.names.withLock { $0.append(name) }
    }

    /// Drops each, its idle test sessions closed first and any other session ended. A database
    /// that cannot be dropped is said on standard error, never a failure of the test that is
    /// over.
    func drop() async {
        let names = self.names.withLock { names in
            defer { names = [] }
            return names
        }
        guard let admin = try? TestDatabase(named: "postgres") else { return }
        for name in names {
            if let database = try? TestDatabase(named: name) { await TestSQL.closeIdle(database.url) }
            do {
                try await admin.psql("drop database if exists \(name) with (force)")
            } catch {
                FileHandle.standardError.write(Data("could not drop the test database \(name): \(error)\n".utf8))
            }
        }
    }
}

extension TestServer {
    /// The migrated database the tests of the rolled-back tier share (`TestDatabase.rolledBack`):
    /// made once, by the first to ask, and no test's to drop.
    static let shared = Shared()

    /// How many rolled-back tests hold a session at once: a parameterized one starts all its
    /// cases together.
    static let rolledBackSlots = ProcessSlots(count: 4)

    actor Shared {
        private var creation: Task<TestDatabase, any Error>?

        func database() async throws -> TestDatabase {
            let creation =
                self.creation
                ?? Task { try await MadeDatabases.$current.withValue(nil) { try TestDatabase(named: try await TestServer.warm.take()) } }
            self.creation = creation
            return try await creation.value
        }
    }

    /// Migrated databases made ahead of the tests that ask for one, copied from the template in
    /// the background a few at a time: `TestDatabase.fresh` takes one that is ready, and the next
    /// is begun at once, so that a test seldom waits for its copy.
    static let warm = Warm(keep: 2)

    actor Warm {
        private let keep: Int
        private var ready: [String] = []
        private var making = 0

        init(keep: Int) { self.keep = keep }

        /// A migrated database of its own for the caller.
        func take() async throws -> String {
            defer { refill() }
            if !ready.isEmpty { return ready.removeFirst() }
            return try await Self.copyOfTheTemplate()
        }

        private func refill() {
            while ready.count + making < keep {
                making += 1
                Task {
                    let made = try? await Self.copyOfTheTemplate()
                    self.made(made)
                }
            }
        }

        private func made(_ name: String?) {
            making -= 1
            if let name { ready.append(name) }
        }

        /// A new copy of the migrated template, made while one of the harness's process slots is
        /// held: at the start of a run, forty suites ask at once, each copy taking up to a
        /// second, and all at once they would load the machine as much.
        private static func copyOfTheTemplate() async throws -> String {
            let name = "nudge_t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16).lowercased()
            let template = try await TestServer.template.ensure()
            let slot = await ProcessSlots.shared.acquire("create database \(name)")
            defer { Task { await ProcessSlots.shared.release(slot) } }
            await TestSQL.closeIdle(try TestDatabase(named: template).url)
            try await TestDatabase(named: "postgres").psql("create database \(name) template \(template)")
            return name
        }
    }
}
