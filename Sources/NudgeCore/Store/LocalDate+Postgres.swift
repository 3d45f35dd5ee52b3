import NIOCore
import PostgresNIO

/// A `LocalDate` is a PostgreSQL `date`: days since 2000-01-01 as a 32-bit integer on the wire.
extension LocalDate: PostgresNonThrowingEncodable, PostgresArrayEncodable, PostgresDecodable, PostgresArrayDecodable {
    private static let postgresEpochOffset = 10_957   // days from 1970-01-01 to 2000-01-01

    public static var psqlType: PostgresDataType { .date }
    public static var psqlFormat: PostgresFormat { .binary }
    public static var psqlArrayType: PostgresDataType { .dateArray }

    public func encode<JSONEncoder: PostgresJSONEncoder>(
        into byteBuffer: inout ByteBuffer,
        context: PostgresEncodingContext<JSONEncoder>
    ) {
        byteBuffer.writeInteger(Int32(daysSinceEpoch - Self.postgresEpochOffset))
    }

    public init<JSONDecoder: PostgresJSONDecoder>(
        from buffer: inout ByteBuffer,
        type: PostgresDataType,
        format: PostgresFormat,
        context: PostgresDecodingContext<JSONDecoder>
    ) throws {
        guard type == .date, format == .binary, buffer.readableBytes == 4, let days = buffer.readInteger(as: Int32.self)
        else { throw PostgresDecodingError.Code.typeMismatch }
        // 'infinity' and '-infinity' are dates PostgreSQL stores and no local day is.
        guard days != Int32.max, days != Int32.min else { throw PostgresDecodingError.Code.failure }
        self.init(daysSinceEpoch: Int(days) + Self.postgresEpochOffset)
    }
}
