//! What an operator reads from PostgreSQL's lease rows (`sql::inspection` makes the view).

use super::PostgresBackend;
use crate::backend::BackendError;
use crate::backend::sql::inspection::{LockRow, RowInspection, SharedRow};

impl RowInspection for PostgresBackend {
    async fn lock_row(&self, name: &str) -> Result<Option<LockRow>, BackendError> {
        sqlx::query_as(&self.statements.inspect)
            .bind(name)
            .fetch_optional(&mut *self.pool.connection().await?)
            .await
            .map_err(BackendError::new)
    }

    async fn shared_rows(&self, name: &str) -> Result<Vec<SharedRow>, BackendError> {
        sqlx::query_as(&self.statements.inspect_shared)
            .bind(name)
            .fetch_all(&mut *self.pool.connection().await?)
            .await
            .map_err(BackendError::new)
    }

    async fn name_page(
        &self,
        prefix: &str,
        after: &str,
        rows: usize,
    ) -> Result<Vec<(String, bool)>, BackendError> {
        sqlx::query_as(&self.statements.held_page)
            .bind(prefix)
            .bind(after)
            .bind(i64::try_from(rows).unwrap_or(i64::MAX))
            .fetch_all(&mut *self.pool.connection().await?)
            .await
            .map_err(BackendError::new)
    }
}
