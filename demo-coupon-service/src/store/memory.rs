use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Stock, Summary, duplicates};

/// Coupons in this process's memory (the embedded mode).
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    coupons: Arc<Mutex<HashMap<String, Coupon>>>,
    audits: Arc<AtomicI64>,
    reports: Arc<Mutex<HashMap<String, String>>>,
}

#[derive(Debug)]
struct Coupon {
    stock: Stock,
    claims: Vec<String>,
    /// The largest fencing token that has read the coupon for a claim.
    fence: u64,
}

impl MemoryStore {
    fn coupons(&self) -> MutexGuard<'_, HashMap<String, Coupon>> {
        // Each update below is a single assignment or push: a poisoned map is still whole.
        self.coupons
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn reset(&self, id: &str, stock: i64) {
        let coupon = Coupon {
            stock: Stock {
                supply: stock,
                remaining: stock,
            },
            claims: Vec::new(),
            fence: 0,
        };
        let mut coupons = self.coupons();
        let fence = coupons.get(id).map_or(0, |old| old.fence);
        coupons.insert(id.to_owned(), Coupon { fence, ..coupon });
    }

    pub(super) fn stock(&self, id: &str, fence: Option<u64>) -> Option<Stock> {
        let mut coupons = self.coupons();
        let coupon = coupons.get_mut(id)?;
        coupon.fence = coupon.fence.max(fence.unwrap_or(0));
        Some(coupon.stock)
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
        fence: Option<u64>,
    ) -> bool {
        let mut coupons = self.coupons();
        let Some(coupon) = coupons.get_mut(id) else {
            return true;
        };
        if fence.is_some_and(|fence| fence < coupon.fence) {
            return false;
        }
        coupon.stock.remaining = remaining;
        coupon.claims.push(user.to_owned());
        true
    }

    pub(super) fn set_stock(&self, id: &str, stock: Stock) {
        if let Some(coupon) = self.coupons().get_mut(id) {
            coupon.stock = stock;
        }
    }

    pub(super) fn audit_started(&self) -> i64 {
        self.audits.fetch_add(1, Ordering::SeqCst) + 1
    }

    pub(super) fn audit_finished(&self) {
        self.audits.fetch_sub(1, Ordering::SeqCst);
    }

    pub(super) fn publish_report(&self, replica: &str, report: &str) {
        let mut reports = (self.reports.lock()).unwrap_or_else(|poisoned| poisoned.into_inner());
        reports.insert(replica.to_owned(), report.to_owned());
    }

    pub(super) fn reports(&self) -> Vec<String> {
        let reports = (self.reports.lock()).unwrap_or_else(|poisoned| poisoned.into_inner());
        reports.values().cloned().collect()
    }

    pub(super) fn forget_reports(&self, replicas: &[String]) {
        let mut reports = (self.reports.lock()).unwrap_or_else(|poisoned| poisoned.into_inner());
        reports.retain(|replica, _| !replicas.contains(replica));
    }

    pub(super) fn coupon_ids(&self) -> Vec<String> {
        self.coupons().keys().cloned().collect()
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
    use super::*;

    #[test]
    fn a_stale_holders_claim_is_refused_once_a_newer_holder_has_read() {
        let store = MemoryStore::default();
        store.reset("c1", 1);
        let (stale, fresh) = (7, 8);
        store.stock("c1", Some(stale));
        store.stock("c1", Some(fresh));

        let stale_before = store.commit_claim("c1", "old", 0, Some(stale));
        let fresh_write = store.commit_claim("c1", "new", 0, Some(fresh));
        let stale_after = store.commit_claim("c1", "old", 0, Some(stale));

        assert_eq!(
            (stale_before, fresh_write, stale_after),
            (false, true, false)
        );
        let summary = store.summary("c1").unwrap();
        assert_eq!((summary.claimed, summary.stock.remaining), (1, 0));
    }

    #[test]
    fn a_stale_write_before_the_newer_holder_reads_lands_and_is_seen() {
        let store = MemoryStore::default();
        store.reset("c1", 2);
        let (stale, fresh) = (7, 8);
        let seen_by_stale = store.stock("c1", Some(stale)).unwrap();

        assert!(store.commit_claim("c1", "old", seen_by_stale.remaining - 1, Some(stale)));
        let seen_by_fresh = store.stock("c1", Some(fresh)).unwrap();

        assert_eq!(
            seen_by_fresh.remaining, 1,
            "the newer holder reads the stale write"
        );
    }

    #[test]
    fn a_reset_keeps_the_registered_fence() {
        let store = MemoryStore::default();
        store.reset("c1", 1);
        store.stock("c1", Some(9));

        store.reset("c1", 5);

        assert!(!store.commit_claim("c1", "old", 4, Some(8)));
    }

    #[test]
    fn unfenced_writes_always_land() {
        let store = MemoryStore::default();
        store.reset("c1", 1);
        assert!(store.commit_claim("c1", "a", 0, None));
        assert!(store.commit_claim("c1", "b", 0, None));
        assert_eq!(store.summary("c1").unwrap().claimed, 2);
    }
}
