//! Read-write locks: readers share, writers exclude, and the two take turns.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use tokio::time::sleep;

use super::Store;
use super::support::{
    LONG, Occupancy, SHORT, SLACK, WOKEN, busy, granted, locker, refreshed_once, request, taking,
    two_processes, until,
};
use crate::backend::LockBackend;
use crate::backend::lock_shapes::WAITER_MARK_TTL;
use crate::backend::{Attempt, Patience, SharedLocks};
use crate::testing::CountingBackend;
/// while they hold it. Writers are fenced, readers are not.
pub async fn readers_share_and_exclude_writers_and_mutexes<S: Store>(store: &S)
where
    S::Backend: SharedLocks,
{
    let (a, b) = two_processes(store).await;
    let first = granted(a.acquire_read("lock:k", request(LONG)).await, "a reader");
    let second = granted(
        b.acquire_read("lock:k", request(LONG)).await,
        "readers share",
    );
    assert_eq!(
        (first.fence, second.fence),
        (None, None),
        "readers are not fenced"
    );
    busy(
        a.acquire_write("lock:k", request(LONG)).await,
        "a writer waits for readers",
    );
    busy(
        a.acquire("lock:k", request(LONG)).await,
        "a mutex waits for readers",
    );
    a.release("lock:k", &first.lease).await.expect("released");
    b.release("lock:k", &second.lease).await.expect("released");

    let writer = granted(
        a.acquire_write("lock:k", request(LONG)).await,
        "readers left",
    );
    assert_eq!(
        writer.fence.is_some(),
        store.fences(),
        "a writer is fenced like a mutex"
    );
    busy(
        b.acquire_read("lock:k", request(LONG)).await,
        "a writer excludes readers",
    );
    busy(
        b.acquire("lock:k", request(LONG)).await,
        "a writer excludes a mutex",
    );
    a.release("lock:k", &writer.lease).await.expect("released");

    let mutex = granted(b.acquire("lock:k", request(LONG)).await, "the writer left");
    busy(
        a.acquire_read("lock:k", request(LONG)).await,
        "a mutex excludes readers",
    );
    b.release("lock:k", &mutex.lease).await.expect("released");
}

/// Several keys held together exclude readers of each of them.
pub async fn a_multi_key_hold_excludes_readers<S: Store>(store: &S)
where
    S::Backend: SharedLocks,
{
    let (a, b) = two_processes(store).await;
    let Ok(Attempt::Acquired(grants)) = a.acquire_many(&["lock:j", "lock:k"], request(LONG)).await
    else {
        panic!("both keys are free");
    };
    busy(b.acquire_read("lock:k", request(LONG)).await, "held with j");
    for (name, grant) in ["lock:j", "lock:k"].iter().zip(&grants) {
        a.release(name, &grant.lease).await.expect("released");
    }
    granted(b.acquire_read("lock:k", request(LONG)).await, "free again");
}

/// A writer that waits (it will ask again) bars new readers, so a stream of readers cannot
/// starve it; once it stops waiting (abandoned), readers come in again at once.
pub async fn a_waiting_writer_bars_new_readers_only_while_it_waits<S: Store>(store: &S)
where
    S::Backend: SharedLocks,
{
    let (a, b) = two_processes(store).await;
    granted(a.acquire_read("lock:k", request(LONG)).await, "a reader");
    let writer = request(LONG).patience(Patience::Polls);
    busy(
        b.acquire_write("lock:k", writer).await,
        "the reader holds it",
    );

    busy(
        a.acquire_read("lock:k", request(LONG)).await,
        "barred by the waiting writer",
    );
    b.abandon("lock:k", writer).await.expect("abandoned");
    granted(
        a.acquire_read("lock:k", request(LONG)).await,
        "the writer left: readers come in",
    );
}

