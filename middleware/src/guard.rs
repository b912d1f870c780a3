//! The held lock: what handlers see of it, and the obligation to release it.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::lease::Lease;
use crate::{Hold, LockBackend, OwnerToken};

/// The lock a request holds, put in its extensions for the handler.
///
/// Read it with axum's `Extension<LockGuard>` extractor (or `request.extensions()`). Clones are
/// cheap and only describe the lock: it is released by the middleware when the inner service
/// finishes or its future is dropped, never by dropping a `LockGuard`.
///
/// While the handler runs, the layer renews the lease every TTL/3. If a renewal finds the lock
/// taken, or no renewal is confirmed before the local lease deadline (the store is down, the
/// process was paused), the lease is *lost*: [`is_held`](Self::is_held) turns false and
/// [`lost`](Self::lost) resolves. With the default `OnLost::Abort` the handler is dropped at
/// its next await point; with `OnLost::Continue` it can check these itself.
///
/// # Example
///
/// ```
/// use axum::{Extension, Router, routing::post};
/// use tower_lock::{LockGuard, LockLayer, MemoryBackend, key::path};
///
/// async fn claim(Extension(lock): Extension<LockGuard>) -> String {
///     // Pass the fence to the store you write to, so a stale holder's writes are refused.
///     format!("holding {} with fence {}", lock.key(), lock.fence())
/// }
///
/// let app: Router = Router::new()
///     .route("/coupons/{id}/claim", post(claim))
///     .route_layer(LockLayer::new(MemoryBackend::new(), path("id")));
/// ```
#[derive(Clone)]
pub struct LockGuard {
    inner: Arc<GuardInfo>,
}

struct GuardInfo {
    /// Full lock names, sorted; one unless the extractor returned several keys.
    names: Vec<Box<str>>,
    key_start: usize,
    token: OwnerToken,
    /// One per name, in the same order.
    fences: Vec<u64>,
    hold: Hold,
    lease: Lease,
}

impl LockGuard {
    /// A guard of the locks `names` (at least one), held with `fences` (one per name).
    pub(crate) fn new(
        names: Vec<String>,
        prefix_len: usize,
        token: OwnerToken,
        (fences, hold): (Vec<u64>, Hold),
        lease: Lease,
    ) -> Self {
        debug_assert!(!names.is_empty() && names.len() == fences.len());
        Self {
            inner: Arc::new(GuardInfo {
                names: names.into_iter().map(String::into_boxed_str).collect(),
                key_start: prefix_len,
                token,
                fences,
                hold,
                lease,
            }),
        }
    }

    /// Every key this request holds, sorted: one, or several when the extractor returned
    /// several (all taken together, or none).
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.names().map(|name| &name[self.inner.key_start..])
    }

    /// Every full lock name this request holds, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.inner.names.iter().map(|name| &**name)
    }

    /// The fencing token of `key`, one of [`keys`](Self::keys).
    pub fn fence_of(&self, key: &str) -> Option<u64> {
        let index = self.keys().position(|held| held == key)?;
        self.inner.fences.get(index).copied()
    }

    /// What this request holds: the key alone ([`Hold::Exclusive`], the mutex, or
    /// [`Hold::Write`]), a share of it ([`Hold::Read`]), or one of its permits
    /// ([`Hold::Permit`]).
    pub fn hold(&self) -> Hold {
        self.inner.hold
    }

    pub(crate) fn lease(&self) -> &Lease {
        &self.inner.lease
    }

    /// The key the extractor produced, e.g. `coupon:42` (with several keys, the first).
    pub fn key(&self) -> &str {
        &self.name()[self.inner.key_start..]
    }

    /// The lock's full name in the store: the layer's prefix and the key, e.g. `lock:coupon:42`
    /// (with several keys, the first).
    pub fn name(&self) -> &str {
        &self.inner.names[0]
    }

    /// This holder's owner token.
    pub fn token(&self) -> OwnerToken {
        self.inner.token
    }

    /// The fencing token: strictly larger than that of every earlier holder of this key. Only
    /// exclusive holds (mutex, writer) get one; shared holds (reader, permit) report 0, as do
    /// backends with fencing switched off.
    ///
    /// A store that remembers the largest fence that has read a resource, and refuses writes
    /// carrying a smaller one, cannot be written by a holder whose lease ran out while it was
    /// paused (see [`fencing`](crate::fencing)).
    pub fn fence(&self) -> u64 {
        self.inner.fences[0]
    }

    /// Whether the lease is still certainly ours: not lost, not released, and its local
    /// deadline (last confirmed acquire or renewal + TTL, minus a drift margin) not passed.
    ///
    /// A `true` is no permission to write without a fence: the process can pause right after
    /// asking. Stores that matter should check [`fence`](Self::fence).
    pub fn is_held(&self) -> bool {
        self.inner.lease.is_held()
    }

    /// Resolves once the lock is no longer held: lost (taken by another holder, or its deadline
    /// passed without a confirmed renewal), or released after the request finished.
    ///
    /// # Example
    ///
    /// Stop long work when the lock is lost (useful with `OnLost::Continue`):
    ///
    /// ```
    /// use tower_lock::LockGuard;
    ///
    /// async fn export(lock: LockGuard) -> Result<(), &'static str> {
    ///     tokio::select! {
    ///         () = lock.lost() => Err("lost the lock; stopped"),
    ///         () = tokio::time::sleep(std::time::Duration::from_millis(10)) => Ok(()),
    ///     }
    /// }
    /// ```
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.inner.lease.ended()
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name())
            .field("fence", &self.fence())
            .field("held", &self.is_held())
            .finish_non_exhaustive()
    }
}

