//! A store's master failing under contention: the lockers must take the lock again by
//! themselves once another master took over.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::{Instant, sleep, timeout};
use tower_lock::Locker;
use tower_lock::backend::LockBackend;

/// Eight tasks of `lockers` (alternately) take lock `k` over and over, holding it 2 ms, while
/// `fail` runs on a blocking thread (kill a master, and wait until another took over). Checks
/// that after the takeover the lock is taken again within `ttl` (the lease of a hold the dead
/// master had) and a second, and more than ten times; gives back what `fail` returned.
///
/// # Panics
///
/// When the lock was not taken again in time (the message says when it was, and when the
/// takeover was), or `fail` panicked.
pub async fn lockers_recover_from<B: LockBackend, T: Send + 'static>(
    lockers: [Locker<B>; 2],
    ttl: Duration,
    fail: impl FnOnce() -> T + Send + 'static,
) -> T {
    let stop = Arc::new(AtomicBool::new(false));
    let mut contenders = Vec::new();
    for task in 0..8 {
        let (locker, stop) = (lockers[task % 2].clone(), stop.clone());
        contenders.push(tokio::spawn(async move {
            let mut holds = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match timeout(Duration::from_secs(2), locker.lock("k")).await {
                    Ok(Ok(held)) => {
                        holds.push(Instant::now());
                        sleep(Duration::from_millis(2)).await;
                        held.release().await.ok();
                    }
                    _ => sleep(Duration::from_millis(50)).await,
                }
            }
            holds
        }));
    }
    sleep(Duration::from_millis(500)).await;
    let killed = Instant::now();
    let failed = tokio::task::spawn_blocking(fail).await;
    let failed = failed.expect("another master takes over");
    let taken_over = killed.elapsed();
    sleep(ttl + Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let mut holds = Vec::new();
    for contender in contenders {
        holds.extend(contender.await.expect("a contender panicked"));
    }
    let since_the_takeover = |at: &&Instant| **at > killed + taken_over;
    let first = holds.iter().filter(since_the_takeover).min();
    let first = first.map(|at| at.duration_since(killed));
    let first = first.expect("the lock was taken again after the master died");
    assert!(
        first < taken_over + ttl + Duration::from_secs(1),
        "the lock was taken again {first:?} after the kill; another master took over after \
         {taken_over:?}"
    );
    let since = holds.iter().filter(since_the_takeover).count();
    assert!(since > 10, "{since} holds after the failover");
    failed
}
