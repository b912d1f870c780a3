//! A store that stops answering: every task that needs it hears a failure — the one asking and
//! every one waiting behind it in its locker's line —, never that the lock is busy, on every
//! shape and way of waiting; in paused time, so "within the store timeout" is exact.

use std::num::NonZeroU32;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use super::locker;
use crate::testing::{Availability, CountingBackend};
use crate::{HeldLock, LockError, Locker, LockerBuilder, MemoryBackend};

type Store = CountingBackend<MemoryBackend>;

const WAIT: Duration = Duration::from_secs(3);
const STORE_TIMEOUT: Duration = Duration::from_secs(1);
/// Tasks asking at once, as the claims of a burst do.
const TASKS: usize = 20;

/// What a task asks for: lock `k` in one of the shapes, or `k` and `j` together.
#[derive(Clone, Copy, Debug)]
enum Shape {
    Mutex,
    Read,
    Write,
    Permit,
    TwoKeys,
}

const SHAPES: [Shape; 5] = [
    Shape::Mutex,
    Shape::Read,
    Shape::Write,
    Shape::Permit,
    Shape::TwoKeys,
];

/// How a locker waits for a busy lock.
#[derive(Clone, Copy, Debug)]
enum Waiting {
    /// Woken by releases, holds handed on within the locker (the defaults).
    HandedOn,
    /// Woken by releases, every hold from the store.
    Notified,
    /// In the store's queue, in arrival order.
    Fair,
    /// Asking again after a backoff.
    Polling,
}

const WAYS: [Waiting; 4] = [
    Waiting::HandedOn,
    Waiting::Notified,
    Waiting::Fair,
    Waiting::Polling,
];

fn configured(waiting: Waiting) -> impl FnOnce(LockerBuilder<Store>) -> LockerBuilder<Store> {
    move |builder| {
        let builder = builder.store_timeout(STORE_TIMEOUT);
        match waiting {
            Waiting::HandedOn => builder.wait(WAIT),
            Waiting::Notified => builder.wait(WAIT).max_local_run(1),
            Waiting::Fair => builder.fair(Duration::from_secs(2)).wait(WAIT),
            Waiting::Polling => builder.wait_polling(WAIT),
        }
    }
}

const ONE_PERMIT: NonZeroU32 = NonZeroU32::MIN;

async fn take(locker: &Locker<Store>, shape: Shape) -> Result<HeldLock<Store>, LockError> {
    match shape {
        Shape::Mutex => locker.lock("k").await,
        Shape::Read => locker.read("k").await,
        Shape::Write => locker.write("k").await,
        Shape::Permit => locker.permit("k", ONE_PERMIT).await,
        Shape::TwoKeys => locker.lock_all(["k", "j"]).await,
    }
}

/// Holds lock `k` through `other` so that `shape` finds it busy.
async fn hold_against(other: &Locker<Store>, shape: Shape) -> HeldLock<Store> {
    let holding = match shape {
        Shape::Permit => Shape::Permit,
        _ => Shape::Write,
    };
    take(other, holding).await.expect("free")
}

/// What each of `TASKS` tasks asking `shape` of `locker` at once was answered, and after how
/// long.
async fn burst(locker: &Locker<Store>, shape: Shape) -> Vec<(Result<(), LockError>, Duration)> {
    let asked = Instant::now();
    let answers = (0..TASKS).map(|_| async move {
        let answer = take(locker, shape).await.map(drop);
        (answer, asked.elapsed())
    });
    join_all(answers).await
}

