import Foundation
import PostgresNIO

extension Database {
    /// Refuses to go on as a role that may create objects in a schema on its search path, unless
    /// it owns Nudge's tables (or is a superuser): a function it made there, of a closer
    /// signature than pg_catalog's (`public.array_agg(text)`), would be taken by Nudge's
    /// functions that run with the owner's rights (docs/security.md). `nudge run` and `nudge
    /// serve` ask before anything else.
    public func refuseRoleThatMayCreateOnItsPath(command: String) async throws {
        let logger = self.logger
        let found: (role: String, schemas: [String]) = try await withConnection { connection in
            try await self.bounded(connection) {
                let rows = try await connection.query(
                    """
                    select current_user::text,
                           coalesce(pg_catalog.array_agg(n.nspname::text order by n.nspname::text), '{}')
                      from pg_catalog.pg_namespace n
                     where n.nspname = any(pg_catalog.current_schemas(false))
                       and pg_catalog.has_schema_privilege(n.oid, 'CREATE')
                       and not exists (select 1 from pg_catalog.pg_roles r where r.rolname = current_user and r.rolsuper)
                       and not coalesce(pg_catalog.pg_has_role(
                               (select c.relowner from pg_catalog.pg_class c
                                 where c.oid = pg_catalog.to_regclass('public.notification_outbox')), 'MEMBER'), false)
                    """, logger: logger)
                var found = (role: "", schemas: [String]())
                for try await (role, schemas) in rows.decode((String, [String]).self) { found = (role, schemas) }
                return found
            }
        }
        guard !found.schemas.isEmpty else { return }
        let list = found.schemas.joined(separator: ", ")
        throw NudgeError(
            .configuration,
            """
            nudge \(command): the role \(found.role) may create objects in schema \(list), which Nudge's functions search: one it \
            made there could run with the rights of the owner of Nudge's tables. As the owner of the schema, run \
            `revoke create on schema \(list) from public, \(found.role)` (deploy/sql/roles.sql does it for public, PUBLIC and \
            Nudge's roles; a grant to a role \(found.role) is a member of needs its own revoke) (docs/security.md)
            """)
    }
}
