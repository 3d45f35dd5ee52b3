import Foundation
import Logging
import PostgresNIO
import Synchronization

/// A short-lived credential a provider wants on every request: the APNs provider token (a JWT),
/// the FCM OAuth2 access token.
public struct ProviderToken: Sendable, Equatable {
    public let value: String
    public let issuedAt: Date
    public let expiresAt: Date

    public init(value: String, issuedAt: Date, expiresAt: Date) {
        self.value = value
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
    }
}

/// Keeps one provider's current token for every dispatcher: in memory while it is fresh, and in
/// `provider_tokens` (sealed) so that the next process, which cron starts a minute later, reuses
/// it instead of minting its own. A token is minted under the row's lock, so two dispatchers
/// starting together mint one between them; within a process, concurrent requests wait for the
/// same mint.
public actor ProviderTokenStore {
    public let provider: String
    /// Which key the token belongs to (never the key itself).
    public let credential: String
    /// A token older than this is renewed (APNs: between 20 and 60 minutes).
    let renewAfter: TimeInterval
    /// A token is never renewed before it is this old, even when the provider calls it expired:
    /// APNs answers `TooManyProviderTokenUpdates` to more than one new token in 20 minutes.
    let keepAtLeast: TimeInterval
    private let seal: TokenSeal
    private let clock: any RunClock
    private let mint: @Sendable (Date) async throws -> ProviderToken
    private var minting: Task<ProviderToken, any Error>?

    /// The token in use and those the provider refused (never reused, from memory or from the
    /// database): read by every send without a hop to the actor.
    private struct Held {
        var current: ProviderToken?
        var refused: Set<String> = []
    }
    private nonisolated let held = Mutex(Held())

    /// `mint` makes a new token at the instant it is given.
    public init(
        provider: String, credential: String, secret: Data, renewAfter: TimeInterval, keepAtLeast: TimeInterval = 0,
        clock: any RunClock = SystemClock(), mint: @escaping @Sendable (Date) async throws -> ProviderToken
    ) {
        self.provider = provider
        self.credential = credential
        self.renewAfter = renewAfter
        self.keepAtLeast = keepAtLeast
        self.seal = TokenSeal(secret: secret, label: "\(provider):\(credential)")
        self.clock = clock
        self.mint = mint
    }

    /// How many tokens this store has minted (for a run's summary and the tests).
    public private(set) var minted = 0

    /// The token to send now: the one in memory while it is fresh, without waiting on anything.
    public nonisolated func token(database: Database?, logger: Logger) async throws -> String {
        let now = clock.now()
        if let current = held.withLock({ $0.current }), isFresh(current, at: now) { return current.value }
        return try await renewed(database: database, logger: logger)
    }

    /// A fresh token, one mint at a time for the process.
    private func renewed(database: Database?, logger: Logger) async throws -> String {
        if let current = held.withLock({ $0.current }), isFresh(current, at: clock.now()) { return current.value }
        if let minting { return try await minting.value.value }
        let task = Task { try await self.obtain(database: database, logger: logger) }
        minting = task
        defer { minting = nil }
        let token = try await task.value
        held.withLock { $0.current = token }
        return token.value
    }

    /// The provider refused `token` as expired: whether a new one may be made now (false: it is
    /// too young to replace, and the refusal says the clock or the key is wrong).
    public func refuse(_ token: String) -> Bool {
        let now = clock.now()
        return held.withLock { held in
            guard let current = held.current, current.value == token else { return true }
            guard now.timeIntervalSince(current.issuedAt) >= keepAtLeast else { return false }
            held.refused.insert(token)
            held.current = nil
            return true
        }
    }

    private nonisolated func isFresh(_ token: ProviderToken, at now: Date) -> Bool {
        !held.withLock { $0.refused.contains(token.value) } && now.timeIntervalSince(token.issuedAt) < renewAfter
            && token.issuedAt <= now.addingTimeInterval(300) && token.expiresAt > now
    }

    private func obtain(database: Database?, logger: Logger) async throws -> ProviderToken {
        guard let database else {
            minted += 1
            return try await mint(clock.now())
        }
        let provider = self.provider
        let credential = self.credential
        let seal = self.seal
        return try await database.withConnection { connection in
            try await database.bounded(connection, statements: 5) {
                try await connection.query("begin", logger: logger)
                do {
                    let token = try await self.obtainLocked(
                        on: connection, provider: provider, credential: credential,
                        seal: seal, logger: logger)
                    try await connection.query("commit", logger: logger)
                    return token
                } catch {
                    _ = try? await connection.query("rollback", logger: logger)
                    throw error
                }
            }
        }
    }

    private func obtainLocked(
        on connection: PostgresConnection, provider: String, credential: String, seal: TokenSeal,
        logger: Logger
    ) async throws -> ProviderToken {
        try await connection.query(
            """
            insert into provider_tokens (provider, credential, sealed_token, issued_at, expires_at)
            values (\(provider), \(credential), ''::bytea, 'epoch', 'epoch')
            on conflict (provider, credential) do nothing
            """, logger: logger)
        let rows = try await connection.query(
            """
            select sealed_token, issued_at, expires_at from provider_tokens
             where provider = \(provider) and credential = \(credential) for update
            """, logger: logger)
        var stored: ProviderToken?
        for try await (sealed, issuedAt, expiresAt) in rows.decode((ByteBuffer, Date, Date).self) {
            if let value = seal.open(Data(sealed.readableBytesView)) {
                stored = ProviderToken(value: value, issuedAt: issuedAt, expiresAt: expiresAt)
            }
        }
        let now = clock.now()
        if let stored, isFresh(stored, at: now) { return stored }
        let token = try await mint(now)
        minted += 1
        try await connection.query(
            """
            update provider_tokens set sealed_token = \(ByteBuffer(bytes: try seal.seal(token.value))),
                   issued_at = \(token.issuedAt), expires_at = \(token.expiresAt)
             where provider = \(provider) and credential = \(credential)
            """, logger: logger)
        logger.info("minted a provider token", metadata: ["nudge.provider": "\(provider)"])
        return token
    }
}

/// A provider's token for one request, or why there is none, as a send or a probe tells it.
public enum FetchedToken: Sendable {
    case token(String)
    /// The key, or the service account, was refused (a deleted key, `invalid_grant`): a
    /// configuration error, which pauses the provider.
    case refused(String)
    /// The token store's database, or a token endpoint that timed out or answered 5xx: a passing
    /// trouble, tried again like any unanswered send.
    case unavailable(String)
}

extension ProviderTokenStore {
    /// `token`, its failure in words: "could not `what`: …" (`what`: "make the APNs provider
    /// token", "get an FCM access token").
    public nonisolated func fetch(_ what: String, context: SendContext) async -> FetchedToken {
        do {
            return .token(try await token(database: context.database, logger: context.logger))
        } catch let error as NudgeError where error.kind == .configuration {
            return .refused("could not \(what): \(error)")
        } catch {
            return .unavailable("could not \(what): \(describe(error))")
        }
    }
}
