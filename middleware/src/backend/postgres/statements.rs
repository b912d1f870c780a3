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
        super::super::sql::check_table_name(table)?;
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
