//! The contract's defaults: a backend that implements only what is required — no atomic
//! `acquire_many`, no wait queue, no shapes — passes the mutex conformance suite (its waiters
//! poll, and several keys are taken one by one in order).

use crate::test_support::MutexOnly;

crate::conformance_suite!(MutexOnlyStore, leases);

#[derive(Default)]
struct MutexOnlyStore(MutexOnly);

impl crate::conformance::Store for MutexOnlyStore {
    type Backend = MutexOnly;
    const PAUSED_CLOCK: bool = true;

    async fn start() -> Self {
        Self::default()
    }

    async fn backend(&self) -> MutexOnly {
        self.0.clone()
    }
}