/// Phase-fair turns: readers that waited for a writer come in when it leaves, all of them
/// ahead of the writers waiting behind it; a writer that waited for readers comes in when they
/// leave, ahead of the readers that came meanwhile. Neither side waits longer than the other's
/// turn.
pub async fn readers_and_writers_take_turns<S: Store>(store: &S)
where
    S::Backend: SharedLocks,
{
    let (a, b) = two_processes(store).await;
    let asks_again = |ttl| request(ttl).patience(Patience::Polls);
    let first_writer = granted(a.acquire_write("lock:k", request(LONG)).await, "a writer");
    let next_writer = asks_again(LONG);
    busy(
        b.acquire_write("lock:k", next_writer).await,
        "a writer holds it",
    );
    let (reader, slow_reader) = (asks_again(LONG), asks_again(LONG));
    for waiting in [reader, slow_reader] {
        busy(b.acquire_read("lock:k", waiting).await, "a writer holds it");
    }

    a.release("lock:k", &first_writer.lease)
        .await
        .expect("released");
    busy(
        b.acquire_write("lock:k", next_writer).await,
        "the readers that waited go first",
    );
    let reading = granted(
        b.acquire_read("lock:k", reader).await,
        "the writer left: a waiting reader comes in",
    );
    busy(
        b.acquire_write("lock:k", next_writer).await,
        "a reader holds it, another that waited is still to come",
    );
    let slow_reading = granted(
        a.acquire_read("lock:k", slow_reader).await,
        "every reader that waited for the writer comes in",
    );
    busy(
        b.acquire_write("lock:k", next_writer).await,
        "readers hold it",
    );
    let late_reader = asks_again(LONG);
    busy(
        a.acquire_read("lock:k", late_reader).await,
        "barred: the writer waited for the readers in",
    );

    b.release("lock:k", &reading.lease).await.expect("released");
    a.release("lock:k", &slow_reading.lease)
        .await
        .expect("released");
    let writing = granted(
        b.acquire_write("lock:k", next_writer).await,
        "the readers left: the waiting writer comes in",
    );
    let last_writer = asks_again(LONG);
    busy(
        a.acquire_write("lock:k", last_writer).await,
        "a writer holds it",
    );
    busy(
        a.acquire_read("lock:k", late_reader).await,
        "a writer holds it",
    );
    b.release("lock:k", &writing.lease).await.expect("released");
    busy(
        a.acquire_write("lock:k", last_writer).await,
        "the reader that waited goes first",
    );
    granted(
        a.acquire_read("lock:k", late_reader).await,
        "the writer left: the late reader comes in",
    );
}

/// A reader that gives up waiting (the locker's wait timed out) leaves nothing that holds
/// back the next writer.
pub async fn a_reader_that_gives_up_waiting_leaves_nothing_behind<S: Store>(store: &S)
where
    S::Backend: SharedLocks,
{
    let (a, b) = two_processes(store).await;
    let writer = granted(a.acquire_write("lock:k", request(LONG)).await, "a writer");
    let readers = locker(b, |builder| builder.wait(SHORT).ttl(LONG));
    let gave_up = readers.read("k").await;
    assert!(
        matches!(gave_up, Err(crate::LockError::Busy { .. })),
        "the reader gave up: {gave_up:?}"
    );

    a.release("lock:k", &writer.lease).await.expect("released");
    granted(
        a.acquire_write("lock:k", request(LONG)).await,
        "no reader waits",
    );
}

/// A writer that asks once and finds readers leaves nothing that bars the next reader.
pub async fn a_writer_that_asks_once_leaves_nothing_behind<S: Store>(store: &S)
where
    S::Backend: SharedLocks,
{
    let (a, b) = two_processes(store).await;
    granted(a.acquire_read("lock:k", request(LONG)).await, "a reader");

    busy(
        b.acquire_write("lock:k", request(LONG)).await,
        "the reader holds it",
    );

    granted(
        a.acquire_read("lock:k", request(LONG)).await,
        "no writer waits",
    );
}

