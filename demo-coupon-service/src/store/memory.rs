use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tower_lock::MemoryBackend;

use super::{Fence, Stock, Summary, duplicates};

/// Coupons in this process's memory (the embedded mode).
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    coupons: Arc<Mutex<HashMap<String, Coupon>>>,
    locks: Option<MemoryBackend>,
    audits: Arc<AtomicI64>,
}

#[derive(Debug)]
struct Coupon {
    stock: Stock,
    claims: Vec<String>,
}

impl MemoryStore {
    /// A store whose fenced writes check the fencing tokens issued by `locks`.
    pub fn fenced_by(locks: MemoryBackend) -> Self {
        Self {
            locks: Some(locks),
            ..Self::default()
        }
    }
    fn coupons(&self) -> MutexGuard<'_, HashMap<String, Coupon>> {
        // Each update below is a single assignment or push: a poisoned map is still whole.
        self.coupons
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn reset(&self, id: &str, stock: i64) {
        let coupon = Coupon {
            stock: Stock {
                initial: stock,
                remaining: stock,
            },
            claims: Vec::new(),
        };
        self.coupons().insert(id.to_owned(), coupon);
    }

    pub(super) fn stock(&self, id: &str) -> Option<Stock> {
        self.coupons().get(id).map(|coupon| coupon.stock)
    }

    pub(super) fn has_claim(&self, id: &str, user: &str) -> bool {
        self.coupons()
            .get(id)
            .is_some_and(|coupon| coupon.claims.iter().any(|claim| claim == user))
    }

    pub(super) fn commit_claim(
        &self,
        id: &str,
        user: &str,
        remaining: i64,
        fence: Option<Fence<'_>>,
    ) -> bool {
        let write = || {
            if let Some(coupon) = self.coupons().get_mut(id) {
                coupon.stock.remaining = remaining;
                coupon.claims.push(user.to_owned());
            }
        };
        match (fence, &self.locks) {
            (Some(fence), Some(locks)) => {
                locks.fenced(fence.lock_name, fence.token, write).is_some()
            }
            _ => {
                write();
                true
            }
        }
    }

    pub(super) fn set_remaining(&self, id: &str, remaining: i64) {
        if let Some(coupon) = self.coupons().get_mut(id) {
            coupon.stock.remaining = remaining;
        }
    }

    pub(super) fn audit_started(&self) -> i64 {
        self.audits.fetch_add(1, Ordering::SeqCst) + 1
    }

    pub(super) fn audit_finished(&self) {
        self.audits.fetch_sub(1, Ordering::SeqCst);
    }

    pub(super) fn summary(&self, id: &str) -> Option<Summary> {
        self.coupons().get(id).map(|coupon| Summary {
            stock: coupon.stock,
            claimed: i64::try_from(coupon.claims.len()).unwrap_or(i64::MAX),
            duplicate_claims: duplicates(coupon.claims.iter().map(String::as_str)),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tower_lock::{Acquire, LockBackend, OwnerToken};

    use super::*;

    async fn fence(locks: &MemoryBackend, ttl: Duration) -> u64 {
        match locks
            .acquire("lock:coupon:c1", OwnerToken::new(), ttl)
            .await
            .unwrap()
        {
            Acquire::Acquired { fence } => fence,
            Acquire::Busy { .. } => panic!("the lock should be free"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_holders_claim_is_refused_whether_it_writes_before_or_after_the_new_holder() {
        let locks = MemoryBackend::new();
        let store = MemoryStore::fenced_by(locks.clone());
        store.reset("c1", 1);
        let ttl = Duration::from_millis(100);
        let stale = fence(&locks, ttl).await;
        tokio::time::sleep(ttl).await;
        let fresh = fence(&locks, ttl).await;
        let fenced = |token| {
            Some(Fence {
                lock_name: "lock:coupon:c1",
                token,
            })
        };

        let stale_first = store.commit_claim("c1", "old", 0, fenced(stale));
        let fresh_write = store.commit_claim("c1", "new", 0, fenced(fresh));
        let stale_after = store.commit_claim("c1", "old", 0, fenced(stale));

        assert_eq!(
            (stale_first, fresh_write, stale_after),
            (false, true, false)
        );
        let summary = store.summary("c1").unwrap();
        assert_eq!((summary.claimed, summary.stock.remaining), (1, 0));
    }

    #[test]
    fn unfenced_writes_always_land() {
        let store = MemoryStore::fenced_by(MemoryBackend::new());
        store.reset("c1", 1);
        assert!(store.commit_claim("c1", "a", 0, None));
        assert!(store.commit_claim("c1", "b", 0, None));
        assert_eq!(store.summary("c1").unwrap().claimed, 2);
    }
}
