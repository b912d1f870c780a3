//! Coupons in PostgreSQL or MySQL/MariaDB: the tables are created on connect, and a fenced
//! claim is refused by the database itself when a newer lock holder has read the coupon.

use std::sync::LazyLock;

use sqlx::any::AnyPoolOptions;
use sqlx::{AnyConnection, AnyPool, Connection, Row};

use super::{Stock, StoreError, Summary};

/// Which SQL the store speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// PostgreSQL: `$1` parameters, `ON CONFLICT`.
    Postgres,
    /// MySQL and MariaDB: `?` parameters, `ON DUPLICATE KEY UPDATE`.
    Mysql,
}

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

/// The store's statements in one dialect.
#[derive(Debug)]
struct Statements {
    create: Vec<&'static str>,
    upsert_coupon: String,
    delete_claims: String,
    stock: String,
    register_fence: String,
    claims_of_user: String,
    write_fenced: String,
    write_unfenced: String,
    versioned_stock: String,
    write_at_version: String,
    set_stock_at_version: String,
    insert_claim: String,
    set_stock: String,
    add_audits: String,
    audits: String,
    claims: String,
    repeated_users: String,
    publish_report: String,
    reports: String,
    forget_report: String,
    coupon_ids: String,
}

impl Statements {
    /// The statements in `dialect`. Each is written once with PostgreSQL's `$n` parameters,
    /// every one used once and in order, so that MySQL's `?` take the same binds.
    fn new(dialect: Dialect) -> Self {
        let sql = |statement: &str| match dialect {
            Dialect::Postgres => statement.to_owned(),
            Dialect::Mysql => question_marks(statement),
        };
        let (create, upsert_coupon, add_audits, publish_report) = match dialect {
            Dialect::Postgres => (
                vec![
                    "CREATE TABLE IF NOT EXISTS coupons (id text PRIMARY KEY, \
                     supply bigint NOT NULL, remaining bigint NOT NULL, \
                     last_fence bigint NOT NULL DEFAULT 0, version bigint NOT NULL DEFAULT 0)",
                    "CREATE TABLE IF NOT EXISTS claims (id bigserial PRIMARY KEY, \
                     coupon_id text NOT NULL, user_id text NOT NULL)",
                    "CREATE INDEX IF NOT EXISTS claims_by_coupon_and_user \
                     ON claims (coupon_id, user_id)",
                    "CREATE TABLE IF NOT EXISTS demo_counters \
                     (name text PRIMARY KEY, value bigint NOT NULL)",
                    "CREATE TABLE IF NOT EXISTS demo_replicas \
                     (replica text PRIMARY KEY, report text NOT NULL)",
                ],
                "INSERT INTO coupons (id, supply, remaining) VALUES ($1, $2, $3) \
                 ON CONFLICT (id) DO UPDATE SET supply = excluded.supply, \
                    remaining = excluded.remaining, version = coupons.version + 1",
                "INSERT INTO demo_counters (name, value) VALUES ('audits', $1) \
                 ON CONFLICT (name) DO UPDATE SET value = demo_counters.value + excluded.value",
                "INSERT INTO demo_replicas (replica, report) VALUES ($1, $2) \
                 ON CONFLICT (replica) DO UPDATE SET report = excluded.report",
            ),
            // Binary ids: MySQL's default collation would take `C1` and `c1` for one coupon.
            Dialect::Mysql => (
                vec![
                    "CREATE TABLE IF NOT EXISTS coupons (id VARBINARY(64) PRIMARY KEY, \
                     supply BIGINT NOT NULL, remaining BIGINT NOT NULL, \
                     last_fence BIGINT NOT NULL DEFAULT 0, version BIGINT NOT NULL DEFAULT 0) \
                     ENGINE = InnoDB",
                    "CREATE TABLE IF NOT EXISTS claims (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
                     coupon_id VARBINARY(64) NOT NULL, user_id VARBINARY(512) NOT NULL, \
                     INDEX claims_by_coupon_and_user (coupon_id, user_id)) ENGINE = InnoDB",
                    "CREATE TABLE IF NOT EXISTS demo_counters \
                     (name VARBINARY(64) PRIMARY KEY, value BIGINT NOT NULL) ENGINE = InnoDB",
                    // VARCHAR, not TEXT: sqlx's Any driver reads MySQL's TEXT as bytes.
                    "CREATE TABLE IF NOT EXISTS demo_replicas \
                     (replica VARCHAR(128) PRIMARY KEY, report VARCHAR(8192) NOT NULL) \
                     ENGINE = InnoDB",
                ],
                "INSERT INTO coupons (id, supply, remaining) VALUES ($1, $2, $3) \
                 ON DUPLICATE KEY UPDATE supply = VALUES(supply), \
                    remaining = VALUES(remaining), version = version + 1",
                "INSERT INTO demo_counters (name, value) VALUES ('audits', $1) \
                 ON DUPLICATE KEY UPDATE value = value + VALUES(value)",
                "INSERT INTO demo_replicas (replica, report) VALUES ($1, $2) \
                 ON DUPLICATE KEY UPDATE report = VALUES(report)",
            ),
        };
        Self {
            create,
            upsert_coupon: sql(upsert_coupon),
            delete_claims: sql("DELETE FROM claims WHERE coupon_id = $1"),
            stock: sql("SELECT supply, remaining FROM coupons WHERE id = $1"),
            register_fence: sql(
                "UPDATE coupons SET last_fence = greatest(last_fence, $1) WHERE id = $2",
            ),
            claims_of_user: sql(
                "SELECT count(*) FROM claims WHERE coupon_id = $1 AND user_id = $2",
            ),
            // The fence: this write commits only if no newer token has read the coupon since
            // this one registered on its read (Kleppmann's fenced write, in the database).
            write_fenced: sql(
                "UPDATE coupons SET remaining = $1, version = version + 1, last_fence = $2 \
                 WHERE id = $3 AND last_fence <= $4",
            ),
            write_unfenced: sql(
                "UPDATE coupons SET remaining = $1, version = version + 1 WHERE id = $2",
            ),
            versioned_stock: sql("SELECT supply, remaining, version FROM coupons WHERE id = $1"),
            // The optimistic lock: this write commits only if nobody wrote since the read.
            write_at_version: sql("UPDATE coupons SET remaining = $1, version = version + 1 \
                 WHERE id = $2 AND version = $3"),
            set_stock_at_version: sql(
                "UPDATE coupons SET supply = $1, remaining = $2, version = version + 1 \
                 WHERE id = $3 AND version = $4",
            ),
            insert_claim: sql("INSERT INTO claims (coupon_id, user_id) VALUES ($1, $2)"),
            set_stock: sql(
                "UPDATE coupons SET supply = $1, remaining = $2, version = version + 1 \
                 WHERE id = $3",
            ),
            add_audits: sql(add_audits),
            audits: sql("SELECT value FROM demo_counters WHERE name = 'audits'"),
            claims: sql("SELECT count(*) FROM claims WHERE coupon_id = $1"),
            repeated_users: sql(
                "SELECT count(*) FROM (SELECT user_id FROM claims WHERE coupon_id = $1 \
                 GROUP BY user_id HAVING count(*) > 1) AS repeated",
            ),
            publish_report: sql(publish_report),
            reports: sql("SELECT report FROM demo_replicas"),
            forget_report: sql("DELETE FROM demo_replicas WHERE replica = $1"),
            // MySQL's ids are binary, which sqlx's Any driver would not read as text.
            coupon_ids: match dialect {
                Dialect::Postgres => "SELECT id FROM coupons".to_owned(),
                Dialect::Mysql => "SELECT CONVERT(id USING utf8mb4) FROM coupons".to_owned(),
            },
        }
    }
}

