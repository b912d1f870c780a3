//! Who watches the holds a locker grants and ends: nobody, unless a tool attaches itself
//! (`testing::history`, to check mutual exclusion under faults) — to every locker of the
//! process, or to one locker (a simulated process among several in one OS process). The engine
//! only tells the watcher, at one atomic load per hold when none is attached; it knows nothing
//! of what the watcher does.

use std::fmt;
use std::sync::{Arc, OnceLock};

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

/// Attaches `observer` to every hold of this process from now on (but those of a locker with
/// an observer of its own); `false` if one already is.
#[cfg(any(test, feature = "test-util"))]
pub(crate) fn attach(observer: &'static dyn HoldObserver) -> bool {
    OBSERVER.set(observer).is_ok()
}

/// The observer of one locker's holds: its own, if it was given one, else the process's.
#[derive(Clone, Default)]
pub(crate) struct Observer(Option<Arc<dyn HoldObserver>>);

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Observer(own)"
        } else {
            "Observer(process)"
        })
    }
}

impl Observer {
    /// A locker's own observer.
    #[cfg(any(test, feature = "test-util"))]
    pub(crate) fn own(observer: Arc<dyn HoldObserver>) -> Self {
        Self(Some(observer))
    }

    fn get(&self) -> Option<&dyn HoldObserver> {
        self.0.as_deref().or_else(|| OBSERVER.get().copied())
    }

    /// Tells the observer, if any, that the hold of `guard` began: its number.
    pub(crate) fn granted(&self, guard: &LockGuard) -> Option<u64> {
        self.get().map(|observer| observer.granted(guard))
    }

    /// Tells the observer, if any, that hold number `hold` was lost.
    pub(crate) fn lost(&self, hold: Option<u64>) {
        if let (Some(observer), Some(hold)) = (self.get(), hold) {
            observer.lost(hold);
        }
    }

    /// Tells the observer, if any, that hold number `hold` ended.
    pub(crate) fn ended(&self, hold: Option<u64>, held: bool) {
        if let (Some(observer), Some(hold)) = (self.get(), hold) {
            observer.ended(hold, held);
        }
    }
}