/// Every lock the request holds, outermost first: a nested layer that resolves to a name in
/// here passes the request through instead of waiting for itself.
#[derive(Clone, Debug, Default)]
pub(crate) struct HeldLocks(Vec<LockGuard>);

impl HeldLocks {
    pub(crate) fn holds(&self, name: &str) -> bool {
        self.0
            .iter()
            .any(|guard| guard.names().any(|held| held == name))
    }

    pub(crate) fn with(&self, guard: LockGuard) -> Self {
        let mut held = self.0.clone();
        held.push(guard);
        Self(held)
    }
}

/// The duty to release a lock: done explicitly with [`release`](Self::release) when the inner
/// service finishes, or in a spawned task if this is dropped first (the request was cancelled).
pub(crate) struct HeldLock<B: LockBackend> {
    backend: Arc<B>,
    guard: LockGuard,
    release: Release,
    active: Arc<AtomicUsize>,
    released: bool,
}

/// How a lock is released.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Release {
    pub(crate) store_timeout: Duration,
}

impl<B: LockBackend> HeldLock<B> {
    /// Takes on the release of `guard`'s lock, counted in `active` until it is done.
    pub(crate) fn new(
        backend: Arc<B>,
        guard: LockGuard,
        release: Release,
        active: Arc<AtomicUsize>,
    ) -> Self {
        active.fetch_add(1, Ordering::Relaxed);
        Self {
            backend,
            guard,
            release,
            active,
            released: false,
        }
    }

    pub(crate) fn guard(&self) -> &LockGuard {
        &self.guard
    }

    pub(crate) async fn release(mut self) {
        self.guard.lease().end(false);
        release(&*self.backend, &self.guard, self.release).await;
        self.released = true;
    }
}

impl<B: LockBackend> Drop for HeldLock<B> {
    fn drop(&mut self) {
        self.active.fetch_sub(1, Ordering::Relaxed);
        if self.released {
            return;
        }
        self.guard.lease().end(false);
        let (backend, guard, how) = (Arc::clone(&self.backend), self.guard.clone(), self.release);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move { release(&*backend, &guard, how).await });
            }
            Err(_) => tracing::warn!(
                lock = guard.name(),
                "request dropped outside a Tokio runtime; the lock stays until its TTL expires"
            ),
        }
    }
}

/// Releases every lock of `guard`. A failure is logged, never returned: the lease expires
/// anyway, and the handler's answer must not turn into an error because of it.
pub(crate) async fn release<B: LockBackend>(backend: &B, guard: &LockGuard, how: Release) {
    for name in guard.names() {
        release_one(backend, guard, name, how).await;
    }
}

