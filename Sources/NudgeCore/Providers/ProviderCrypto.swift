import Crypto
import CryptoExtras
import Foundation

/// Digests Nudge takes of values it must recognise without keeping them (a device token).
enum Digest {
    static func sha256Hex(_ text: String) -> String {
        SHA256.hash(data: Data(text.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// A UUID made from `text`: the same text always gives the same UUID (an `apns-id` that a
    /// retry repeats).
    static func uuid(_ text: String) -> UUID {
        var bytes = Array(SHA256.hash(data: Data(text.utf8)).prefix(16))
        bytes[6] = (bytes[6] & 0x0f) | 0x50   // version 5, name-based
        bytes[8] = (bytes[8] & 0x3f) | 0x80   // RFC 4122 variant
        return UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            ))
    }
}

extension Data {
    /// Base64url without padding, as JWTs use it (RFC 7515).
    var base64URL: String {
        base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    init?(base64URL text: String) {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        self.init(base64Encoded: base64)
    }
}

/// A JSON Web Token (RFC 7519) signed with a provider's private key: ES256 for APNs' provider
/// tokens, RS256 for the grant Google's token endpoint exchanges for an access token.
enum JWT {
    enum Key: Sendable {
        case es256(P256.Signing.PrivateKey)
        case rs256(_RSA.Signing.PrivateKey)

        var algorithm: String {
            switch self {
            case .es256: "ES256"
            case .rs256: "RS256"
            }
        }
    }

    /// `header.claims.signature`. The claims are given as ordered pairs of JSON values already
    /// encoded (so that `iat` stays an integer).
    static func sign(header: [(String, String)], claims: [(String, String)], key: Key) throws -> String {
        func object(_ pairs: [(String, String)]) -> Data {
            Data(("{" + pairs.map { "\(JSONValue.string($0.0)):\($0.1)" }.joined(separator: ",") + "}").utf8)
        }
        let signingInput =
            object([("alg", JSONValue.string(key.algorithm).description)] + header).base64URL
            + "." + object(claims).base64URL
        let signature: Data
        switch key {
        case .es256(let key):
            signature = try key.signature(for: Data(signingInput.utf8)).rawRepresentation
        case .rs256(let key):
            signature = try key.signature(for: Data(signingInput.utf8), padding: .insecurePKCS1v1_5).rawRepresentation
        }
        return signingInput + "." + signature.base64URL
    }

    static func string(_ value: String) -> String { JSONValue.string(value).description }
}

/// Seals a provider token for the database with a key derived from the provider's own private
/// key: the stored token is useless to anyone who does not also hold that key, and a rotated key
/// simply fails to open the old token, which is then replaced.
struct TokenSeal: Sendable {
    private let key: SymmetricKey

    /// `secret` is the provider's private key (its DER or PEM bytes); `label` names the provider.
    init(secret: Data, label: String) {
        key = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: secret), salt: Data("nudge provider token".utf8),
            info: Data(label.utf8), outputByteCount: 32)
    }

    func seal(_ token: String) throws -> Data {
        guard let combined = try AES.GCM.seal(Data(token.utf8), using: key).combined else {
            throw NudgeError(.configuration, "could not seal a provider token")
        }
        return combined
    }

    func open(_ sealed: Data) -> String? {
        guard let box = try? AES.GCM.SealedBox(combined: sealed), let plain = try? AES.GCM.open(box, using: key) else { return nil }
        return String(data: plain, encoding: .utf8)
    }
}