/// A writer that asks once (a waiting writer's first look, or one that rejects) does not pass
/// the readers waiting for their turn: while a reader's claim stands, it finds the lock busy,
/// and the reader comes in next.
pub async fn a_writer_that_asks_once_passes_no_waiting_reader<S: Store>(store: &S)
where
    S::Backend: SharedLocks,
{
    let (a, b) = two_processes(store).await;
    let writer = granted(a.acquire_write("lock:k", request(LONG)).await, "a writer");
    let reader = request(LONG).patience(Patience::Polls);
    busy(
        b.acquire_read("lock:k", reader).await,
        "the writer holds it",
    );
    a.release("lock:k", &writer.lease).await.expect("released");

    busy(
        a.acquire_write("lock:k", request(LONG)).await,
        "a reader claimed the next turn",
    );
    granted(
        b.acquire_read("lock:k", reader).await,
        "the waiting reader's turn",
    );
}

/// A writer that gives up waiting (the locker's wait timed out) leaves nothing that bars the
/// next reader, not even for a moment.
pub async fn a_writer_that_gives_up_waiting_leaves_nothing_behind<S: Store>(store: &S)
where
    S::Backend: SharedLocks,
{
    let (a, b) = two_processes(store).await;
    granted(a.acquire_read("lock:k", request(LONG)).await, "a reader");
    let writer = locker(b, |builder| builder.wait(SHORT).ttl(LONG));

    let gave_up = writer.write("k").await;

    assert!(
        matches!(gave_up, Err(crate::LockError::Busy { .. })),
        "{gave_up:?}"
    );
    granted(
        a.acquire_read("lock:k", request(LONG)).await,
        "no writer waits",
    );
}

/// Sixteen writers in two processes that wait to be woken (the default) take one read-write
/// lock over and over, while readers come and go: every writer gets it each time, and never
/// with anybody else inside. The same visitors without the lock are seen inside together.
pub async fn waiting_writers_in_two_processes_take_turns<S: Store>(store: &S)
where
    S::Backend: SharedLocks,
{
    let (a, b) = two_processes(store).await;
    let wait = |builder: crate::LockerBuilder<_>| builder.wait(LONG).ttl(LONG);
    let lockers = [locker(a, wait), locker(b, wait)];
    let writers = Arc::new(Occupancy::default());
    let readers = Arc::new(AtomicUsize::new(0));
    let writer_met_a_reader = Arc::new(AtomicBool::new(false));
    let mut visitors = Vec::new();
    for visitor in 0..24 {
        let locker = lockers[visitor % 2].clone();
        let (writers, readers, met) = (
            writers.clone(),
            readers.clone(),
            writer_met_a_reader.clone(),
        );
        visitors.push(tokio::spawn(async move {
            for _ in 0..6 {
                if visitor < 16 {
                    let held = locker.write("k").await?;
                    met.fetch_or(readers.load(SeqCst) > 0, SeqCst);
                    writers.visit(Duration::from_millis(1)).await;
                    met.fetch_or(readers.load(SeqCst) > 0, SeqCst);
                    held.release().await?;
                } else {
                    let held = locker.read("k").await?;
                    readers.fetch_add(1, SeqCst);
                    sleep(Duration::from_millis(1)).await;
                    readers.fetch_sub(1, SeqCst);
                    held.release().await?;
                }
            }
            Ok::<_, crate::LockError>(())
        }));
    }
    for visitor in visitors {
        let done = visitor.await.expect("a visitor panicked");
        done.expect("every visitor gets the lock each time");
    }
    assert_eq!(writers.most(), 1, "two writers inside at once");
    assert!(
        !writer_met_a_reader.load(SeqCst),
        "a writer inside with a reader"
    );
    let unlocked = Arc::new(Occupancy::default());
    let visits: Vec<_> = (0..16)
        .map(|_| {
            let unlocked = unlocked.clone();
            tokio::spawn(async move { unlocked.visit(Duration::from_millis(1)).await })
        })
        .collect();
    for visit in visits {
        visit.await.expect("a visitor panicked");
    }
    assert!(unlocked.most() > 1, "without the lock they overlap");
}

