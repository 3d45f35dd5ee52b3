import Foundation
import PostgresNIO
import Testing

@testable import NudgeCore

@Suite struct SQLFragmentTests {
    @Test func nestedFragmentsKeepTheirValuesAsParametersNumberedInOrder() throws {
        let ids = [UUID(), UUID()]
        let inner: SQLFragment = "select * from unnest(\(ids)) as u(id) where \(unescaped: "true") and 1 = \(1)"
        let outer: SQLFragment = "with c as (\(inner)) select \("a"), count(*) from c where \(2) > 0"
        let query = try outer.query()
        #expect(query.sql == "with c as (select * from unnest($1) as u(id) where true and 1 = $2) select $3, count(*) from c where $4 > 0")
        #expect(query.binds.count == 4)
    }

    @Test func batchWritesBecomeOneStatementWithTheirExpectations() throws {
        var writes = BatchWrites()
        #expect(try writes.statement.query().sql == "select true")
        writes.step("updated", "update t set x = \(1) returning id")
        var more = BatchWrites()
        more.step("inserted", "insert into t (x) values (\(2)) returning id")
        more.expect("(select count(*) from updated) + (select count(*) from inserted) = \(2)", else: "t moved")
        writes.append(more)
        let query = try writes.statement.query()
        #expect(
            query.sql == """
                with updated as (update t set x = $1 returning id),
                inserted as (insert into t (x) values ($2) returning id)
                select nudge_expect((select count(*) from updated) + (select count(*) from inserted) = $3, $4)
                """)
        #expect(query.binds.count == 4)
    }

    @Test func aPreparedStatementIsNamedByItsTextAndItsParametersTypes() throws {
        let id = UUID()
        let missing: String? = nil
        let fragment: SQLFragment = "select \(id), \([1, 2]), \(missing), \(unescaped: "true"), \("a")"
        #expect(fragment.parameterTypes == [.uuid, .int8Array, .null, .text])

        let sql = try fragment.query().sql
        let name = PreparedText(sql: sql, types: fragment.parameterTypes).name
        #expect(name.hasPrefix("nudge_") && name.count <= 63)
        // The same text and types, whatever the values: one statement.
        #expect(PreparedText(sql: sql, types: [.uuid, .int8Array, .null, .text]).name == name)
        // A value given where a nil was: another statement, parsed with that type.
        #expect(PreparedText(sql: sql, types: [.uuid, .int8Array, .text, .text]).name != name)
        #expect(PreparedText(sql: sql + " ", types: fragment.parameterTypes).name != name)
    }
}
