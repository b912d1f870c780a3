//! The MySQL/MariaDB backend's wait queue: tickets in the lock's row, changed in short
//! transactions that hold the row's lock (`sql::queue` decides). MySQL cannot announce a
//! release, so the room is silent: waiters poll, in ticket order across processes, and what a
//! change of this process would announce is told to its own waiters.

use std::sync::Arc;

use sqlx::MySqlConnection;

use super::MysqlBackend;
use crate::backend::BackendError;
use crate::backend::sql::AcquireSlots;
use crate::backend::sql::tickets::{QueueRows, RowChange, RowColumns, RowState};
use crate::backend::waiting::WaitingRoom;

impl QueueRows for MysqlBackend {
    fn waiting_room(&self) -> &Arc<WaitingRoom> {
        &self.room
    }

    fn acquire_slots(&self) -> &AcquireSlots {
        &self.slots
    }

    /// Decides once, on the row locked for update in a transaction. MySQL has no `NOTIFY`:
    /// what the change announces is told to this process's waiters alone, once committed.
    async fn decide_on_row<T: Send>(
        &self,
        name: &str,
        decide: impl Fn(RowState) -> (Option<RowChange>, T) + Send + Sync,
    ) -> Result<T, BackendError> {
        let statements = &self.statements;
        let mut transaction = self.pool.begin().await.map_err(BackendError::new)?;
        let row = match lock_row(&mut transaction, &statements.lock_row, name).await? {
            Some(row) => row,
            None => {
                sqlx::query(&statements.ensure_row)
                    .bind(name.as_bytes())
                    .execute(&mut *transaction)
                    .await
                    .map_err(BackendError::new)?;
                lock_row(&mut transaction, &statements.lock_row, name)
                    .await?
                    .ok_or_else(|| BackendError::new("the lock's row vanished"))?
            }
        };
        let (change, answer) = decide(row);
        if let Some(change) = change {
            let (action, owner, lease_us) = change.holder.columns();
            sqlx::query(&statements.write_row)
                .bind(action)
                .bind(lease_us)
                .bind(action)
                .bind(owner)
                .bind(change.fence)
                .bind(change.waited)
                .bind(change.tickets.column())
                .bind(name.as_bytes())
                .execute(&mut *transaction)
                .await
                .map_err(BackendError::new)?;
            transaction.commit().await.map_err(BackendError::new)?;
            if let Some(announcement) = change.announce {
                self.room.announce(name, announcement);
            }
        }
        Ok(answer)
    }
}

async fn lock_row(
    connection: &mut MySqlConnection,
    statement: &str,
    name: &str,
) -> Result<Option<RowState>, BackendError> {
    let row: Option<RowColumns> = sqlx::query_as(statement)
        .bind(name.as_bytes())
        .fetch_optional(connection)
        .await
        .map_err(BackendError::new)?;
    Ok(row.map(RowState::from_columns))
}
