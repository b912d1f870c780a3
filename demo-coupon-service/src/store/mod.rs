//! Where coupons live: in this process, or in Redis so that replicas share them.
//!
//! Every method is one separate step, as ordinary business code would call them: nothing here
//! makes "read, check, write" atomic. That is the lock layer's job.

mod memory;
mod redis;

pub use memory::MemoryStore;
pub use redis::RedisStore;

/// A coupon's stock as the claim handler reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stock {
    /// The stock it was created (or last reset) with.
    pub initial: i64,
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

/// The lock a write is made under: its full name in the lock store and its fencing token.
#[derive(Clone, Copy, Debug)]
pub struct Fence<'a> {
    /// The lock's name, prefix included (`LockGuard::name`).
    pub lock_name: &'a str,
    /// The writer's fencing token (`LockGuard::fence`).
    pub token: u64,
}

/// The store failed (Redis unreachable or answering nonsense).
#[derive(Debug)]
pub struct StoreError(pub String);

/// The coupon store of one demo process.
#[derive(Clone, Debug)]
pub enum CouponStore {
    /// In this process only.
    Memory(MemoryStore),
    /// In Redis, shared by every replica.
    Redis(RedisStore),
}

impl CouponStore {
    /// Creates the coupon, or resets it to `stock` with no claims.
    pub async fn reset(&self, id: &str, stock: i64) -> Result<(), StoreError> {
        match self {
            Self::Memory(store) => {
                store.reset(id, stock);
                Ok(())
            }
            Self::Redis(store) => store.reset(id, stock).await,
        }
    }

    /// The coupon's stock, `None` when there is no such coupon.
    pub async fn stock(&self, id: &str) -> Result<Option<Stock>, StoreError> {
        match self {
            Self::Memory(store) => Ok(store.stock(id)),
            Self::Redis(store) => store.stock(id).await,
        }
    }

    /// Whether `user` already holds the coupon.
    pub async fn has_claim(&self, id: &str, user: &str) -> Result<bool, StoreError> {
        match self {
            Self::Memory(store) => Ok(store.has_claim(id, user)),
            Self::Redis(store) => store.has_claim(id, user).await,
        }
    }

    /// Writes the new remaining stock and records `user`'s claim — unless `fence` is given
    /// and a newer holder has taken the coupon's lock since (checked atomically with the
    /// write). Returns whether the claim was written.
    pub async fn commit_claim(
        &self,
        id: &str,
        user: &str,
        remaining: i64,
        fence: Option<Fence<'_>>,
    ) -> Result<bool, StoreError> {
        match self {
            Self::Memory(store) => Ok(store.commit_claim(id, user, remaining, fence)),
            Self::Redis(store) => store.commit_claim(id, user, remaining, fence).await,
        }
    }

    /// Writes a coupon's remaining stock (a plain write, nothing checked).
    pub async fn set_remaining(&self, id: &str, remaining: i64) -> Result<(), StoreError> {
        match self {
            Self::Memory(store) => {
                store.set_remaining(id, remaining);
                Ok(())
            }
            Self::Redis(store) => store.set_remaining(id, remaining).await,
        }
    }

    /// Counts an audit in; returns how many run now, this one included.
    pub async fn audit_started(&self) -> Result<i64, StoreError> {
        match self {
            Self::Memory(store) => Ok(store.audit_started()),
            Self::Redis(store) => store.audits(1).await,
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
        }
    }

    /// The coupon's stock and claims, `None` when there is no such coupon.
    pub async fn summary(&self, id: &str) -> Result<Option<Summary>, StoreError> {
        match self {
            Self::Memory(store) => Ok(store.summary(id)),
            Self::Redis(store) => store.summary(id).await,
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
