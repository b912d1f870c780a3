//! Backends with a wait queue: first come, first served across processes, processes take
//! turns in notified mode, a handoff never lets two in, and a waiter that leaves the line does
//! not hold it up.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, sleep};

use super::Store;
use super::support::{LONG, Occupancy, SHORT, locker, taking, two_processes, until};
use crate::backend::FencingToken;
use crate::testing::CountingBackend;

/// Twelve waiters queued alternately in two fair processes behind a held lock are served in
/// the order they arrived: each with its ticket in the store's queue before the next asks.
pub async fn fair_waiters_are_served_in_arrival_order<S: Store>(store: &S) {
    let (a, b) = two_processes(store).await;
    let backends = [CountingBackend::new(a), CountingBackend::new(b)];
    // Tickets outlive the case: none is renewed (every third of its TTL) while they queue.
    let fair = |builder: crate::LockerBuilder<_>| builder.wait(LONG).ttl(LONG).fair(LONG);
    let lockers = backends.clone().map(|backend| locker(backend, fair));
    let tickets = || {
        backends
            .iter()
            .map(CountingBackend::tickets_queued)
            .sum::<usize>()
    };

    let holder = lockers[0].lock("k").await.expect("free");
    let (served, mut order) = mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for waiter in 0..12 {
        let (locker, served) = (lockers[waiter % 2].clone(), served.clone());
        waiters.push(tokio::spawn(async move {
            let held = locker.lock("k").await?;
            served.send(waiter).ok();
            held.release().await
        }));
        until("the waiter's ticket is in the store's queue", || {
            tickets() > waiter
        })
        .await;
    }
    holder.release().await.expect("released");
    for waiter in waiters {
        let done = waiter.await.expect("a waiter panicked");
        done.expect("every waiter gets the lock");
    }
    let order: Vec<usize> = (0..12).map(|_| order.try_recv().expect("served")).collect();

    assert_eq!(
        order,
        (0..12).collect::<Vec<_>>(),
        "served in arrival order"
    );
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
    let waiting = taking(async move { patient.lock("k").await });
    sleep(SHORT).await;
    let released = Instant::now();
    holder.release().await.expect("released");

    let taken = waiting.await.expect("the waiter finished");
    let taken = taken.expect("the patient waiter gets the lock");
    // The departed ticket would hold the line until it expired, 30 s after it was last
    // renewed: a tenth of that is far above a woken waiter's attempt.
    let after = taken.saturating_duration_since(released);
    assert!(after < LONG / 10, "served {after:?} after the release");
}

/// Twelve notified waiters in two processes, behind a lock held by the first, are served
/// alternately (starting with either process) when locks are not handed on within a process:
/// a release does not keep the lock among its own process's waiters while another process's
/// waiter is in line. Each holds the lock until both processes have their next waiter's ticket
/// in the store's queue (while they have one left), so that either could be served next.
pub async fn notified_processes_take_turns<S: Store>(store: &S) {
    let (a, b) = two_processes(store).await;
    let backends = Arc::new([CountingBackend::new(a), CountingBackend::new(b)]);
    let notified = |builder: crate::LockerBuilder<_>| builder.wait(LONG).ttl(LONG).max_local_run(1);
    let lockers = [0, 1].map(|process| locker(backends[process].clone(), notified));
    let served: Arc<Mutex<Vec<usize>>> = Arc::default();
    // Whether `process` has a waiter whose ticket is in the store and who was not served yet,
    // or no waiter left: each of its six waiters queues one ticket as its process's head.
    let ready = {
        let (backends, served) = (backends.clone(), served.clone());
        move |process: usize| {
            let served = served.lock().unwrap();
            let done = served
                .iter()
                .filter(|&&waiter| waiter % 2 == process)
                .count();
            done == 6 || backends[process].tickets_queued() > done
        }
    };

    let holder = lockers[0].lock("k").await.expect("free");
    let mut waiters = Vec::new();
    for waiter in 0..12 {
        let (locker, served, ready) = (lockers[waiter % 2].clone(), served.clone(), ready.clone());
        waiters.push(tokio::spawn(async move {
            let held = locker.lock("k").await?;
            served.lock().unwrap().push(waiter);
            until(
                "both processes' next waiters have tickets in the store's queue",
                || ready(0) && ready(1),
            )
            .await;
            held.release().await
        }));
    }
    until(
        "both processes' first waiters have tickets in the store's queue",
        || ready(0) && ready(1),
    )
    .await;
    holder.release().await.expect("released");
    for waiter in waiters {
        let done = waiter.await.expect("a waiter panicked");
        done.expect("every waiter gets the lock");
    }

    let by_process: String = (served.lock().unwrap().iter())
        .map(|waiter| if waiter % 2 == 0 { 'A' } else { 'B' })
        .collect();
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
