//! The PostgreSQL backend's wait queue: tickets in the lock's row, changed optimistically
//! (`sql::tickets` decides, the write applies only to the row version read), and releases
//! announced with `NOTIFY` on the table's channel, delivered when the write commits.

use std::sync::Arc;

use sqlx::{FromRow, Row};

use super::PostgresBackend;
use super::listener::payload;
use crate::backend::BackendError;
use crate::backend::sql::AcquireSlots;
use crate::backend::sql::tickets::{QueueRows, RowChange, RowColumns, RowState};
use crate::backend::waiting::{Announcement, WaitingRoom};

impl QueueRows for PostgresBackend {
    fn waiting_room(&self) -> &Arc<WaitingRoom> {
        &self.room
    }

    fn acquire_slots(&self) -> &AcquireSlots {
        &self.slots
    }

    /// Optimistic: reads the row without locking it, decides, and writes the change in one
    /// statement that applies only while the row is still the version read (its `xmin`, the
    /// transaction that wrote it), announcing the change with `pg_notify` in the same
    /// statement (delivered at its commit). A row changed meanwhile is read and decided on
    /// again. So the row is locked only while that one statement commits, not across the
    /// round trips of a transaction, and a release waited for costs two round trips. This
    /// process's own waiters are told what the change announces as soon as it is written.
    async fn decide_on_row<T: Send>(
        &self,
        name: &str,
        decide: impl Fn(RowState) -> (Option<RowChange>, T) + Send + Sync,
    ) -> Result<T, BackendError> {
        for _ in 0..MAX_ROW_ATTEMPTS {
            let Some((row, version)) = self.read_row(name).await? else {
                sqlx::query(&self.statements.ensure_row)
                    .bind(name)
                    .execute(&mut *self.pool.connection().await?)
                    .await
                    .map_err(BackendError::new)?;
                continue;
            };
            let (change, answer) = decide(row);
            let Some(change) = change else {
                return Ok(answer);
            };
            if self.write_row(name, &version, &change).await? {
                // This process's waiters hear it now, not a NOTIFY's trip later (the NOTIFY
                // repeating it changes nothing: a handed lock is taken once).
                if let Some(announcement) = change.announce {
                    self.room.announce(name, announcement);
                }
                return Ok(answer);
            }
        }
        Err(BackendError::new(format!(
            "lock {name:?}'s row changed under each of {MAX_ROW_ATTEMPTS} attempts to update it"
        )))
    }
}

/// How many times a queue operation reads and tries to write a row that others keep changing
/// before it gives up with an error. Every failed try means another operation on the same
/// lock succeeded, so the queue as a whole always moves on.
const MAX_ROW_ATTEMPTS: usize = 100;

/// Where the row's version follows the queue's columns in `read_row`'s answer.
const VERSION_COLUMN: usize = 7;

impl PostgresBackend {
    /// `name`'s row, and its version (`xmin` as text, after the queue's columns), if it has
    /// one.
    async fn read_row(&self, name: &str) -> Result<Option<(RowState, String)>, BackendError> {
        let row = sqlx::query(&self.statements.read_row)
            .bind(name)
            .fetch_optional(&mut *self.pool.connection().await?)
            .await
            .map_err(BackendError::new)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let columns = RowColumns::from_row(&row).map_err(BackendError::new)?;
        let version = row.try_get(VERSION_COLUMN).map_err(BackendError::new)?;
        Ok(Some((RowState::from_columns(columns), version)))
    }

    /// Writes `change` to `name`'s row if it is still at `version`, announcing what the
    /// change says; whether it was.
    async fn write_row(
        &self,
        name: &str,
        version: &str,
        change: &RowChange,
    ) -> Result<bool, BackendError> {
        let (action, owner, lease_us) = change.holder.columns();
        let announcement = change
            .announce
            .map(|announcement| payload(name, announcement));
        let (written, _announced): (i64, i64) = sqlx::query_as(&self.statements.write_row)
            .bind(name)
            .bind(action)
            .bind(owner)
            .bind(lease_us)
            .bind(change.fence)
            .bind(change.waited)
            .bind(change.tickets.column())
            .bind(version)
            .bind(&*self.channel)
            .bind(announcement)
            .bind(change.taker)
            .fetch_one(&mut *self.pool.connection().await?)
            .await
            .map_err(BackendError::new)?;
        Ok(written == 1)
    }

    /// Announces that `name` is free, outside any transaction.
    pub(super) async fn announce_free(&self, name: &str) -> Result<(), BackendError> {
        sqlx::query(&self.statements.notify)
            .bind(&*self.channel)
            .bind(payload(name, Announcement::Free))
            .execute(&mut *self.pool.connection().await?)
            .await
            .map_err(BackendError::new)?;
        Ok(())
    }
}
