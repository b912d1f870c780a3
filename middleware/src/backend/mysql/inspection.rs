//! What an operator reads from MySQL's lease rows (`sql::inspection` makes the view).

use super::MysqlBackend;
use crate::backend::BackendError;
use crate::backend::sql::inspection::{LockRow, RowInspection, SharedRow};

impl RowInspection for MysqlBackend {
    async fn lock_row(&self, name: &str) -> Result<Option<LockRow>, BackendError> {
        sqlx::query_as(&self.statements.inspect)
            .bind(name.as_bytes())
            .fetch_optional(&mut *self.pool.connection().await?)
            .await
            .map_err(BackendError::new)
    }

    async fn shared_rows(&self, name: &str) -> Result<Vec<SharedRow>, BackendError> {
        sqlx::query_as(&self.statements.inspect_shared)
            .bind(name.as_bytes())
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
        let page: Vec<(Vec<u8>, i64)> = sqlx::query_as(&self.statements.held_page)
            .bind(prefix.as_bytes())
            .bind(after.as_bytes())
            .bind(u64::try_from(rows).unwrap_or(u64::MAX))
            .fetch_all(&mut *self.pool.connection().await?)
            .await
            .map_err(BackendError::new)?;
        let names = (page.into_iter())
            .filter_map(|(name, held)| Some((String::from_utf8(name).ok()?, held != 0)));
        Ok(names.collect())
    }
}
