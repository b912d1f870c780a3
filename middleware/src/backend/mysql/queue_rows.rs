//! The MySQL/MariaDB backend's wait queue: tickets in the lock's row, changed in short
//! transactions that hold the row's lock (`sql::tickets` decides). MySQL cannot announce a
//! release, so the room is silent: waiters poll, in ticket order across processes, and what a
//! change of this process would announce is told to its own waiters.

use std::sync::Arc;

use sqlx::{Connection, MySqlConnection};

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

    /// Decides once, on the row locked for update in a transaction — again when InnoDB chose
    /// the transaction as a deadlock's victim (SQLSTATE 40001: "try restarting transaction"),
    /// up to a few times. MySQL has no `NOTIFY`: what the change announces is told to this
    /// process's waiters alone, once committed.
    async fn decide_on_row<T: Send>(
        &self,
        name: &str,
        decide: impl Fn(RowState) -> (Option<RowChange>, T) + Send + Sync,
    ) -> Result<T, BackendError> {
        let mut tries = 1;
        loop {
            let mut connection = self.pool.connection().await?;
            match self
                .decide_in_transaction(&mut connection, name, &decide)
                .await
            {
                Err(error) if is_deadlock_victim(&error) && tries < DEADLOCK_TRIES => tries += 1,
                Err(error) => return Err(BackendError::new(error)),
                Ok((change, answer)) => {
                    if let Some(announcement) = change.and_then(|change| change.announce) {
                        self.room.announce(name, announcement);
                    }
                    return Ok(answer);
                }
            }
        }
    }
}

/// How many times a queue operation runs its transaction when InnoDB keeps choosing it as a
/// deadlock's victim.
const DEADLOCK_TRIES: u32 = 5;

/// Whether `error` says the transaction was rolled back to break a deadlock.
fn is_deadlock_victim(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|error| error.code())
        .is_some_and(|code| code == "40001")
}

impl MysqlBackend {
    /// One try of [`QueueRows::decide_on_row`]: the change written (if any) and the answer.
    async fn decide_in_transaction<T: Send>(
        &self,
        connection: &mut MySqlConnection,
        name: &str,
        decide: &(impl Fn(RowState) -> (Option<RowChange>, T) + Send + Sync),
    ) -> Result<(Option<RowChange>, T), sqlx::Error> {
        let statements = &self.statements;
        let mut transaction = connection.begin().await?;
        let row = match lock_row(&mut transaction, &statements.lock_row, name).await? {
            Some(row) => row,
            None => {
                sqlx::query(&statements.ensure_row)
                    .bind(name.as_bytes())
                    .execute(&mut *transaction)
                    .await?;
                lock_row(&mut transaction, &statements.lock_row, name)
                    .await?
                    .ok_or(sqlx::Error::RowNotFound)?
            }
        };
        let (change, answer) = decide(row);
        if let Some(change) = &change {
            let (action, owner, lease_us) = change.holder.columns();
            sqlx::query(&statements.write_row)
                .bind(action)
                .bind(lease_us)
                .bind(action)
                .bind(owner.clone())
                .bind(action)
                .bind(change.taker)
                .bind(action)
                .bind(action)
                .bind(owner)
                .bind(change.fence)
                .bind(change.waited)
                .bind(change.tickets.column())
                .bind(name.as_bytes())
                .execute(&mut *transaction)
                .await?;
            transaction.commit().await?;
        }
        Ok((change, answer))
    }
}

async fn lock_row(
    connection: &mut MySqlConnection,
    statement: &str,
    name: &str,
) -> Result<Option<RowState>, sqlx::Error> {
    let row: Option<RowColumns> = sqlx::query_as(statement)
        .bind(name.as_bytes())
        .fetch_optional(connection)
        .await?;
    Ok(row.map(RowState::from_columns))
}