async fn release_one<B: LockBackend>(backend: &B, guard: &LockGuard, name: &str, how: Release) {
    let (token, timeout) = (guard.token(), how.store_timeout);
    let outcome =
        tokio::time::timeout(timeout, backend.release_hold(name, token, guard.hold())).await;
    match outcome {
        Ok(Ok(true)) => tracing::trace!(lock = name, "released"),
        Ok(Ok(false)) => tracing::warn!(
            lock = name,
            "the lock was no longer ours at release: its lease had expired"
        ),
        Ok(Err(error)) => tracing::warn!(
            lock = name,
            %error,
            "release failed; the lock expires with its TTL"
        ),
        Err(_) => tracing::warn!(
            lock = name,
            ?timeout,
            "release timed out; the lock expires with its TTL"
        ),
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::*;
    use crate::{Acquire, MemoryBackend};

    const TTL: Duration = Duration::from_secs(30);
    const PLAIN: Release = Release {
        store_timeout: Duration::from_secs(1),
    };

    fn guard(name: &str, token: OwnerToken, fence: u64) -> LockGuard {
        LockGuard::new(
            vec![name.to_owned()],
            "lock:".len(),
            token,
            (vec![fence], Hold::Exclusive),
            Lease::new(Instant::now(), TTL),
        )
    }

    async fn held(store: &MemoryBackend, name: &str) -> HeldLock<MemoryBackend> {
        let token = OwnerToken::new();
        let Acquire::Acquired { fence } = store.acquire(name, token, TTL).await.unwrap() else {
            panic!("{name} should be free");
        };
        let active = Arc::default();
        HeldLock::new(
            Arc::new(store.clone()),
            guard(name, token, fence),
            PLAIN,
            active,
        )
    }

    async fn is_free(store: &MemoryBackend, name: &str) -> bool {
        let token = OwnerToken::new();
        let free = matches!(
            store.acquire(name, token, TTL).await.unwrap(),
            Acquire::Acquired { .. }
        );
        if free {
            store.release(name, token).await.unwrap();
        }
        free
    }

    #[tokio::test]
    async fn the_guard_splits_prefix_and_key() {
        let lock = held(&MemoryBackend::new(), "lock:coupon:42").await;
        assert_eq!(lock.guard.key(), "coupon:42");
        assert_eq!(lock.guard.name(), "lock:coupon:42");
        assert_eq!(lock.guard.fence(), 1);
    }

    #[tokio::test]
    async fn held_locks_are_counted_until_released_or_dropped() {
        let store = MemoryBackend::new();
        let active = Arc::new(AtomicUsize::new(0));
        let token = OwnerToken::new();
        let backend = Arc::new(store.clone());
        let first = HeldLock::new(
            backend.clone(),
            guard("lock:a", token, 1),
            PLAIN,
            active.clone(),
        );
        let second = HeldLock::new(backend, guard("lock:b", token, 1), PLAIN, active.clone());
        assert_eq!(active.load(Ordering::Relaxed), 2);

        first.release().await;
        drop(second);

        assert_eq!(active.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn release_frees_the_lock() {
        let store = MemoryBackend::new();
        let lock = held(&store, "lock:a").await;
        assert!(!is_free(&store, "lock:a").await);

        lock.release().await;

        assert!(is_free(&store, "lock:a").await);
    }

    #[tokio::test]
    async fn dropping_an_unreleased_lock_releases_it_in_the_background() {
        let store = MemoryBackend::new();
        let lock = held(&store, "lock:a").await;

        drop(lock);
        tokio::task::yield_now().await;

        assert!(is_free(&store, "lock:a").await);
    }

    #[tokio::test]
    async fn a_released_lock_is_no_longer_held_and_reports_it() {
        let store = MemoryBackend::new();
        let lock = held(&store, "lock:a").await;
        let guard = lock.guard.clone();
        assert!(guard.is_held());

        lock.release().await;

        assert!(!guard.is_held());
        tokio::time::timeout(Duration::from_secs(1), guard.lost())
            .await
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_whose_deadline_passes_is_no_longer_held() {
        let guard = guard("lock:a", OwnerToken::new(), 1);
        let lost = tokio::spawn(guard.lost());
        tokio::time::advance(TTL - crate::lease::drift_margin(TTL) - Duration::from_millis(1))
            .await;
        assert!(guard.is_held());
        assert!(!lost.is_finished());

        tokio::time::advance(Duration::from_millis(1)).await;

        assert!(!guard.is_held());
        lost.await.unwrap();
    }

    #[tokio::test]
    async fn dropping_a_guard_clone_does_not_release() {
        let store = MemoryBackend::new();
        let lock = held(&store, "lock:a").await;

        drop(lock.guard.clone());
        tokio::task::yield_now().await;

        assert!(!is_free(&store, "lock:a").await);
        lock.release().await;
    }

    #[test]
    fn held_locks_are_matched_by_full_name() {
        let held = HeldLocks::default().with(guard("lock:a", OwnerToken::new(), 1));
        assert!(held.holds("lock:a"));
        assert!(!held.holds("other:a"));
    }
}
