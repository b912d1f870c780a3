//! Coupons in PostgreSQL or MySQL/MariaDB: the tables are created on connect, and a fenced
//! claim is refused by the database itself when a newer lock holder has read the coupon.

use sqlx::any::AnyPoolOptions;
use sqlx::{AnyConnection, AnyPool, Connection, Row};
use tower_lock::backend::CONNECT_TIMEOUT;

use super::sql_statements::{Dialect, Statements};
use super::{Stock, StoreError, Summary};

/// Coupons in SQL tables shared by every replica on the same database:
///
/// * `coupons (id, supply, remaining, last_fence, version)`: `last_fence` is the largest
///   fencing token that has read the coupon for a claim; `version` counts its writes;
/// * `claims (id, coupon_id, user_id)`: one row per claim record, with no unique key, so that
///   the unlocked control can show duplicate claims;
/// * `demo_counters (name, value)`: how many audits run.
#[derive(Clone, Debug)]
pub struct SqlStore {
    pool: AnyPool,
    sql: &'static Statements,
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        Self(error.to_string())
    }
}

impl SqlStore {
    /// Connects to the database at `url` (`postgres://…` or `mysql://…`) and creates the
    /// tables that are missing — or gives up after tower-lock's [`CONNECT_TIMEOUT`], as the
    /// lock store's connect does, on a server that accepts and never answers.
    pub async fn connect(url: &str, dialect: Dialect) -> Result<Self, StoreError> {
        let connecting = Self::connect_now(url, dialect);
        match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
            Ok(connected) => connected,
            Err(_) => Err(StoreError(format!("no answer within {CONNECT_TIMEOUT:?}"))),
        }
    }

    async fn connect_now(url: &str, dialect: Dialect) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        // One connection first: a pool would retry a refused connection until its timeout and
        // then say only that it timed out.
        AnyConnection::connect(url).await?.close().await?;
        let pool = AnyPoolOptions::new()
            .max_connections(10)
            .connect(url)
            .await?;
        let sql = dialect.statements();
        for statement in &sql.create {
            // Replicas starting together can collide in PostgreSQL's catalog while creating
            // the same table; the second try finds it made.
            if sqlx::query(statement).execute(&pool).await.is_err() {
                sqlx::query(statement).execute(&pool).await?;
            }
        }
        Ok(Self { pool, sql })
    }

    pub(super) async fn reset(&self, id: &str, stock: i64) -> Result<(), StoreError> {
        let mut transaction = self.pool.begin().await?;
        sqlx::query(&self.sql.delete_claims)
            .bind(id)
            .execute(&mut *transaction)
            .await?;
        sqlx::query(&self.sql.upsert_coupon)
            .bind(id)
            .bind(stock)
            .bind(stock)
            .execute(&mut *transaction)
            .await?;
        Ok(transaction.commit().await?)
    }

    /// Registers `fence` on the coupon first (the largest token that has read it), then
    /// reads: from the register on, the writes of every older token are refused.
    pub(super) async fn stock(
        &self,
        id: &str,
        fence: Option<u64>,
    ) -> Result<Option<Stock>, StoreError> {
        if let Some(fence) = fence {
            sqlx::query(&self.sql.register_fence)
                .bind(signed(fence))
                .bind(id)
                .execute(&self.pool)
                .await?;
        }
        let row = sqlx::query(&self.sql.stock)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match row {
            Some(row) => Some(Stock {
                supply: row.try_get(0)?,
                remaining: row.try_get(1)?,
            }),
            None => None,
        })
    }

    pub(super) async fn has_claim(&self, id: &str, user: &str) -> Result<bool, StoreError> {
        let claims: i64 = sqlx::query_scalar(&self.sql.claims_of_user)
            .bind(id)
            .bind(user)
            .fetch_one(&self.pool)
            .await?;
        Ok(claims > 0)
    }

    /// Writes the remaining stock and inserts the claim in one transaction; with `fence`,
    /// only if no newer token has read the coupon.
    pub(super) async fn commit_claim(
        &self,
        id: &str,
        user: &str,
        remaining: i64,
        fence: Option<u64>,
    ) -> Result<bool, StoreError> {
        let mut transaction = self.pool.begin().await?;
        let written = match fence {
            Some(fence) => {
                sqlx::query(&self.sql.write_fenced)
                    .bind(remaining)
                    .bind(signed(fence))
                    .bind(id)
                    .bind(signed(fence))
                    .execute(&mut *transaction)
                    .await?
            }
            None => {
                sqlx::query(&self.sql.write_unfenced)
                    .bind(remaining)
                    .bind(id)
                    .execute(&mut *transaction)
                    .await?
            }
        };
        if written.rows_affected() == 0 {
            transaction.rollback().await?;
            return Ok(false);
        }
        sqlx::query(&self.sql.insert_claim)
            .bind(id)
            .bind(user)
            .execute(&mut *transaction)
            .await?;
        transaction.commit().await?;
        Ok(true)
    }

    /// The coupon's stock and version (how many writes it has had), `None` when there is no
    /// such coupon: the optimistic mode's read.
    pub async fn versioned_stock(&self, id: &str) -> Result<Option<Versioned>, StoreError> {
        let row = sqlx::query(&self.sql.versioned_stock)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match row {
            Some(row) => Some(Versioned {
                stock: Stock {
                    supply: row.try_get(0)?,
                    remaining: row.try_get(1)?,
                },
                version: row.try_get(2)?,
            }),
            None => None,
        })
    }

    /// Writes the remaining stock and inserts the claim in one transaction, only if the coupon
    /// is still at `version` (nobody wrote since it was read). Returns whether it was written.
    pub async fn commit_claim_at(
        &self,
        id: &str,
        user: &str,
        remaining: i64,
        version: i64,
    ) -> Result<bool, StoreError> {
        let mut transaction = self.pool.begin().await?;
        let written = sqlx::query(&self.sql.write_at_version)
            .bind(remaining)
            .bind(id)
            .bind(version)
            .execute(&mut *transaction)
            .await?;
        if written.rows_affected() == 0 {
            transaction.rollback().await?;
            return Ok(false);
        }
        sqlx::query(&self.sql.insert_claim)
            .bind(id)
            .bind(user)
            .execute(&mut *transaction)
            .await?;
        transaction.commit().await?;
        Ok(true)
    }

    /// Writes the stocks of several coupons in one transaction, only if each is still at the
    /// version it was read at. Returns whether they were written. The rows are written in the
    /// order of their ids, so that two transactions over the same coupons cannot deadlock.
    pub async fn set_stocks_at(&self, writes: &[(&str, Versioned)]) -> Result<bool, StoreError> {
        let mut writes = writes.to_vec();
        writes.sort_unstable_by_key(|(id, _)| *id);
        let mut transaction = self.pool.begin().await?;
        for (id, Versioned { stock, version }) in writes {
            let written = sqlx::query(&self.sql.set_stock_at_version)
                .bind(stock.supply)
                .bind(stock.remaining)
                .bind(id)
                .bind(version)
                .execute(&mut *transaction)
                .await?;
            if written.rows_affected() == 0 {
                transaction.rollback().await?;
                return Ok(false);
            }
        }
        transaction.commit().await?;
        Ok(true)
    }

    pub(super) async fn set_stock(&self, id: &str, stock: Stock) -> Result<(), StoreError> {
        sqlx::query(&self.sql.set_stock)
            .bind(stock.supply)
            .bind(stock.remaining)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Adds `delta` to the count of running audits; returns the count then.
    pub(super) async fn audits(&self, delta: i64) -> Result<i64, StoreError> {
        sqlx::query(&self.sql.add_audits)
            .bind(delta)
            .execute(&self.pool)
            .await?;
        Ok(sqlx::query_scalar(&self.sql.audits)
            .fetch_one(&self.pool)
            .await?)
    }

    pub(super) async fn publish_report(
        &self,
        replica: &str,
        report: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(&self.sql.publish_report)
            .bind(replica.to_owned())
            .bind(report.to_owned())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub(super) async fn coupon_ids(&self) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(&self.sql.coupon_ids)
            .fetch_all(&self.pool)
            .await?)
    }

    pub(super) async fn reports(&self) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(&self.sql.reports)
            .fetch_all(&self.pool)
            .await?)
    }

    pub(super) async fn forget_reports(&self, replicas: &[String]) -> Result<(), StoreError> {
        for replica in replicas {
            sqlx::query(&self.sql.forget_report)
                .bind(replica.clone())
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    pub(super) async fn summary(&self, id: &str) -> Result<Option<Summary>, StoreError> {
        let Some(stock) = self.stock(id, None).await? else {
            return Ok(None);
        };
        let count = |statement: &'static str| {
            sqlx::query_scalar::<_, i64>(statement)
                .bind(id.to_owned())
                .fetch_one(&self.pool)
        };
        Ok(Some(Summary {
            stock,
            claimed: count(&self.sql.claims).await?,
            duplicate_claims: count(&self.sql.repeated_users).await?,
        }))
    }
}

/// A coupon's stock with the version it was read at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Versioned {
    /// The stock.
    pub stock: Stock,
    /// How many writes the coupon had when it was read.
    pub version: i64,
}

/// A fencing token as the `bigint` columns hold it.
fn signed(fence: u64) -> i64 {
    i64::try_from(fence).unwrap_or(i64::MAX)
}
