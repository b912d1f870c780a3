//! Where coupons live: in this process, or in Redis, PostgreSQL or MySQL/MariaDB so that
//! replicas share them.
//!
//! Every method is one separate step, as ordinary business code would call them: nothing here
//! makes "read, check, write" atomic. That is the lock layer's job.

mod memory;
mod redis;
mod sql;
mod sql_statements;

pub use memory::MemoryStore;
pub use redis::{RedisConnection, RedisStore};
pub use sql::{SqlStore, Versioned};
pub use sql_statements::Dialect;

/// A coupon's stock as the claim handler reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stock {
    /// How many units it may give out: the stock it was created (or last reset) with, plus
    /// what transfers moved in, minus what they moved out. Claims beyond it are oversold.
    pub supply: i64,
    /// What is left, as last written.
    pub remaining: i64,
}

/// Everything `GET /coupons/{id}` reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The stock.
    pub stock: Stock,
    /// How many claim records exist.
    pub claimed: i64,
    /// How many users hold the coupon more than once.
    pub duplicate_claims: i64,
}

/// The store failed (unreachable, or answering nonsense).
#[derive(Debug)]
pub struct StoreError(pub String);

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The coupon store of one demo process.
#[derive(Clone, Debug)]
pub enum CouponStore {
    /// In this process only.
    Memory(MemoryStore),
    /// In Redis (one node or a cluster), shared by every replica.
    Redis(RedisStore),
    /// In PostgreSQL or MySQL/MariaDB tables, shared by every replica.
    Sql(SqlStore),
}

impl CouponStore {
    /// The SQL store, for what only it can do (the optimistic mode's versioned writes).
    pub fn sql(&self) -> Option<&SqlStore> {
        match self {
            Self::Sql(store) => Some(store),
            Self::Memory(_) | Self::Redis(_) => None,
        }
    }

    /// Creates the coupon, or resets it to `stock` with no claims.
    pub async fn reset(&self, id: &str, stock: i64) -> Result<(), StoreError> {
        match self {
            Self::Memory(store) => {
                store.reset(id, stock);
                Ok(())
            }
            Self::Redis(store) => store.reset(id, stock).await,
            Self::Sql(store) => store.reset(id, stock).await,
        }
    }

    /// The coupon's stock, `None` when there is no such coupon.
    ///
    /// With a fencing token (`LockGuard::fence`), the read registers it first, atomically: the
    /// coupon remembers the largest token that has read it, and from then on refuses the
    /// writes of every older one. Registering on read, not only on write, is what stops a
    /// stale holder whose lease ran out from writing after a newer holder has read but before
    /// that one writes (see `middleware/docs/fencing.md`).
    pub async fn stock(&self, id: &str, fence: Option<u64>) -> Result<Option<Stock>, StoreError> {
        match self {
            Self::Memory(store) => Ok(store.stock(id, fence)),
            Self::Redis(store) => store.stock(id, fence).await,
            Self::Sql(store) => store.stock(id, fence).await,
        }
    }

    /// Whether `user` already holds the coupon.
    pub async fn has_claim(&self, id: &str, user: &str) -> Result<bool, StoreError> {
        match self {
            Self::Memory(store) => Ok(store.has_claim(id, user)),
            Self::Redis(store) => store.has_claim(id, user).await,
            Self::Sql(store) => store.has_claim(id, user).await,
        }
    }

    /// Writes the new remaining stock and records `user`'s claim — unless `fence` is given
    /// and a newer token has read the coupon since (checked atomically with the write).
    /// Returns whether the claim was written.
    pub async fn commit_claim(
        &self,
        id: &str,
        user: &str,
        remaining: i64,
        fence: Option<u64>,
    ) -> Result<bool, StoreError> {
        match self {
            Self::Memory(store) => Ok(store.commit_claim(id, user, remaining, fence)),
            Self::Redis(store) => store.commit_claim(id, user, remaining, fence).await,
            Self::Sql(store) => store.commit_claim(id, user, remaining, fence).await,
        }
    }

    /// Writes a coupon's supply and remaining stock (a plain write, nothing checked).
    pub async fn set_stock(&self, id: &str, stock: Stock) -> Result<(), StoreError> {
        match self {
            Self::Memory(store) => {
                store.set_stock(id, stock);
                Ok(())
            }
            Self::Redis(store) => store.set_stock(id, stock).await,
            Self::Sql(store) => store.set_stock(id, stock).await,
        }
    }

    /// Counts an audit in; returns how many run now, this one included.
    pub async fn audit_started(&self) -> Result<i64, StoreError> {
        match self {
            Self::Memory(store) => Ok(store.audit_started()),
            Self::Redis(store) => store.audits(1).await,
            Self::Sql(store) => store.audits(1).await,
        }
    }

    /// Counts an audit out.
    pub async fn audit_finished(&self) -> Result<(), StoreError> {
        match self {
            Self::Memory(store) => {
                store.audit_finished();
                Ok(())
            }
            Self::Redis(store) => store.audits(-1).await.map(drop),
            Self::Sql(store) => store.audits(-1).await.map(drop),
        }
    }

    /// Publishes `report` (JSON) as replica `replica`'s latest, for every replica's dashboard.
    pub async fn publish_report(&self, replica: &str, report: &str) -> Result<(), StoreError> {
        match self {
            Self::Memory(store) => {
                store.publish_report(replica, report);
                Ok(())
            }
            Self::Redis(store) => store.publish_report(replica, report).await,
            Self::Sql(store) => store.publish_report(replica, report).await,
        }
    }

    /// The id of every coupon, in no particular order.
    pub async fn coupon_ids(&self) -> Result<Vec<String>, StoreError> {
        match self {
            Self::Memory(store) => Ok(store.coupon_ids()),
            Self::Redis(store) => store.coupon_ids().await,
            Self::Sql(store) => store.coupon_ids().await,
        }
    }

    /// Every replica's latest report, as published.
    pub async fn reports(&self) -> Result<Vec<String>, StoreError> {
        match self {
            Self::Memory(store) => Ok(store.reports()),
            Self::Redis(store) => store.reports().await,
            Self::Sql(store) => store.reports().await,
        }
    }

    /// Deletes the reports of `replicas` (replicas that stopped long ago).
    pub async fn forget_reports(&self, replicas: &[String]) -> Result<(), StoreError> {
        match self {
            Self::Memory(store) => {
                store.forget_reports(replicas);
                Ok(())
            }
            Self::Redis(store) => store.forget_reports(replicas).await,
            Self::Sql(store) => store.forget_reports(replicas).await,
        }
    }

    /// The coupon's stock and claims, `None` when there is no such coupon.
    pub async fn summary(&self, id: &str) -> Result<Option<Summary>, StoreError> {
        match self {
            Self::Memory(store) => Ok(store.summary(id)),
            Self::Redis(store) => store.summary(id).await,
            Self::Sql(store) => store.summary(id).await,
        }
    }
}

/// Counts users that appear more than once among `claims`.
fn duplicates<'a>(claims: impl IntoIterator<Item = &'a str>) -> i64 {
    let mut seen = std::collections::HashMap::<&str, u32>::new();
    for user in claims {
        *seen.entry(user).or_default() += 1;
    }
    let repeated = seen.values().filter(|count| **count > 1).count();
    i64::try_from(repeated).unwrap_or(i64::MAX)
}
