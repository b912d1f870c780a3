//! The SQL of the PostgreSQL backend, written once per table name.

use crate::backend::BackendError;

/// The statements on one lease table.
#[derive(Debug)]
pub(super) struct Statements {
    pub(super) table: String,
    pub(super) create_table: String,
    /// `$1` name, `$2` owner, `$3` TTL in ms → (fence if taken, holder's ms left if busy).
    pub(super) acquire: String,
    /// `$1` name, `$2` owner, `$3` TTL in ms; one row changed if the lease was still held.
    pub(super) extend: String,
    /// `$1` name, `$2` owner; one row changed if the lease was still held.
    pub(super) release: String,
}

/// `interval` of `$3` milliseconds from now, by the database's clock.
const EXPIRY: &str = "clock_timestamp() + $3::bigint * interval '1 millisecond'";

impl Statements {
    /// The statements on `table`: one or two plain identifiers (`name` or `schema.name`).
    pub(super) fn for_table(table: &str) -> Result<Self, BackendError> {
        if !is_table_name(table) {
            return Err(BackendError::new(format!(
                "table name {table:?} is not `name` or `schema.name` of letters, digits and `_`"
            )));
        }
        Ok(Self {
            table: table.to_owned(),
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {table} (\
                    name text PRIMARY KEY, \
                    owner text, \
                    expires_at timestamptz, \
                    fence bigint NOT NULL)"
            ),
            acquire: format!(
                "WITH previous AS (SELECT expires_at FROM {table} WHERE name = $1), \
                 taken AS (\
                    INSERT INTO {table} AS lease (name, owner, expires_at, fence) \
                    VALUES ($1, $2, {EXPIRY}, 1) \
                    ON CONFLICT (name) DO UPDATE \
                        SET owner = excluded.owner, expires_at = excluded.expires_at, \
                            fence = lease.fence + 1 \
                        WHERE lease.owner IS NULL OR lease.expires_at <= clock_timestamp() \
                    RETURNING fence) \
                 SELECT (SELECT fence FROM taken), \
                        (SELECT ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint \
                         FROM previous)"
            ),
            extend: format!(
                "UPDATE {table} SET expires_at = {EXPIRY} \
                 WHERE name = $1 AND owner = $2 AND expires_at > clock_timestamp()"
            ),
            release: format!(
                "UPDATE {table} SET owner = NULL, expires_at = NULL \
                 WHERE name = $1 AND owner = $2 AND expires_at > clock_timestamp()"
            ),
        })
    }
}

/// `name` or `schema.name`, each a plain identifier PostgreSQL takes unquoted.
fn is_table_name(table: &str) -> bool {
    let identifier = |part: &str| {
        let mut chars = part.chars();
        chars
            .next()
            .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
            && part.len() <= 63
    };
    let parts: Vec<&str> = table.split('.').collect();
    parts.len() <= 2 && parts.iter().all(|part| identifier(part))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_schema_qualified_names_are_accepted() {
        for table in ["tower_lock_leases", "locks.leases", "_t1"] {
            assert!(is_table_name(table), "{table}");
        }
    }

    #[test]
    fn names_that_would_need_quoting_or_inject_sql_are_refused() {
        for table in [
            "",
            "1t",
            "a.b.c",
            "leases; DROP TABLE x",
            "a-b",
            "a.",
            "\"t\"",
        ] {
            assert!(Statements::for_table(table).is_err(), "{table}");
        }
    }
}
