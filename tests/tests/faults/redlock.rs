//! RedLock over three masters while they die: one down, locks are still granted and exclusive;
//! two down, every attempt fails within the store timeout, naming the masters that failed, and
//! nothing runs without its lock.

use std::sync::Arc;
use std::time::Duration;

use integration_tests::{Occupancy, RedisServer};
use tokio::time::Instant;
use tower_lock::backend::redis::RedlockBackend;
use tower_lock::{LockError, Locker};

fn masters() -> [RedisServer; 3] {
    [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ]
}

fn locker(masters: &[RedisServer; 3]) -> Locker<RedlockBackend> {
    let backend = RedlockBackend::connect(masters.iter().map(RedisServer::url));
    Locker::builder(backend.expect("valid URLs"))
        .wait(Duration::from_secs(10))
        .ttl(Duration::from_secs(5))
        .build()
        .expect("valid settings")
}

/// With one master of three killed, two processes of 16 tasks each still take the lock, and
/// never two at once: a majority is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_master_of_three_down_locks_are_granted_and_exclusive() {
    let mut masters = masters();
    masters[0].kill();
    let lockers = [locker(&masters), locker(&masters)];
    let inside = Arc::new(Occupancy::default());
    let mut tasks = Vec::new();
    for task in 0..32 {
        let (locker, inside) = (lockers[task % 2].clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..3 {
                let work = |_| async { inside.visit(Duration::from_millis(1)).await };
                locker.with_lock("k", work).await?;
            }
            Ok::<_, LockError>(())
        }));
    }
    for task in tasks {
        let done = task.await.expect("a task panicked");
        done.expect("every task gets the lock with a majority up");
    }
    assert_eq!(inside.most(), 1, "two tasks held the lock at once");
}

/// With two masters of three killed, an attempt fails within the store timeout (1 s) with an
/// error naming both, and the work never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_masters_of_three_down_nothing_runs_unlocked() {
    let mut masters = masters();
    let down: Vec<String> = masters[..2]
        .iter()
        .map(|master| format!("127.0.0.1:{}", master.port()))
        .collect();
    masters[0].kill();
    masters[1].kill();
    let locker = locker(&masters);
    let asked = Instant::now();
    let ran = locker.with_lock("k", |_| async { true }).await;
    let answered = asked.elapsed();
    match ran {
        Err(LockError::StoreUnavailable(error)) => {
            let error = error.to_string();
            for master in &down {
                assert!(error.contains(master), "the error names {master}: {error}");
            }
        }
        other => panic!("expected the store to be unavailable, got {other:?}"),
    }
    // The masters are asked at once, each within the store timeout (1 s): a locker that
    // waited for the dead ones in turn, or retried, would take 2 s or more.
    assert!(
        answered < Duration::from_millis(1500),
        "answered after {answered:?}, past the store timeout"
    );
}
