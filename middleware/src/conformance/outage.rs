//! A store that stops answering: an error within the store timeout, never a hang and never a
//! busy lock — for the task asking and for every task waiting behind it in its locker's line —,
//! and service again once it answers.

use std::time::Duration;

use tokio::time::Instant;

use super::Outage;
use super::support::{LONG, locker, two_processes};
use crate::{LockError, Locker, LockerBuilder};

/// While the store answers nothing, an acquire fails with `StoreUnavailable` within the store
/// timeout (and a little slack); once it answers again, locks are taken again.
pub async fn a_silent_store_is_an_error_within_the_store_timeout<S: Outage>(store: &S) {
    let store_timeout = Duration::from_millis(300);
    let configure =
        |builder: crate::LockerBuilder<_>| builder.reject().ttl(LONG).store_timeout(store_timeout);
    let locker = locker(store.backend().await, configure);
    locker
        .lock("warm-up")
        .await
        .expect("the store answers")
        .release()
        .await
        .ok();

    store.stop_answering();
    let started = Instant::now();
    let silent = locker.lock("k").await;
    let waited = started.elapsed();
    store.answer_again();

    assert!(
        matches!(silent, Err(LockError::StoreUnavailable(_))),
        "{silent:?}"
    );
    // A hang lasts until the case's limit; the store timeout bounds the attempt, and the
    // 700 ms after it are the timer's room on a slow machine.
    assert!(
        waited < store_timeout + Duration::from_millis(700),
        "answered after {waited:?}"
    );
    let started = Instant::now();
    while locker.lock("other").await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the store never served again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Tasks of one locker asking for one lock at once: one asks the store, the others wait in the
/// locker's line behind it.
const LINE: usize = 8;

/// What each of [`LINE`] tasks asking `locker` for lock `k` at once was told, and after how
/// long.
async fn line_asks<B: crate::backend::LockBackend>(
    locker: &Locker<B>,
) -> Vec<(Result<(), LockError>, Duration)> {
    let asked = Instant::now();
    let tasks: Vec<_> = (0..LINE)
        .map(|_| {
            let locker = locker.clone();
            tokio::spawn(async move {
                let told = locker.lock("k").await.map(drop);
                (told, asked.elapsed())
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("a task did not panic"));
    }
    answers
}

/// A locker that waits 1 s for a busy lock, with a store timeout of 300 ms.
fn waiting<B: crate::backend::LockBackend>(builder: LockerBuilder<B>) -> LockerBuilder<B> {
    builder
        .wait(Duration::from_secs(1))
        .ttl(LONG)
        .store_timeout(Duration::from_millis(300))
}

/// While the store answers nothing, every task of a locker's line is told the store failed —
/// the one asking and every one waiting behind it, within the store timeout (and a little
/// slack) — and none that the lock is busy: the line does not send its tasks to the store one
/// after another until their waits run out.
pub async fn every_task_in_line_hears_a_silent_store_fail<S: Outage>(store: &S) {
    let locker = locker(store.backend().await, waiting);
    locker
        .lock("warm-up")
        .await
        .expect("the store answers")
        .release()
        .await
        .ok();

    store.stop_answering();
    let answers = line_asks(&locker).await;
    store.answer_again();

    for (told, after) in answers {
        assert!(
            matches!(told, Err(LockError::StoreUnavailable(_))),
            "{told:?} after {after:?}"
        );
        // Told with the task asking (within its 300 ms store timeout): a task told only when
        // its 1 s wait ran out would be told later than this.
        assert!(
            after < Duration::from_secs(1),
            "told {told:?} after {after:?}"
        );
    }
}

/// The twin: with the store answering and another process holding the lock, the same line is
/// told the lock is busy, once each task's wait ran out.
pub async fn the_same_line_on_a_held_lock_hears_busy<S: Outage>(store: &S) {
    let (mine, theirs) = two_processes(store).await;
    let holder = locker(theirs, |builder| builder.ttl(LONG));
    let _held = holder.lock("k").await.expect("free");
    let locker = locker(mine, waiting);

    for (told, after) in line_asks(&locker).await {
        assert!(matches!(told, Err(LockError::Busy { .. })), "{told:?}");
        assert!(after >= Duration::from_secs(1), "busy after {after:?}");
    }
}