/// Eight writers in two processes, and no reader, take one read-write lock 25 times each,
/// holding it 2 ms: they hand it over as mutex waiters do. The same loop of mutexes, run first
/// on the same store, is the baseline: no writer waits much longer than the longest mutex wait —
/// never the 2 s a waiting writer's intent lives after its writer stopped asking.
pub async fn writers_alone_hand_over_like_a_mutex<S: Store>(store: &S)
where
    S::Backend: SharedLocks,
{
    let mutexes = longest_of_eight_in_turn(store, Take::Mutex).await;
    let writers = longest_of_eight_in_turn(store, Take::Write).await;
    // A stale intent bars the next writer for its whole 2 s life; a store slower than the
    // baseline's run-to-run spread would need three quarters of that to look the same.
    let bound = mutexes + WAITER_MARK_TTL * 3 / 4;
    assert!(
        writers < bound,
        "a writer waited {writers:?}, mutexes at most {mutexes:?} in the same loop"
    );
}

/// The same with fair lockers (writers wait as in notified mode there, one per process asking
/// the store): a writer waits no longer than a fair mutex does, beyond a small margin.
pub async fn fair_writers_alone_hand_over_like_fair_mutexes<S: Store>(store: &S)
where
    S::Backend: SharedLocks,
{
    let fair = |builder: crate::LockerBuilder<_>| builder.wait(LONG).ttl(LONG).fair(LONG);
    let mutexes = longest_of_eight_waiting(store, Take::Mutex, fair).await;
    let writers = longest_of_eight_waiting(store, Take::Write, fair).await;
    let bound = mutexes + WAITER_MARK_TTL * 3 / 4;
    assert!(
        writers < bound,
        "a fair writer waited {writers:?}, fair mutexes at most {mutexes:?} in the same loop"
    );
}

/// A writer waiting in the same process as the holder — a writer, then readers — is woken by
/// their release, not by its backoff (as long as its wait). Behind a writer it waits in its
/// locker's line and is handed the lock, with no store call. Behind readers it asks the store,
/// and on a store that cannot announce a release (MySQL) only the release in the process wakes
/// it: released just after one of the waiter's refreshes (every 500 ms, which keep its intent),
/// the lock is its own well before the next is due.
pub async fn a_writer_is_woken_by_a_release_in_its_own_process<S: Store>(store: &S)
where
    S::Backend: SharedLocks,
{
    let backend = CountingBackend::new(store.backend().await);
    let one = locker(backend.clone(), |builder| {
        builder.wait(LONG).ttl(LONG).backoff(LONG, LONG)
    });
    let name = format!("{}k", one.settings().prefix);

    let writer = one.write("k").await.expect("free");
    let writer_task = one.clone();
    let waiting = taking(async move { writer_task.write("k").await });
    until("the waiter is in its locker's line", || {
        one.waiting_in_line(&name) == 1
    })
    .await;
    let asked = backend.counts().acquires;
    writer.release().await.expect("released");
    waiting
        .await
        .expect("the waiter finished")
        .expect("behind a writer");
    assert_eq!(
        backend.counts().acquires,
        asked,
        "behind a writer: handed the lock, no store call"
    );

    let readers = [
        one.read("k").await.expect("free"),
        one.read("k").await.expect("shared"),
    ];
    let answered = backend.acquires_answered();
    let writer_task = one.clone();
    let waiting = taking(async move { writer_task.write("k").await });
    refreshed_once(&backend, answered).await;
    let released = tokio::time::Instant::now();
    for reader in readers {
        reader.release().await.expect("released");
    }
    let taken = waiting
        .await
        .expect("the waiter finished")
        .expect("behind readers");
    let after = taken.saturating_duration_since(released);
    assert!(
        after < WOKEN,
        "behind readers: woken {after:?} after the release, not by it"
    );
}

