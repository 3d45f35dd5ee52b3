import Crypto
import CryptoExtras
import Foundation
import Testing

@testable import NudgeCore

/// The provider tokens Nudge signs, checked by a reference implementation: PyJWT (scripts/test
/// installs it) verifies each signature with the public key and reads the claims back.
@Suite struct ProviderTokenTests {
    private func pyjwt(_ token: String, publicKeyPEM: String, algorithm: String, audience: String? = nil) async throws -> [String: Any] {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nudge-jwt-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        try Data(publicKeyPEM.utf8).write(to: folder.appendingPathComponent("key.pem"))
        try Data(token.utf8).write(to: folder.appendingPathComponent("token"))
        let script = """
            import json, sys, jwt
            key = open(sys.argv[1] + '/key.pem').read()
            token = open(sys.argv[1] + '/token').read()
            header = jwt.get_unverified_header(token)
            claims = jwt.decode(token, key, algorithms=[sys.argv[2]], audience=sys.argv[3] or None,
                                options={'verify_exp': False, 'verify_iat': False})
            print(json.dumps({'header': header, 'claims': claims, 'iat_is_int': isinstance(claims['iat'], int)}))
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script, folder.path, algorithm, audience ?? ""]
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        // Awaited, not waited for: a test holds none of Swift's few cooperative threads.
        try await withCheckedThrowingContinuation { (ended: CheckedContinuation<Void, any Error>) in
            process.terminationHandler = { _ in ended.resume() }
            do { try process.run() } catch { ended.resume(throwing: error) }
        }
        let output = out.fileHandleForReading.readDataToEndOfFile()   // blocks: no longer than reading what an ended process wrote
        guard process.terminationStatus == 0, let object = try JSONSerialization.jsonObject(with: output) as? [String: Any] else {
            throw ProviderTokenFailure(String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self))   // blocks: as above
        }
        return object
    }

    @Test func theAPNsProviderTokenIsAnES256JWTWithAnIntegerIat() async throws {
        let key = P256.Signing.PrivateKey()
        let token = try JWT.sign(
            header: [("kid", JWT.string("ABC123DEFG"))],
            claims: [("iss", JWT.string("TEAM123456")), ("iat", "1773144000")], key: .es256(key))
        let checked = try await pyjwt(token, publicKeyPEM: key.publicKey.pemRepresentation, algorithm: "ES256")
        #expect((checked["header"] as? [String: String]) == ["alg": "ES256", "kid": "ABC123DEFG"])
        #expect((checked["claims"] as? [String: Any])?["iss"] as? String == "TEAM123456")
        #expect(checked["iat_is_int"] as? Bool == true)
    }

    @Test func theFCMGrantIsAnRS256JWTForTheTokenEndpoint() async throws {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let token = try JWT.sign(
            header: [("typ", JWT.string("JWT")), ("kid", JWT.string("key-1"))],
            claims: [
                ("iss", JWT.string("dispatch@p.iam.gserviceaccount.com")),
                ("scope", JWT.string(FCMConfiguration.scope)),
                ("aud", JWT.string("https://oauth2.googleapis.com/token")),
                ("iat", "1773144000"), ("exp", "1773147600"),
            ], key: .rs256(key))
        let checked = try await pyjwt(
            token, publicKeyPEM: key.publicKey.pemRepresentation, algorithm: "RS256",
            audience: "https://oauth2.googleapis.com/token")
        let claims = try #require(checked["claims"] as? [String: Any])
        #expect(claims["scope"] as? String == "https://www.googleapis.com/auth/firebase.messaging")
        #expect(claims["exp"] as? Int == 1_773_147_600)
        #expect((checked["header"] as? [String: String])?["alg"] == "RS256")
    }

    /// A stored token is sealed under the provider's key: the table alone opens nothing, and a
    /// rotated key simply fails to open the old token.
    @Test func aSealedTokenOpensOnlyWithItsKey() throws {
        // Throw-away keys, made for this run, as the provider's key would be given (PEM text).
        let key = Data(P256.Signing.PrivateKey().pemRepresentation.utf8)
        let rotated = Data(P256.Signing.PrivateKey().pemRepresentation.utf8)
        let seal = TokenSeal(secret: key, label: "apns:TEAM.KEY")
        let sealed = try seal.seal("eyJhbGciOiJFUzI1NiJ9.e30.sig")
        #expect(!String(decoding: sealed, as: UTF8.self).contains("eyJ"))
        #expect(seal.open(sealed) == "eyJhbGciOiJFUzI1NiJ9.e30.sig")
        #expect(TokenSeal(secret: rotated, label: "apns:TEAM.KEY").open(sealed) == nil)
    }
}

private struct ProviderTokenFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
