//! The statements that guard a PostgreSQL migration run against objects planted where the
//! migrations' statements resolve names (the rule that uses them is
//! [`crate::store::migrate`]'s).
//!
//! PostgreSQL resolves an unqualified function or operator by the best fit of argument
//! types across every schema on the `search_path`, `pg_catalog` included, so a function
//! whose parameters fit a call better than the built-in's do (a `convert_to(text, text)`
//! for a call with a literal encoding name, a `quote_ident(name)` for a call with
//! `current_schema()`) runs with the migrating role's rights. The migrations applied
//! before 0012 make such calls and cannot be edited (they are checksummed), so the run
//! pins the path to the schema it migrates and refuses to start while that schema holds
//! an object that could win one of them, or while a role that could plant one during the
//! run may create objects there. Every statement here names `pg_catalog` and compares
//! with `OPERATOR(pg_catalog.=)`, so that no plant takes part in its own detection.

use sqlx::{PgConnection, Postgres, Transaction};

/// Pins the transaction's `search_path` to the session's current schema alone (the one
/// its migrations create objects in), and returns that schema, or `None` when the path
/// names no schema that exists. Other schemas on the session's path (`public`, `$user`)
/// are then no longer searched; `pg_catalog` still is, first, and `pg_temp` holds only
/// this session's own objects.
///
/// It also turns JIT compilation off for the transaction: the guard's catalog reads are
/// estimated costly enough on a catalog bloated by many created and dropped functions to be
/// compiled, which took about 450 ms per read where running them takes a few.
pub const PIN_SEARCH_PATH_SQL: &str = "SELECT s, pg_catalog.set_config('search_path', \
     pg_catalog.quote_ident(s), true) IS NOT NULL \
     AND pg_catalog.set_config('jit'::pg_catalog.text, 'off'::pg_catalog.text, true) IS NOT NULL \
     FROM (SELECT pg_catalog.current_schema()::pg_catalog.text AS s) AS current";

/// The functions, aggregates and operators in the current schema that could take a
/// built-in's place in an unqualified call: the same name as one in `pg_catalog` with
/// other argument types (one with the very same types loses to `pg_catalog`, searched
/// first). Also any function named like one of outboxd's (`$1`) that the migrating role
/// does not own: an overload another role created beside outboxd's own. Objects of an
/// installed extension that a superuser owns are left out (an extension's script creates
/// them; a trusted extension's, installed by any role, as the bootstrap superuser). Another
/// role's function added to an extension (`ALTER EXTENSION … ADD`, open to the
/// extension's owner) is not.
const SHADOWING_OBJECTS_SQL: &str = "\
WITH target AS (
    SELECT n.oid FROM pg_catalog.pg_namespace n
     WHERE n.nspname OPERATOR(pg_catalog.=) pg_catalog.current_schema()),
builtin AS (SELECT n.oid FROM pg_catalog.pg_namespace n
             WHERE n.nspname OPERATOR(pg_catalog.=) 'pg_catalog'::pg_catalog.name),
me AS (
    SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER),
superusers AS (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolsuper)
SELECT 'function ' OPERATOR(pg_catalog.||) p.oid::pg_catalog.regprocedure::pg_catalog.text
  FROM pg_catalog.pg_proc p, target, builtin, me
 WHERE p.pronamespace OPERATOR(pg_catalog.=) target.oid
   AND NOT (p.proowner OPERATOR(pg_catalog.=) ANY (SELECT oid FROM superusers)
            AND EXISTS (SELECT 1 FROM pg_catalog.pg_depend e
                         WHERE e.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass::pg_catalog.oid
                           AND e.objid OPERATOR(pg_catalog.=) p.oid
                           AND e.deptype OPERATOR(pg_catalog.=) 'e'::pg_catalog.\"char\"))
   AND ((EXISTS (SELECT 1 FROM pg_catalog.pg_proc b
                  WHERE b.pronamespace OPERATOR(pg_catalog.=) builtin.oid
                    AND b.proname OPERATOR(pg_catalog.=) p.proname)
         AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_proc b
                          WHERE b.pronamespace OPERATOR(pg_catalog.=) builtin.oid
                            AND b.proname OPERATOR(pg_catalog.=) p.proname
                            AND b.proargtypes OPERATOR(pg_catalog.=) p.proargtypes))
        OR (p.proname::pg_catalog.text OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[])
            AND p.proowner OPERATOR(pg_catalog.<>) me.oid))
UNION ALL
SELECT 'operator ' OPERATOR(pg_catalog.||) o.oid::pg_catalog.regoperator::pg_catalog.text
  FROM pg_catalog.pg_operator o, target, builtin
 WHERE o.oprnamespace OPERATOR(pg_catalog.=) target.oid
   AND NOT (o.oprowner OPERATOR(pg_catalog.=) ANY (SELECT oid FROM superusers)
            AND EXISTS (SELECT 1 FROM pg_catalog.pg_depend e
                         WHERE e.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_operator'::pg_catalog.regclass::pg_catalog.oid
                           AND e.objid OPERATOR(pg_catalog.=) o.oid
                           AND e.deptype OPERATOR(pg_catalog.=) 'e'::pg_catalog.\"char\"))
   AND EXISTS (SELECT 1 FROM pg_catalog.pg_operator b
                WHERE b.oprnamespace OPERATOR(pg_catalog.=) builtin.oid
                  AND b.oprname OPERATOR(pg_catalog.=) o.oprname)
   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_operator b
                    WHERE b.oprnamespace OPERATOR(pg_catalog.=) builtin.oid
                      AND b.oprname OPERATOR(pg_catalog.=) o.oprname
                      AND b.oprleft OPERATOR(pg_catalog.=) o.oprleft
                      AND b.oprright OPERATOR(pg_catalog.=) o.oprright)
ORDER BY 1";

/// Roles other than the migrating role that may create objects in the current schema: the
/// grantees of CREATE other than its owner (`PUBLIC` for every role), and every role that
/// may log in and act as the owner (the owner itself, its members; for a schema owned by
/// `pg_database_owner`, such as `public`, the database's owner and its members), and before
/// PostgreSQL 16 every role with CREATEROLE when a non-superuser owns the schema (it may
/// grant itself membership in the owner), superusers aside; each named as `quote_ident`
/// writes it, with what lets it. Each could plant a function while the migrations run,
/// after the check above.
const OTHER_CREATORS_SQL: &str = "\
WITH target AS (
    SELECT n.nspowner, n.nspacl FROM pg_catalog.pg_namespace n
     WHERE n.nspname OPERATOR(pg_catalog.=) pg_catalog.current_schema())