/// Every answer is the store's failure, none later than `within`.
fn every_answer_is_a_failure(
    answers: &[(Result<(), LockError>, Duration)],
    within: Duration,
    case: &str,
) {
    for (answer, after) in answers {
        assert!(
            matches!(answer, Err(LockError::StoreUnavailable(_))),
            "{case}: {answer:?} after {after:?}"
        );
        assert!(*after <= within, "{case}: answered after {after:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn every_task_hears_a_silent_store_within_the_store_timeout() {
    for waiting in WAYS {
        for shape in SHAPES {
            let store = CountingBackend::new(MemoryBackend::new());
            let locker = locker(store.clone(), configured(waiting));
            store.set_availability(Availability::Hangs);

            let answers = burst(&locker, shape).await;

            let case = format!("{shape:?} {waiting:?}");
            every_answer_is_a_failure(&answers, STORE_TIMEOUT, &case);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn every_task_hears_a_refusing_store_at_once() {
    for waiting in WAYS {
        for shape in SHAPES {
            let store = CountingBackend::new(MemoryBackend::new());
            let locker = locker(store.clone(), configured(waiting));
            store.set_availability(Availability::Refuses);

            let answers = burst(&locker, shape).await;

            let case = format!("{shape:?} {waiting:?}");
            every_answer_is_a_failure(&answers, Duration::ZERO, &case);
        }
    }
}

/// The twin: the same burst while another process holds the lock and the store answers is
/// told the lock is busy, once the wait ran out — the answers above are the outage's.
#[tokio::test(start_paused = true)]
async fn the_same_burst_on_a_held_lock_hears_busy_after_its_wait() {
    for waiting in WAYS {
        for shape in SHAPES {
            let store = CountingBackend::new(MemoryBackend::new());
            let locker = locker(store.clone(), configured(waiting));
            let other = super::locker(store.clone(), |builder| builder.reject());
            let _held = hold_against(&other, shape).await;

            let answers = burst(&locker, shape).await;

            for (answer, after) in &answers {
                let case = format!("{shape:?} {waiting:?}");
                assert!(
                    matches!(answer, Err(LockError::Busy { .. })),
                    "{case}: {answer:?}"
                );
                assert!(
                    *after >= WAIT,
                    "{case}: busy after {after:?}, before its wait ran out"
                );
            }
        }
    }
}

/// Tasks already waiting when the store stops answering are told it failed, not that the lock
/// is busy: the one asking finds out at its next attempt, and a task whose wait in line runs
/// out without the store having said lately that the lock is busy asks it itself.
#[tokio::test(start_paused = true)]
async fn tasks_waiting_when_the_store_stops_hear_a_failure_not_busy() {
    for waiting in WAYS {
        for shape in SHAPES {
            let store = CountingBackend::new(MemoryBackend::new());
            let locker = locker(store.clone(), configured(waiting));
            let other = super::locker(store.clone(), |builder| builder.reject());
            let _held = hold_against(&other, shape).await;
            let waiters: Vec<_> = (0..TASKS)
                .map(|_| {
                    let locker = locker.clone();
                    tokio::spawn(async move { take(&locker, shape).await.map(drop) })
                })
                .collect();
            tokio::time::sleep(Duration::from_millis(100)).await;

            store.set_availability(Availability::Hangs);
            let stopped = Instant::now();

            for waiter in waiters {
                let answer = waiter.await.expect("the task did not panic");
                let case = format!("{shape:?} {waiting:?}");
                assert!(
                    matches!(answer, Err(LockError::StoreUnavailable(_))),
                    "{case}: {answer:?} {:?} after the store stopped",
                    stopped.elapsed()
                );
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn locks_are_served_again_as_soon_as_the_store_answers() {
    for shape in SHAPES {
        let store = CountingBackend::new(MemoryBackend::new());
        let locker = locker(store.clone(), configured(Waiting::HandedOn));
        store.set_availability(Availability::Hangs);
        every_answer_is_a_failure(&burst(&locker, shape).await, STORE_TIMEOUT, "hanging");

        store.set_availability(Availability::Answers);
        let asked = Instant::now();
        let held = take(&locker, shape).await;

        assert!(held.is_ok(), "{shape:?}: {held:?}");
        assert_eq!(asked.elapsed(), Duration::ZERO, "{shape:?}: served at once");
    }
}
