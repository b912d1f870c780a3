//! The SQL of the MySQL/MariaDB backend, written once per table name.

use crate::backend::BackendError;

/// The longest lock name the table's key column holds, in bytes.
pub(super) const MAX_NAME_LEN: usize = 512;

/// Whether the row is free: never taken, released, or its lease expired (the database's UTC
/// clock, whatever the session's time zone).
const FREE: &str = "owner IS NULL OR expires_at <= UTC_TIMESTAMP(6)";

/// The statements on one lease table.
#[derive(Debug)]
pub(super) struct Statements {
    pub(super) table: String,
    pub(super) create_table: String,
    /// `?` name, owner, TTL in µs. `LAST_INSERT_ID` carries the answer: the fence if taken,
    /// 0 if busy (`rows_affected` cannot tell a busy row from a fresh insert, as sqlx asks for
    /// found rows).
    pub(super) acquire: String,
    /// `?` name → the holder's µs left.
    pub(super) holder_left: String,
    /// `?` TTL in µs, name, owner; one row matched if the lease was still held.
    pub(super) extend: String,
    /// `?` name, owner; one row matched if the lease was still held.
    pub(super) release: String,
}

impl Statements {
    /// The statements on `table`: one or two plain identifiers (`name` or `database.name`).
    pub(super) fn for_table(table: &str) -> Result<Self, BackendError> {
        super::super::sql::check_table_name(table)?;
        Ok(Self {
            table: table.to_owned(),
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {table} (\
                    name VARBINARY({MAX_NAME_LEN}) NOT NULL PRIMARY KEY, \
                    owner CHAR(32) NULL, \
                    expires_at DATETIME(6) NULL, \
                    fence BIGINT UNSIGNED NOT NULL) ENGINE = InnoDB"
            ),
            // Assignments run left to right: `owner` still reads the old row when it decides,
            // as `fence` did; `expires_at` reads the new owner.
            acquire: format!(
                "INSERT INTO {table} (name, owner, expires_at, fence) \
                 VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, LAST_INSERT_ID(1)) \
                 ON DUPLICATE KEY UPDATE \
                    fence = IF({FREE}, LAST_INSERT_ID(fence + 1), fence + 0 * LAST_INSERT_ID(0)), \
                    owner = IF({FREE}, VALUES(owner), owner), \
                    expires_at = IF(owner = VALUES(owner), VALUES(expires_at), expires_at)"
            ),
            holder_left: format!(
                "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) \
                 FROM {table} WHERE name = ? AND owner IS NOT NULL"
            ),
            extend: format!(
                "UPDATE {table} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
                 WHERE name = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)"
            ),
            release: format!(
                "UPDATE {table} SET owner = NULL, expires_at = NULL \
                 WHERE name = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)"
            ),
        })
    }
}