SELECT CASE a.grantee WHEN 0::pg_catalog.oid THEN 'PUBLIC'
       ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END
  FROM target,
       pg_catalog.aclexplode(coalesce(target.nspacl, pg_catalog.acldefault('n'::pg_catalog.\"char\", target.nspowner))) a
 WHERE a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'::pg_catalog.text
   AND a.grantee OPERATOR(pg_catalog.<>) target.nspowner
   AND a.grantee OPERATOR(pg_catalog.<>) ALL (SELECT r.oid FROM pg_catalog.pg_roles r
                                     WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER)
UNION
SELECT pg_catalog.quote_ident(r.rolname::pg_catalog.text) OPERATOR(pg_catalog.||)
       CASE WHEN pg_catalog.pg_has_role(r.oid, target.nspowner, 'MEMBER'::pg_catalog.text)
            THEN ' (may act as the owner, '::pg_catalog.text OPERATOR(pg_catalog.||)
                 target.nspowner::pg_catalog.regrole::pg_catalog.text OPERATOR(pg_catalog.||) ')'::pg_catalog.text
            ELSE ' (CREATEROLE: may make itself a member of the owner, '::pg_catalog.text OPERATOR(pg_catalog.||)
                 target.nspowner::pg_catalog.regrole::pg_catalog.text OPERATOR(pg_catalog.||) ')'::pg_catalog.text END
  FROM target, pg_catalog.pg_roles r
 WHERE r.rolcanlogin AND NOT r.rolsuper
   AND r.rolname OPERATOR(pg_catalog.<>) CURRENT_USER
   AND (pg_catalog.pg_has_role(r.oid, target.nspowner, 'MEMBER'::pg_catalog.text)
        OR (r.rolcreaterole
            AND pg_catalog.current_setting('server_version_num'::pg_catalog.text)::pg_catalog.int4
                OPERATOR(pg_catalog.<) 160000
            AND NOT (SELECT o.rolsuper FROM pg_catalog.pg_roles o
                      WHERE o.oid OPERATOR(pg_catalog.=) target.nspowner)))
 ORDER BY 1";

/// The owner of a relation named like outboxd's bookkeeping table when it is not the
/// migrating role.
const FOREIGN_BOOKKEEPING_OWNER_SQL: &str = "\
SELECT c.relowner::pg_catalog.regrole::pg_catalog.text
  FROM pg_catalog.pg_class c, pg_catalog.pg_namespace n
 WHERE c.relnamespace OPERATOR(pg_catalog.=) n.oid
   AND n.nspname OPERATOR(pg_catalog.=) pg_catalog.current_schema()
   AND c.relname OPERATOR(pg_catalog.=) 'outboxd_schema_migrations'::pg_catalog.name
   AND c.relowner OPERATOR(pg_catalog.<>) ALL (SELECT r.oid FROM pg_catalog.pg_roles r
                                      WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER)";

/// Pins the search path ([`PIN_SEARCH_PATH_SQL`]) and returns the schema it names.
pub async fn pin_search_path(
    tx: &mut Transaction<'_, Postgres>,
) -> Result<Option<String>, sqlx::Error> {
    let (schema, _): (Option<String>, Option<bool>) = sqlx::query_as(PIN_SEARCH_PATH_SQL)
        .fetch_one(&mut **tx)
        .await?;
    Ok(schema)
}

/// The owner of a relation named `outboxd_schema_migrations` in the current schema when
/// it is not the migrating role: a view or a table with a trigger of another role's would
/// run its code on the run's first read or its bookkeeping `INSERT`.
pub async fn foreign_bookkeeping_owner(
    conn: &mut PgConnection,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar(FOREIGN_BOOKKEEPING_OWNER_SQL)
        .fetch_optional(conn)
        .await
}

/// The objects in the current schema that could take a built-in's (or outboxd's own)
/// place ([`SHADOWING_OBJECTS_SQL`]), as PostgreSQL names them (`function
/// convert_to(text,text)`); `outboxd_functions` are the names of the functions outboxd's
/// migrations create.
pub async fn shadowing_objects(
    conn: &mut PgConnection,
    outboxd_functions: &[&str],
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(SHADOWING_OBJECTS_SQL)
        .bind(outboxd_functions)
        .fetch_all(conn)
        .await
}

/// The roles other than the migrating one that could create such an object while the run
/// goes on ([`OTHER_CREATORS_SQL`]).
pub async fn other_creators(conn: &mut PgConnection) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(OTHER_CREATORS_SQL).fetch_all(conn).await
}