/// `statement` with every `$n` parameter written as `?`.
fn question_marks(statement: &str) -> String {
    let mut out = String::with_capacity(statement.len());
    let mut chars = statement.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
            while chars.peek().is_some_and(char::is_ascii_digit) {
                chars.next();
            }
            out.push('?');
        } else {
            out.push(c);
        }
    }
    out
}

static POSTGRES: LazyLock<Statements> = LazyLock::new(|| Statements::new(Dialect::Postgres));
static MYSQL: LazyLock<Statements> = LazyLock::new(|| Statements::new(Dialect::Mysql));

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        Self(error.to_string())
    }
}

impl SqlStore {
    /// Connects to the database at `url` (`postgres://…` or `mysql://…`) and creates the
    /// tables that are missing.
    pub async fn connect(url: &str, dialect: Dialect) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        // One connection first: a pool would retry a refused connection until its timeout and
        // then say only that it timed out.
        AnyConnection::connect(url).await?.close().await?;
        let pool = AnyPoolOptions::new()
            .max_connections(10)
            .connect(url)
            .await?;
        let sql: &'static Statements = match dialect {
            Dialect::Postgres => &POSTGRES,
            Dialect::Mysql => &MYSQL,
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mysql_statements_take_question_marks_in_the_same_order() {
        assert_eq!(
            question_marks("UPDATE t SET a = $1 WHERE id = $2 AND b <= $3"),
            "UPDATE t SET a = ? WHERE id = ? AND b <= ?"
        );
        assert_eq!(question_marks("SELECT '$'"), "SELECT '$'");
    }
}
