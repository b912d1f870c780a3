//! Semaphores: at most their permits at once, across processes, woken by any release.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::sleep;

use super::Store;
use super::support::{
    LONG, Occupancy, SHORT, SLACK, WOKEN, announces, busy, granted, locker, refreshed_once,
    request, taking, two_processes, until,
};
use crate::backend::{LockBackend, Semaphores};
use crate::engine::SHARED_REFRESH;
use crate::testing::CountingBackend;

fn permits(count: u32) -> NonZeroU32 {
    NonZeroU32::new(count).expect("a positive count")
}

/// A semaphore of 2 admits two holders, refuses a third, and admits it once one leaves.
pub async fn a_semaphore_admits_at_most_its_permits<S: Store>(store: &S)
where
    S::Backend: Semaphores,
{
    let (a, b) = two_processes(store).await;
    let two = permits(2);
    let first = granted(
        a.acquire_permit("lock:k", request(LONG), two).await,
        "a permit",
    );
    granted(
        b.acquire_permit("lock:k", request(LONG), two).await,
        "a second permit",
    );
    assert_eq!(first.fence, None, "permits are not fenced");

    busy(
        a.acquire_permit("lock:k", request(LONG), two).await,
        "both permits are out",
    );
    a.release("lock:k", &first.lease).await.expect("released");
    granted(
        b.acquire_permit("lock:k", request(LONG), two).await,
        "one came back",
    );
}

/// A crashed holder's permit comes back once its lease runs out.
pub async fn a_permit_expires_on_its_own<S: Store>(store: &S)
where
    S::Backend: Semaphores,
{
    let (a, b) = two_processes(store).await;
    let one = permits(1);
    granted(
        a.acquire_permit("lock:k", request(SHORT), one).await,
        "the crashed holder",
    );
    busy(
        b.acquire_permit("lock:k", request(LONG), one).await,
        "its permit is out",
    );
    sleep(SHORT + SLACK).await;
    granted(
        b.acquire_permit("lock:k", request(LONG), one).await,
        "its lease ran out",
    );
}

/// Contenders from two processes for a semaphore of 3 never exceed 3 inside, and reach it.
pub async fn a_semaphore_across_two_processes_admits_exactly_its_permits<S: Store>(store: &S)
where
    S::Backend: Semaphores,
{
    let (a, b) = two_processes(store).await;
    let wait = |builder: crate::LockerBuilder<_>| builder.wait(LONG).ttl(LONG);
    let lockers = [locker(a, wait), locker(b, wait)];
    let inside = Arc::new(Occupancy::default());
    let contenders: Vec<_> = (0..24)
        .map(|i| {
            let (locker, inside) = (lockers[i % 2].clone(), inside.clone());
            tokio::spawn(async move {
                let held = locker.permit("k", permits(3)).await?;
                inside.visit(Duration::from_millis(20)).await;
                held.release().await
            })
        })
        .collect();
    for contender in contenders {
        let done = contender.await.expect("a contender panicked");
        done.expect("every contender gets a permit");
    }
    assert_eq!(inside.most(), 3, "at most 3 at once, and 3 reached");
}

/// A waiter for a full semaphore is woken by the release of any permit, not only the earliest
/// holder's: with two permits out, the later holder's release lets it in while the earlier
/// one still holds. Where the store announces releases, at once: released just after one of
/// the waiter's periodic looks (every 500 ms), the permit is its own well before the next.
/// Where it cannot (a silent room: the waiter polls with backoff), by the backoff's next
/// attempt, long before the earlier holder's lease (30 s) runs out.
///
/// Where the store announces releases, the waiter asks nothing more than its refreshes while
/// nothing is released: at most 3 times in two refreshes. (Each attempt of an etcd permit
/// waiter puts its key and, over the permits, deletes it again; the watch of its previous
/// attempt heard that deletion and woke it at once: 60 attempts a second.)
pub async fn a_permit_waiter_is_woken_by_any_holders_release<S: Store>(store: &S)
where
    S::Backend: Semaphores,
{
    let (a, b) = two_processes(store).await;
    let announced = announces(&b);
    let b = CountingBackend::new(b);
    let holders = locker(a, |builder| builder.wait(LONG).ttl(LONG));
    let waiter = locker(b.clone(), |builder| builder.wait(LONG).ttl(LONG));
    let earlier = holders.permit("k", permits(2)).await.expect("a permit");
    let later = holders
        .permit("k", permits(2))
        .await
        .expect("the other permit");
    let waiting = taking(async move { waiter.permit("k", permits(2)).await });
    refreshed_once(&b, 0).await;
    if announced {
        let before = b.acquires_answered();
        sleep(SHARED_REFRESH * 2).await;
        let asked = b.acquires_answered() - before;
        assert!(
            asked <= 3,
            "asked {asked} times in two refreshes, nothing released"
        );
        let asked = b.acquires_answered();
        until("the waiter asked again at its refresh", || {
            b.acquires_answered() > asked
        })
        .await;
    }

    let released = tokio::time::Instant::now();
    later.release().await.expect("released");
    let taken = waiting.await.expect("the waiter finished");
    let taken = taken.expect("the waiter got a permit and gave it back");

    let after = taken.saturating_duration_since(released);
    let bound = if announced { WOKEN } else { LONG / 10 };
    assert!(
        after < bound,
        "woken {after:?} after the later holder's release (announced: {announced})"
    );
    assert!(earlier.guard().is_held(), "the earlier holder still holds");
    earlier.release().await.expect("released");
}

/// A permit waiter in the same process as the holders is woken when one of them leaves, even
/// where the store cannot announce it (MySQL): its backoff is as long as its wait, and a
/// release just after one of its periodic looks (every 500 ms) lets it in well before the next
/// only by waking it.
pub async fn a_permit_waiter_is_woken_by_a_release_in_its_own_process<S: Store>(store: &S)
where
    S::Backend: Semaphores,
{
    let backend = CountingBackend::new(store.backend().await);
    let one = locker(backend.clone(), |builder| {
        builder.wait(LONG).ttl(LONG).backoff(LONG, LONG)
    });
    let earlier = one.permit("k", permits(2)).await.expect("a permit");
    let later = one.permit("k", permits(2)).await.expect("the other permit");
    let answered = backend.acquires_answered();
    let waiter = one.clone();
    let waiting = taking(async move { waiter.permit("k", permits(2)).await });
    refreshed_once(&backend, answered).await;

    let released = tokio::time::Instant::now();
    later.release().await.expect("released");
    let taken = waiting.await.expect("the waiter finished");
    let taken = taken.expect("the waiter got a permit and gave it back");
    let after = taken.saturating_duration_since(released);
    assert!(
        after < WOKEN,
        "woken {after:?} after a holder of its own process left, not by it"
    );
    earlier.release().await.expect("released");
}
