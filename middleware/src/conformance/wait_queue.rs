//! Backends with a wait queue: first come, first served across processes, processes take
//! turns in notified mode, a handoff never lets two in, and a waiter that leaves the line does
//! not hold it up.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, sleep};

use super::Store;
use super::support::{LONG, Occupancy, SHORT, locker, two_processes};
use crate::backend::FencingToken;

/// Fair-mode tickets: long enough to survive the case's pauses.
const TICKETS: Duration = Duration::from_secs(3);

/// Twelve waiters queued alternately in two fair processes behind a held lock are served in
/// the order they arrived.
pub async fn fair_waiters_are_served_in_arrival_order<S: Store>(store: &S) {
    let (a, b) = two_processes(store).await;
    let fair = |builder: crate::LockerBuilder<_>| builder.wait(LONG).ttl(LONG).fair(TICKETS);
    let lockers = [locker(a, fair), locker(b, fair)];

    // Arrival is when a waiter's ticket reaches the store: 100 ms apart, so that a loaded
    // machine delaying one waiter's first statement does not swap two arrivals.
    let order = served_alternately(&lockers, Duration::from_millis(100), Duration::ZERO).await;

    assert_eq!(
        order,
        (0..12).collect::<Vec<_>>(),
        "served in arrival order"
    );
}

/// Twelve waiters queue alternately in the two `lockers`' processes, `apart` after one another,
/// behind a lock held by the first; each holds it for `hold`. The order they were served in.
async fn served_alternately<B: crate::backend::LockBackend>(
    lockers: &[crate::Locker<B>; 2],
    apart: Duration,
    hold: Duration,
) -> Vec<usize> {
    let holder = lockers[0].lock("k").await.expect("free");
    let (served, mut order) = mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for waiter in 0..12 {
        let (locker, served) = (lockers[waiter % 2].clone(), served.clone());
        waiters.push(tokio::spawn(async move {
            let held = locker.lock("k").await?;
            served.send(waiter).ok();
            sleep(hold).await;
            held.release().await
        }));
        sleep(apart).await;
    }

    holder.release().await.expect("released");
    for waiter in waiters {
        let done = waiter.await.expect("a waiter panicked");
        done.expect("every waiter gets the lock");
    }
    (0..12).map(|_| order.try_recv().expect("served")).collect()
}

/// A fair waiter that gives up leaves the line at once: the waiter behind it gets the lock as
/// soon as it is released, not after the departed ticket expires.
pub async fn a_queued_waiter_that_gives_up_leaves_the_line<S: Store>(store: &S) {
    let (a, b) = two_processes(store).await;
    let fair =
        |wait| move |builder: crate::LockerBuilder<_>| builder.wait(wait).ttl(LONG).fair(LONG);
    let holder = locker(a.clone(), fair(LONG)).lock("k").await.expect("free");
    let impatient = locker(b.clone(), fair(SHORT));
    let patient = locker(b, fair(LONG));

    let gave_up = impatient.lock("k").await;
    assert!(gave_up.is_err(), "the lock is held");
    let waiting = tokio::spawn(async move {
        let held = patient.lock("k").await?;
        let taken = Instant::now();
        held.release().await.map(|()| taken)
    });
    sleep(SHORT).await;
    let released = Instant::now();
    holder.release().await.expect("released");

    let taken = waiting.await.expect("the waiter finished");
    let taken = taken.expect("the patient waiter gets the lock");
    let after = taken.saturating_duration_since(released);
    assert!(after < LONG / 10, "served {after:?} after the release");
}

/// Twelve notified waiters queued alternately in two processes behind a held lock, each
/// holding it for a while, are served alternately (starting with either process) when locks
/// are not handed on within a process: a release does not keep the lock among its own
/// process's waiters while another process's waiter is in line.
pub async fn notified_processes_take_turns<S: Store>(store: &S) {
    let (a, b) = two_processes(store).await;
    let notified = |builder: crate::LockerBuilder<_>| builder.wait(LONG).ttl(LONG).max_local_run(1);
    let lockers = [locker(a, notified), locker(b, notified)];

    let apart = Duration::from_millis(10);
    let order = served_alternately(&lockers, apart, Duration::from_millis(20)).await;

    let by_process: String = order
        .iter()
        .map(|waiter| if waiter % 2 == 0 { 'A' } else { 'B' })
        .collect();
    // The first two heads reach the store's line 10 ms apart; a loaded store may answer the
    // second first, and then B's turns come first.
    assert!(
        by_process == "ABABABABABAB" || by_process == "BABABABABABA",
        "each process in turn: {by_process}"
    );
}

/// Sixteen notified contenders in two processes take one lock over and over, handing it on
/// with no pause: never two inside at once, and every grant's fence is above the one before.
/// The same contenders without the lock are seen inside together (the probe works).
pub async fn notified_handoffs_never_let_two_in<S: Store>(store: &S) {
    let (a, b) = two_processes(store).await;
    let notified = |builder: crate::LockerBuilder<_>| builder.wait(LONG).ttl(LONG);
    let lockers = [locker(a, notified), locker(b, notified)];
    let inside = Arc::new(Occupancy::default());
    let fences: Arc<Mutex<Vec<FencingToken>>> = Arc::default();
    let mut contenders = Vec::new();
    for contender in 0..16 {
        let (locker, inside, fences) = (
            lockers[contender % 2].clone(),
            Arc::clone(&inside),
            Arc::clone(&fences),
        );
        contenders.push(tokio::spawn(async move {
            for _ in 0..10 {
                let held = locker.lock("k").await?;
                if let Some(fence) = held.guard().fence() {
                    fences.lock().expect("not poisoned").push(fence);
                }
                inside.visit(Duration::from_millis(1)).await;
                held.release().await?;
            }
            Ok::<_, crate::LockError>(())
        }));
    }
    for contender in contenders {
        let done = contender.await.expect("a contender panicked");
        done.expect("every contender gets the lock each time");
    }

    assert_eq!(inside.most(), 1, "never two inside");
    let fences = fences.lock().expect("not poisoned").clone();
    if store.fences() {
        assert_eq!(fences.len(), 160, "a fence with every grant");
        assert!(
            fences.windows(2).all(|pair| pair[0] < pair[1]),
            "fences rise with every grant: {fences:?}"
        );
    }
    let unlocked = Arc::new(Occupancy::default());
    let visits: Vec<_> = (0..16)
        .map(|_| {
            let unlocked = Arc::clone(&unlocked);
            tokio::spawn(async move { unlocked.visit(Duration::from_millis(1)).await })
        })
        .collect();
    for visit in visits {
        visit.await.expect("a visitor panicked");
    }
    assert!(unlocked.most() > 1, "without the lock they overlap");
}
