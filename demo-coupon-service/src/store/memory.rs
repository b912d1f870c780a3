use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Stock, Summary, duplicates};

/// Coupons in this process's memory (the embedded mode).
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    coupons: Arc<Mutex<HashMap<String, Coupon>>>,
}

#[derive(Debug)]
struct Coupon {
    stock: Stock,
    claims: Vec<String>,
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

    pub(super) fn set_remaining(&self, id: &str, remaining: i64) {
        if let Some(coupon) = self.coupons().get_mut(id) {
            coupon.stock.remaining = remaining;
        }
    }

    pub(super) fn record_claim(&self, id: &str, user: &str) {
        if let Some(coupon) = self.coupons().get_mut(id) {
            coupon.claims.push(user.to_owned());
        }
    }

    pub(super) fn summary(&self, id: &str) -> Option<Summary> {
        self.coupons().get(id).map(|coupon| Summary {
            stock: coupon.stock,
            claimed: i64::try_from(coupon.claims.len()).unwrap_or(i64::MAX),
            duplicate_claims: duplicates(coupon.claims.iter().map(String::as_str)),
        })
    }
}
