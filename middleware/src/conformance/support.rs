//! What the cases share: short and long leases, lockers, and a probe of who is inside.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::Store;
use crate::backend::{Attempt, BackendError, Granted, LockBackend, LockRequest};
use crate::engine::{HeldLock, LockError, Locker, LockerBuilder, SHARED_REFRESH};
use crate::testing::CountingBackend;
use crate::token::OwnerToken;

/// A lease that runs out within a case. The engine refuses a grant answered after its lease's
/// end and renews every third of it: a second leaves a loaded machine's round trip (a TLS
/// handshake on two busy cores took 324 ms) and a renewal's (667 ms of room) in time.
pub(super) const SHORT: Duration = Duration::from_secs(1);
/// A lease that outlives a case.
pub(super) const LONG: Duration = Duration::from_secs(30);
/// Room for a store's expiry to be noticed, and for background clean-up to land.
pub(super) const SLACK: Duration = Duration::from_millis(500);
/// How long a case's store call may take, unless the case is about the store timeout. The
/// library's default, a second, is for a store on a quiet network: on two cores busy with six
/// tests and a release build beside them, a PostgreSQL acquire took longer. Five seconds is
/// five such answers, and a sixth of [`LONG`], so a case still ends well within its deadline.
pub(super) const STORE_TIMEOUT: Duration = Duration::from_secs(5);

/// Counts how many visitors are inside a critical section at once, and the most ever seen.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use tower_lock::conformance::Occupancy;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let inside = Occupancy::default();
/// inside.visit(Duration::from_millis(1)).await;
/// assert_eq!(inside.most(), 1);
/// # }
/// ```
#[derive(Debug, Default)]
pub struct Occupancy {
    inside: AtomicUsize,
    most: AtomicUsize,
}

impl Occupancy {
    /// Stays inside for `work`, counting itself while there.
    pub async fn visit(&self, work: Duration) {
        let now = self.inside.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        tokio::time::sleep(work).await;
        self.inside.fetch_sub(1, SeqCst);
    }

    /// The most visitors that were inside at the same time.
    pub fn most(&self) -> usize {
        self.most.load(SeqCst)
    }
}

/// A request by a fresh token for a lease of `ttl`, asking once.
pub(super) fn request(ttl: Duration) -> LockRequest {
    LockRequest::new(OwnerToken::new(), ttl)
}

/// A grant, or a failure naming what was expected.
pub(super) fn granted<L>(
    answer: Result<Attempt<Granted<L>>, BackendError>,
    what: &str,
) -> Granted<L> {
    match answer {
        Ok(Attempt::Acquired(grant)) => grant,
        Ok(Attempt::Busy { holder_ttl }) => panic!("{what}: busy (holder has {holder_ttl:?})"),
        Err(error) => panic!("{what}: {error}"),
    }
}

/// A busy answer, or a failure naming what was expected.
pub(super) fn busy<T>(answer: Result<Attempt<T>, BackendError>, what: &str) -> Option<Duration> {
    match answer {
        Ok(Attempt::Busy { holder_ttl }) => holder_ttl,
        Ok(Attempt::Acquired(_)) => panic!("{what}: expected busy, the lock was taken"),
        Err(error) => panic!("{what}: {error}"),
    }
}

/// Two backends on the store: two "processes".
pub(super) async fn two_processes<S: Store>(store: &S) -> (S::Backend, S::Backend) {
    (store.backend().await, store.backend().await)
}

/// A locker on `backend` giving each store call [`STORE_TIMEOUT`], with `configure` applied to
/// the builder after.
pub(super) fn locker<B: LockBackend>(
    backend: B,
    configure: impl FnOnce(LockerBuilder<B>) -> LockerBuilder<B>,
) -> Locker<B> {
    configure(Locker::builder(backend).store_timeout(STORE_TIMEOUT))
        .build()
        .expect("the case's settings are valid")
}

/// Asks `backend` for `name` until it is granted, for at most `limit`; then gives it back.
/// Whether it was granted.
pub(super) async fn free_within<B: LockBackend>(backend: &B, name: &str, limit: Duration) -> bool {
    let started = Instant::now();
    loop {
        let answer = backend.acquire(name, request(LONG)).await;
        if let Ok(Attempt::Acquired(grant)) = answer {
            backend.release(name, &grant.lease).await.ok();
            return true;
        }
        if started.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `condition` holds, looking every millisecond: what a case waits on instead of a
/// sleep that a loaded machine may outlast. Fails the case, naming `what`, if it does not hold
/// within [`LONG`].
pub(super) async fn until(what: &str, condition: impl Fn() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(started.elapsed() < LONG, "not within {LONG:?}: {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Waits until a shared-shape waiter on `backend` (a writer, reader or permit waiter, the only
/// caller there since `answered` of its acquire attempts were answered) has had its first look,
/// its first wait's attempt and its first refresh answered: its next attempt is then its next
/// refresh, 500 ms away (or its backoff, if shorter).
pub(super) async fn refreshed_once<B: LockBackend>(backend: &CountingBackend<B>, answered: u64) {
    until("the waiter asked again at its refresh", || {
        backend.acquires_answered() >= answered + 3
    })
    .await;
}

/// How soon a waiter released just after [`refreshed_once`] holds the lock when the release
/// woke it: a waiter not woken asks at its next refresh, 500 ms after the answer seen there,
/// and one woken asks at once, a round trip after the release. Half the refresh keeps the two
/// apart with room for a loaded machine's round trip (324 ms at the worst seen, with TLS).
pub(super) const WOKEN: Duration = Duration::from_millis(SHARED_REFRESH.as_millis() as u64 / 2);

/// A task that takes a lock with `take` and gives it back at once: when it took it.
pub(super) fn taking<B: LockBackend>(
    take: impl Future<Output = Result<HeldLock<B>, LockError>> + Send + 'static,
) -> JoinHandle<Result<Instant, LockError>> {
    tokio::spawn(async move {
        let held = take.await?;
        let taken = Instant::now();
        held.release().await.map(|()| taken)
    })
}

/// Whether `backend` announces releases to its waiters (else they poll).
pub(super) fn announces<B: LockBackend>(backend: &B) -> bool {
    backend
        .wait_queue()
        .is_some_and(|queue| queue.room().hears_announcements())
}
