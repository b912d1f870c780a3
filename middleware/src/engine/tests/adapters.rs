//! The adapters' door: `Locker::acquire` with any `Ask`, `HeldLock::run` keeping the lease
//! inline, the handle it gives back, and a lock that renews in the background meanwhile.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::locker;
use crate::test_support::{Fault, MutexOnly};
use crate::testing::CountingBackend;
use crate::{Ask, Hold, LockError, MemoryBackend};

const TTL: Duration = Duration::from_millis(300);

#[tokio::test(start_paused = true)]
async fn run_keeps_the_lease_of_an_acquired_lock_while_its_work_outlasts_the_ttl() {
    let backend = CountingBackend::new(MemoryBackend::new());
    let locker = locker(backend.clone(), |locker| locker.ttl(TTL).reject());
    let lock = locker.acquire(["k"], Ask::write(), None).await.unwrap();
    assert_eq!(lock.hold(), Hold::Write);

    let other = locker.clone();
    let (others_refused, lock) = lock
        .run(async {
            tokio::time::sleep(TTL * 4).await;
            // Another task: the work itself would pass through, holding the lock.
            tokio::spawn(async move { other.write("k").await.is_err() }).await
        })
        .await
        .unwrap();

    assert!(
        others_refused.unwrap(),
        "the lock was kept while the work ran"
    );
    assert!(lock.is_held(), "and is handed back still held");
    assert!(backend.counts().extends >= 8, "renewed every TTL/3, inline");
    lock.release().await.unwrap();
    assert_eq!(locker.held_locks(), 0);
}

/// The twin: an acquired lock that nobody runs work under, nor renews, lapses at its TTL.
#[tokio::test(start_paused = true)]
async fn an_acquired_lock_left_idle_lapses_at_its_ttl() {
    let backend = CountingBackend::new(MemoryBackend::new());
    let locker = locker(backend.clone(), |locker| locker.ttl(TTL).reject());
    let lock = locker.acquire(["k"], Ask::mutex(), None).await.unwrap();

    tokio::time::sleep(TTL * 4).await;

    assert!(!lock.is_held());
    assert_eq!(backend.counts().extends, 0, "nothing renewed it");
    assert!(
        locker.lock("k").await.is_ok(),
        "its lease ran out in the store"
    );
}

#[tokio::test(start_paused = true)]
async fn run_under_a_lock_renewing_in_the_background_stops_the_work_when_the_lease_is_lost() {
    let locker = locker(MutexOnly::failing(Fault::Stolen), |locker| locker.ttl(TTL));
    let mut lock = locker.acquire(["k"], Ask::mutex(), None).await.unwrap();
    lock.renew_in_background();
    let finished = AtomicBool::new(false);

    let stopped = lock
        .run(async {
            tokio::time::sleep(TTL * 4).await;
            finished.store(true, Ordering::SeqCst);
        })
        .await;

    assert!(
        matches!(stopped, Err(LockError::LeaseLost { ref key }) if key == "k"),
        "{stopped:?}"
    );
    assert!(
        !finished.load(Ordering::SeqCst),
        "no step after the loss ran"
    );
    assert_eq!(locker.held_locks(), 0, "the lock was given back");
}

#[tokio::test]
async fn work_under_a_lock_run_by_an_adapter_passes_through_when_it_asks_again() {
    let locker = locker(MemoryBackend::new(), |locker| locker.reject());
    let lock = locker.acquire(["k"], Ask::mutex(), None).await.unwrap();

    let (inner, lock) = lock
        .run(async { locker.lock("k").await.map(|inner| inner.fence()) })
        .await
        .unwrap();

    assert_eq!(inner.unwrap(), lock.fence(), "the same lock, re-entered");
    lock.release().await.unwrap();
}
