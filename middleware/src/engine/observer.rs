//! Who watches the holds this process grants and ends: nobody, unless a tool attaches itself
//! (`testing::history`, to check mutual exclusion under faults). The engine only tells the
//! watcher, at one atomic load per hold when none is attached; it knows nothing of what the
//! watcher does.

use std::sync::OnceLock;

use crate::engine::guard::LockGuard;

/// What an observer of holds hears.
pub(crate) trait HoldObserver: Send + Sync {
    /// The hold of `guard` began, before its work runs: the number the observer gives it.
    fn granted(&self, guard: &LockGuard) -> u64;

    /// The store said hold number `hold`'s lock was no longer its own.
    fn lost(&self, hold: u64);

    /// Hold number `hold` ended, its lease `held` until then or not.
    fn ended(&self, hold: u64, held: bool);
}

static OBSERVER: OnceLock<&'static dyn HoldObserver> = OnceLock::new();

/// Attaches `observer` to every hold of this process from now on; `false` if one already is.
#[cfg(any(test, feature = "test-util"))]
pub(crate) fn attach(observer: &'static dyn HoldObserver) -> bool {
    OBSERVER.set(observer).is_ok()
}

/// Tells the observer, if any, that the hold of `guard` began: its number.
pub(crate) fn granted(guard: &LockGuard) -> Option<u64> {
    OBSERVER.get().map(|observer| observer.granted(guard))
}

/// Tells the observer, if any, that hold number `hold` was lost.
pub(crate) fn lost(hold: Option<u64>) {
    if let (Some(observer), Some(hold)) = (OBSERVER.get(), hold) {
        observer.lost(hold);
    }
}

/// Tells the observer, if any, that hold number `hold` ended.
pub(crate) fn ended(hold: Option<u64>, held: bool) {
    if let (Some(observer), Some(hold)) = (OBSERVER.get(), hold) {
        observer.ended(hold, held);
    }
}
