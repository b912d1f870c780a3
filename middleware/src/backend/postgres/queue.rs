//! The PostgreSQL backend's wait queue: tickets in the lock's row, changed in short
//! transactions that hold the row's lock (`sql::queue` decides), and releases announced with
//! `NOTIFY` on the table's channel, delivered when the transaction commits.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgConnection;

use super::PostgresBackend;
use super::listener::payload;
use crate::OwnerToken;
use crate::backend::sql::acquire_detached;
use crate::backend::sql::queue::{
    Holder, LockedRow, LockedRows, RowChange, Tickets, acquire_with_ticket, leave_line,
};
use crate::backend::waiting::{Announcement, WaitingRoom};
use crate::backend::{BackendError, BoxFuture, LockRequest, QueuedAttempt, TokenLease, WaitQueue};

impl LockedRows for PostgresBackend {
    /// The change's announcement goes out with `NOTIFY`, at commit.
    async fn with_locked_row<T: Send>(
        &self,
        name: &str,
        decide: impl FnOnce(LockedRow) -> (Option<RowChange>, T) + Send,
    ) -> Result<T, BackendError> {
        let mut transaction = self.pool.begin().await.map_err(BackendError::new)?;
        let row = match self.lock_row(&mut transaction, name).await? {
            Some(row) => row,
            None => {
                sqlx::query(&self.statements.ensure_row)
                    .bind(name)
                    .execute(&mut *transaction)
                    .await
                    .map_err(BackendError::new)?;
                self.lock_row(&mut transaction, name)
                    .await?
                    .ok_or_else(|| BackendError::new("the lock's row vanished"))?
            }
        };
        let (change, answer) = decide(row);
        if let Some(change) = change {
            self.write_row(&mut transaction, name, &change).await?;
            if let Some(announcement) = change.announce {
                self.notify(&mut transaction, name, announcement).await?;
            }
            transaction.commit().await.map_err(BackendError::new)?;
        }
        Ok(answer)
    }
}

impl PostgresBackend {
    async fn lock_row(
        &self,
        connection: &mut PgConnection,
        name: &str,
    ) -> Result<Option<LockedRow>, BackendError> {
        type Row = (i64, Option<String>, Option<i64>, Option<i64>, i64, String);
        let row: Option<Row> = sqlx::query_as(&self.statements.lock_row)
            .bind(name)
            .fetch_optional(connection)
            .await
            .map_err(BackendError::new)?;
        Ok(
            row.map(|(now_us, owner, left_us, shared_left_us, fence, tickets)| {
                let owner = owner.as_deref().and_then(OwnerToken::parse);
                LockedRow {
                    now_us,
                    holder: owner.zip(left_us),
                    shared_left_us,
                    fence,
                    tickets: Tickets::parse(&tickets, now_us),
                }
            }),
        )
    }

    async fn write_row(
        &self,
        connection: &mut PgConnection,
        name: &str,
        change: &RowChange,
    ) -> Result<(), BackendError> {
        let (action, owner, lease_us) = match change.holder {
            Holder::Unchanged => (0, None, 0),
            Holder::Taken { owner, lease_us } => (1, Some(owner.to_string()), lease_us),
            Holder::Freed => (2, None, 0),
        };
        sqlx::query(&self.statements.write_row)
            .bind(name)
            .bind(action)
            .bind(owner)
            .bind(lease_us)
            .bind(change.fence)
            .bind(change.waited)
            .bind(change.tickets.column())
            .execute(connection)
            .await
            .map_err(BackendError::new)?;
        Ok(())
    }

    /// Announces `announcement` for `name` on the table's channel (at commit, inside a
    /// transaction).
    async fn notify(
        &self,
        connection: &mut PgConnection,
        name: &str,
        announcement: Announcement,
    ) -> Result<(), BackendError> {
        sqlx::query(&self.statements.notify)
            .bind(&*self.channel)
            .bind(payload(name, announcement))
            .execute(connection)
            .await
            .map_err(BackendError::new)?;
        Ok(())
    }

    /// Announces that `name` is free, outside any transaction.
    pub(super) async fn announce_free(&self, name: &str) -> Result<(), BackendError> {
        let mut connection = self.pool.acquire().await.map_err(BackendError::new)?;
        self.notify(&mut connection, name, Announcement::Free).await
    }
}

impl WaitQueue<TokenLease> for PostgresBackend {
    fn room(&self) -> &Arc<WaitingRoom> {
        &self.room
    }

    /// Runs in a task of its own, like every acquire (`sql::acquire_detached`).
    fn acquire_queued<'a>(
        &'a self,
        name: &'a str,
        request: LockRequest,
        ticket_ttl: Duration,
    ) -> BoxFuture<'a, Result<QueuedAttempt<TokenLease>, BackendError>> {
        Box::pin(acquire_detached(
            self,
            &self.slots,
            name,
            request,
            move |backend, name, request| async move {
                acquire_with_ticket(&backend, &name, request, ticket_ttl).await
            },
        ))
    }

    fn leave_queue<'a>(
        &'a self,
        name: &'a str,
        token: OwnerToken,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(leave_line(self, name, token))
    }
}
