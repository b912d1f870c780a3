//! Re-entering a lock from the work that holds it, and what cannot be re-entered.

use std::sync::Arc;
use std::time::Duration;

use super::locker;
use crate::conformance::Occupancy;
use crate::test_support::is_free;
use crate::{Hold, LockError, Locker, MemoryBackend};

#[tokio::test]
async fn the_work_holding_a_lock_passes_through_when_it_asks_again() {
    let store = MemoryBackend::new();
    let locker = Locker::new(store.clone());

    let locker = &locker;
    let (outer, inner) = locker
        .with_lock("k", |outer| async move {
            let inner = locker
                .with_lock("k", |inner| async move { inner.fence() })
                .await;
            (outer.fence(), inner.expect("re-entered, not waited for"))
        })
        .await
        .unwrap();

    assert_eq!(outer, inner, "one lock, taken once");
    assert!(is_free(&store, "lock:k").await);
}

#[tokio::test]
async fn the_outermost_holder_releases_a_reentered_lock() {
    let store = MemoryBackend::new();
    let locker = Locker::new(store.clone());

    locker
        .with_lock("k", |_| async {
            let inner = locker.lock("k").await.unwrap();
            inner.release().await.unwrap();
            assert!(
                !is_free(&store, "lock:k").await,
                "the inner release gave nothing back"
            );
            assert_eq!(locker.held_locks(), 1, "taken once");
        })
        .await
        .unwrap();

    assert!(
        is_free(&store, "lock:k").await,
        "the outer holder released it"
    );
}

#[tokio::test]
async fn an_upgrade_from_read_to_write_is_an_error_not_a_wait_for_itself() {
    let locker = locker(MemoryBackend::new(), |locker| {
        locker.wait(Duration::from_secs(60))
    });
    let reader = locker.read("k").await.unwrap();

    let upgrade = crate::engine::reentry::scope(reader.guard().clone(), locker.write("k")).await;

    let Err(LockError::Upgrade { key, held, wanted }) = upgrade else {
        panic!("{upgrade:?}");
    };
    assert_eq!((key.as_str(), held, wanted), ("k", Hold::Read, Hold::Write));
}

#[tokio::test]
async fn a_writer_may_read_what_it_holds() {
    let locker = Locker::new(MemoryBackend::new());
    let writer = locker.write("k").await.unwrap();

    let read = crate::engine::reentry::scope(writer.guard().clone(), locker.read("k")).await;

    assert_eq!(
        read.unwrap().fence(),
        writer.fence(),
        "the writer's own lock"
    );
}

#[tokio::test]
async fn asking_for_more_keys_while_holding_some_is_refused() {
    let locker = Locker::new(MemoryBackend::new());

    let more = locker
        .with_lock("a", |_| async {
            locker.lock_all(["a", "b"]).await.map(drop)
        })
        .await
        .unwrap();

    let Err(LockError::MoreKeys { held, wanted }) = more else {
        panic!("{more:?}");
    };
    assert_eq!((held.as_str(), wanted.as_str()), ("a", "a, b"));
}

/// Two branches of one task that lock the same key, each for `work`, with `keys` naming the
/// key each uses: the most that were inside at once.
async fn two_branches(keys: [&str; 2]) -> usize {
    let locker = locker(MemoryBackend::new(), |locker| {
        locker.wait(Duration::from_secs(60))
    });
    let inside = Arc::new(Occupancy::default());
    let branch = |key| {
        let (locker, inside) = (locker.clone(), inside.clone());
        async move {
            let work = |_| async { inside.visit(Duration::from_millis(50)).await };
            locker.with_lock(key, work).await.unwrap();
        }
    };
    tokio::join!(branch(keys[0]), branch(keys[1]));
    inside.most()
}

#[tokio::test(start_paused = true)]
async fn two_branches_of_one_task_on_the_same_key_still_exclude_each_other() {
    assert_eq!(
        two_branches(["k", "k"]).await,
        1,
        "reentrancy is scoped, not per task"
    );
}

#[tokio::test(start_paused = true)]
async fn two_branches_of_one_task_on_different_keys_overlap() {
    assert_eq!(
        two_branches(["a", "b"]).await,
        2,
        "the twin: the probe sees overlap"
    );
}

#[tokio::test]
async fn a_task_spawned_by_the_holder_does_not_hold_its_lock() {
    let locker = locker(MemoryBackend::new(), |locker| locker.reject());

    let spawned = locker
        .with_lock("k", |_| async {
            let locker = locker.clone();
            tokio::spawn(async move { locker.lock("k").await.map(drop) })
                .await
                .unwrap()
        })
        .await
        .unwrap();

    assert!(
        matches!(spawned, Err(LockError::Busy { .. })),
        "{spawned:?}"
    );
}
