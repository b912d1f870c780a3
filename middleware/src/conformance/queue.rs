//! Backends with a wait queue: first come, first served across processes, and a waiter that
//! leaves the line does not hold it up.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, sleep};

use super::Store;
use super::support::{LONG, SHORT, locker, two_processes};

/// Fair-mode tickets: long enough to survive the case's pauses.
const TICKETS: Duration = Duration::from_secs(3);

/// Twelve waiters queued alternately in two fair processes behind a held lock are served in
/// the order they arrived.
pub async fn fair_waiters_are_served_in_arrival_order<S: Store>(store: &S) {
    let (a, b) = two_processes(store).await;
    let fair = |builder: crate::LockerBuilder<_>| builder.wait(LONG).ttl(LONG).fair(TICKETS);
    let lockers = [locker(a, fair), locker(b, fair)];
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
        sleep(Duration::from_millis(30)).await;
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
