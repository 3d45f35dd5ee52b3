import Crypto
import Foundation
import NIOSSL
import SwiftASN1
import X509

/// A private certificate authority made on the spot, and a server certificate it signs for
/// `localhost`: what the stand-ins serve TLS with. Nudge trusts it through `NUDGE_CA_FILE`
/// (its PEM written to a file), never by turning verification off.
public struct StandInCA: Sendable {
    /// The CA's certificate, PEM: the file to give as `NUDGE_CA_FILE`.
    public let certificatePEM: String
    /// The server's certificate (for `localhost`) and key, PEM.
    public let serverCertificatePEM: String
    public let serverKeyPEM: String

    public init(validFor lifetime: TimeInterval = 7 * 24 * 3600) throws {
        let now = Date()
        let caKey = P256.Signing.PrivateKey()
        let caName = try DistinguishedName {
            OrganizationName("Nudge stand-ins")
            CommonName("Nudge stand-in CA")
        }
        let ca = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: Certificate.PrivateKey(caKey).publicKey,
            notValidBefore: now.addingTimeInterval(-3600), notValidAfter: now.addingTimeInterval(lifetime),
            issuer: caName, subject: caName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            },
            issuerPrivateKey: Certificate.PrivateKey(caKey))
        let serverKey = P256.Signing.PrivateKey()
        let server = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: Certificate.PrivateKey(serverKey).publicKey,
            notValidBefore: now.addingTimeInterval(-3600), notValidAfter: now.addingTimeInterval(lifetime),
            issuer: caName, subject: try DistinguishedName { CommonName("localhost") }, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.serverAuth])
                SubjectAlternativeNames([.dnsName("localhost")])
            },
            issuerPrivateKey: Certificate.PrivateKey(caKey))
        certificatePEM = try ca.serializeAsPEM().pemString
        serverCertificatePEM = try server.serializeAsPEM().pemString
        serverKeyPEM = serverKey.pemRepresentation
    }

    /// A TLS server context with this CA's server certificate, offering `protocols` by ALPN.
    func serverContext(protocols: [String]) throws -> NIOSSLContext {
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(try NIOSSLCertificate(bytes: Array(serverCertificatePEM.utf8), format: .pem))],
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(serverKeyPEM.utf8), format: .pem)))
        configuration.applicationProtocols = protocols
        return try NIOSSLContext(configuration: configuration)
    }

    /// Writes the CA's certificate to `path`, for `NUDGE_CA_FILE`.
    public func writeCertificate(to path: String) throws {
        try Data(certificatePEM.utf8).write(to: URL(fileURLWithPath: path))
    }
}