/// A writer that polls is woken by a release in its own process, not by its next backoff (a
/// full-jitter 30 s here, capped by its intent's 500 ms refresh): a hot write lock moves under
/// polling as a mutex does. (On Redis it slept its backoff at every turn: 137 writes/s where
/// polling mutexes took 10 697.)
pub async fn a_polling_writer_is_woken_by_a_release_in_its_own_process<S: Store>(store: &S)
where
    S::Backend: SharedLocks,
{
    let backend = CountingBackend::new(store.backend().await);
    let polling = |builder: crate::LockerBuilder<_>| {
        builder
            .wait_polling(LONG)
            .ttl(LONG)
            .backoff(LONG, LONG)
            .max_local_run(1)
    };
    let one = locker(backend.clone(), polling);

    let writer = one.write("k").await.expect("free");
    let answered = backend.acquires_answered();
    let writer_task = one.clone();
    let waiting = taking(async move { writer_task.write("k").await });
    refreshed_once(&backend, answered).await;
    let released = tokio::time::Instant::now();
    writer.release().await.expect("released");
    let taken = waiting
        .await
        .expect("the waiter finished")
        .expect("behind a writer");
    let after = taken.saturating_duration_since(released);
    assert!(
        after < WOKEN,
        "woken {after:?} after the release, not by it"
    );
}

/// How [`longest_of_eight_in_turn`] takes the lock.
#[derive(Clone, Copy)]
enum Take {
    Mutex,
    Write,
}

/// Eight tasks in two processes take `k` 25 times each as `take` says, holding it 2 ms; the
/// longest any of them waited. Asserts that none held it beside another.
async fn longest_of_eight_in_turn<S: Store>(store: &S, take: Take) -> Duration
where
    S::Backend: SharedLocks,
{
    longest_of_eight_waiting(store, take, |builder| builder.wait(LONG).ttl(LONG)).await
}

/// [`longest_of_eight_in_turn`] with lockers built by `settings`.
async fn longest_of_eight_waiting<S: Store>(
    store: &S,
    take: Take,
    settings: impl Fn(crate::LockerBuilder<S::Backend>) -> crate::LockerBuilder<S::Backend> + Copy,
) -> Duration
where
    S::Backend: SharedLocks,
{
    let (a, b) = two_processes(store).await;
    let lockers = [locker(a, settings), locker(b, settings)];
    let inside = Arc::new(Occupancy::default());
    let longest_micros = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|task| {
            let (locker, inside, longest_micros) = (
                lockers[task % 2].clone(),
                inside.clone(),
                longest_micros.clone(),
            );
            tokio::spawn(async move {
                for _ in 0..25 {
                    let asked = tokio::time::Instant::now();
                    let held = match take {
                        Take::Mutex => locker.lock("k").await?,
                        Take::Write => locker.write("k").await?,
                    };
                    let waited = u64::try_from(asked.elapsed().as_micros()).unwrap_or(u64::MAX);
                    longest_micros.fetch_max(waited, SeqCst);
                    inside.visit(Duration::from_millis(2)).await;
                    held.release().await?;
                }
                Ok::<_, crate::LockError>(())
            })
        })
        .collect();
    for task in tasks {
        let done = task.await.expect("a contender panicked");
        done.expect("every contender gets the lock each time");
    }
    assert_eq!(inside.most(), 1, "two holders inside at once");
    Duration::from_micros(longest_micros.load(SeqCst))
}

/// Each reader's lease runs out on its own: a crashed reader holds up writers only until then,
/// while the others keep theirs.
pub async fn a_readers_lease_expires_on_its_own<S: Store>(store: &S)
where
    S::Backend: SharedLocks,
{
    let (a, b) = two_processes(store).await;
    let crashed = granted(a.acquire_read("lock:k", request(SHORT)).await, "a reader");
    let lasting = granted(
        b.acquire_read("lock:k", request(LONG)).await,
        "another reader",
    );
    sleep(SHORT + SLACK).await;

    let extended = a
        .extend("lock:k", &crashed.lease, LONG)
        .await
        .expect("answered");
    assert!(!extended, "the crashed reader's lease ran out");
    busy(
        a.acquire_write("lock:k", request(LONG)).await,
        "the other reader still holds it",
    );
    b.release("lock:k", &lasting.lease).await.expect("released");
    granted(
        a.acquire_write("lock:k", request(LONG)).await,
        "no reader left",
    );
}
