//! What every backend must do: exclusion, ownership, expiry, fencing, giving back what an
//! abandoned attempt took, several keys at once, and waking waiters.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, sleep};

use super::Store;
use super::support::{
    LONG, Occupancy, SHORT, SLACK, STORE_TIMEOUT, busy, free_within, granted, locker, request,
    taking, two_processes,
};
use crate::backend::Attempt;
use crate::backend::LockBackend;

/// 64 contenders for one key, half in each of two processes, each holding it for a
/// millisecond: every one gets it, and never two at once.
pub async fn exclusion_holds_under_64_contenders_in_two_processes<S: Store>(store: &S) {
    let most = contend(store, |_| "k".to_owned()).await;
    assert_eq!(most, 1, "two contenders held the key at once");
}

/// The twin of the exclusion case: the same contenders, each on a key of its own, do overlap
/// (so the probe would see two holders at once if the lock let them in).
pub async fn without_a_shared_key_contenders_overlap<S: Store>(store: &S) {
    let most = contend(store, |contender| format!("k{contender}")).await;
    assert!(
        most > 1,
        "the probe saw no overlap even without a shared key"
    );
}

/// Runs 64 contenders over two processes, contender `i` locking `key(i)` and staying inside
/// for 5 ms; the most that were inside at once.
async fn contend<S: Store>(store: &S, key: impl Fn(usize) -> String) -> usize {
    let (a, b) = two_processes(store).await;
    let wait = |builder: crate::LockerBuilder<_>| builder.wait(LONG).ttl(LONG);
    let lockers = [locker(a, wait), locker(b, wait)];
    let inside = Arc::new(Occupancy::default());
    let contenders: Vec<_> = (0..64)
        .map(|contender| {
            let (locker, inside, key) = (
                lockers[contender % 2].clone(),
                inside.clone(),
                key(contender),
            );
            tokio::spawn(async move {
                let work = |_| async move { inside.visit(Duration::from_millis(5)).await };
                locker.with_lock(&key, work).await
            })
        })
        .collect();
    for contender in contenders {
        let locked = contender.await.expect("a contender panicked");
        locked.expect("every contender gets the lock within the wait");
    }
    inside.most()
}

/// A holder whose lease ran out cannot release or extend the lock its next holder took.
pub async fn release_and_extend_act_only_for_the_owner<S: Store>(store: &S) {
    let (a, b) = two_processes(store).await;
    let stale = granted(
        a.acquire("lock:k", request(SHORT)).await,
        "the first holder",
    );
    sleep(SHORT + SLACK).await;
    let current = granted(b.acquire("lock:k", request(LONG)).await, "the next holder");

    let released = a
        .release("lock:k", &stale.lease)
        .await
        .expect("the store answers");
    let extended = a
        .extend("lock:k", &stale.lease, LONG)
        .await
        .expect("the store answers");

    assert!(
        !released,
        "a stale holder's release reports it held nothing"
    );
    assert!(!extended, "a stale holder's extend reports it held nothing");
    busy(
        a.acquire("lock:k", request(LONG)).await,
        "the current holder keeps its lock",
    );
    let released = b
        .release("lock:k", &current.lease)
        .await
        .expect("the store answers");
    assert!(released, "the current holder releases its own lock");
    granted(
        a.acquire("lock:k", request(LONG)).await,
        "free after its release",
    );
}

/// A lock nobody releases is free again once its lease runs out; meanwhile it is busy, with
/// at most the lease left.
pub async fn a_lease_expires_after_its_ttl<S: Store>(store: &S) {
    let (a, b) = two_processes(store).await;
    granted(a.acquire("lock:k", request(SHORT)).await, "the holder");

    let holder_ttl = busy(b.acquire("lock:k", request(LONG)).await, "held");
    assert!(
        holder_ttl.is_none_or(|left| left <= SHORT),
        "the holder has at most its lease left: {holder_ttl:?}"
    );
    sleep(SHORT + SLACK).await;
    granted(
        b.acquire("lock:k", request(LONG)).await,
        "free after the lease",
    );
}

/// A holder that extends its lease keeps the lock past the first TTL.
pub async fn extending_keeps_a_lease_past_its_ttl<S: Store>(store: &S) {
    let (a, b) = two_processes(store).await;
    let held = granted(a.acquire("lock:k", request(SHORT)).await, "the holder");
    let started = Instant::now();

    while started.elapsed() < SHORT * 2 {
        sleep(SHORT / 3).await;
        let extended = a.extend("lock:k", &held.lease, SHORT).await;
        assert!(
            extended.expect("the store answers"),
            "the owner extends its lease"
        );
    }

    busy(
        b.acquire("lock:k", request(LONG)).await,
        "still held, two TTLs later",
    );
    assert!(
        a.release("lock:k", &held.lease)
            .await
            .expect("the store answers")
    );
}

/// Every exclusive hold of a key gets a larger fencing token than every earlier one — across
/// processes, releases, expiries (where leases expire) and other keys (or none at all, on a
/// store that does not fence).
pub async fn fences_increase_strictly_per_key<S: Store>(store: &S) {
    let (a, b) = two_processes(store).await;
    let mut last = None;
    for round in 0..6 {
        let backend = if round % 2 == 0 { &a } else { &b };
        let expires = round % 3 == 1 && store.leases_expire();
        let lease = if expires { SHORT } else { LONG };
        let held = granted(backend.acquire("lock:k", request(lease)).await, "free");
        let other = format!("lock:other:{round}");
        let unrelated = granted(backend.acquire(&other, request(LONG)).await, "free");
        if !store.fences() {
            assert_eq!((held.fence, unrelated.fence), (None, None), "no fencing");
            backend.release("lock:k", &held.lease).await.ok();
            continue;
        }
        let fence = held
            .fence
            .expect("a fencing store fences every exclusive hold");
        assert!(Some(fence) > last, "round {round}: {fence} after {last:?}");
        last = Some(fence);
        if expires {
            sleep(lease + SLACK).await;
        } else {
            backend
                .release("lock:k", &held.lease)
                .await
                .expect("released");
        }
    }
}

/// Acquires dropped at any point — before the store answered, while it answered, after —
/// leave no lock behind: what a lost answer took is given back, within the store timeout.
pub async fn a_dropped_acquire_gives_back_what_it_took<S: Store>(store: &S) {
    let (a, b) = two_processes(store).await;
    let locker = locker(a, |builder| builder.reject().ttl(LONG));
    for _ in 0..50 {
        let attempt = tokio::spawn({
            let locker = locker.clone();
            async move { locker.lock("k").await.map(drop) }
        });
        sleep(Duration::from_micros(fastrand::u64(0..500))).await;
        attempt.abort();
        drop(attempt.await);
    }

    // Each give-back is one store call, given up after the store timeout.
    assert!(
        free_within(&b, "lock:k", STORE_TIMEOUT + SLACK).await,
        "a dropped acquire left the lock held"
    );
    assert_eq!(locker.held_locks(), 0);
}

/// A set of keys is taken whole or not at all: while one is held, none of the others is
/// taken; once it is free, all are.
pub async fn several_keys_are_taken_all_or_none<S: Store>(store: &S) {
    let (a, b) = two_processes(store).await;
    let names = ["lock:a", "lock:b", "lock:c"];
    let held = granted(a.acquire("lock:b", request(LONG)).await, "b is free");

    busy(b.acquire_many(&names, request(LONG)).await, "b is held");
    for name in ["lock:a", "lock:c"] {
        let grant = granted(a.acquire(name, request(LONG)).await, "nothing was taken");
        a.release(name, &grant.lease).await.expect("released");
    }
    a.release("lock:b", &held.lease).await.expect("released");
    let Ok(Attempt::Acquired(grants)) = b.acquire_many(&names, request(LONG)).await else {
        panic!("every key is free, so the set is taken");
    };

    assert_eq!(grants.len(), names.len(), "one grant per key");
    for (name, grant) in names.iter().zip(&grants) {
        busy(a.acquire(name, request(LONG)).await, "held by the set");
        assert_eq!(grant.fence.is_some(), store.fences(), "{name}'s fence");
    }
}

/// Requests for overlapping sets of keys ({a, b}, {b, c}, {c, a}) from two processes all get
/// their locks: nobody waits while holding part of a set.
pub async fn overlapping_sets_of_keys_never_deadlock<S: Store>(store: &S) {
    let (a, b) = two_processes(store).await;
    let wait = |builder: crate::LockerBuilder<_>| builder.wait(LONG).ttl(LONG);
    let lockers = [locker(a, wait), locker(b, wait)];
    let sets = [["a", "b"], ["b", "c"], ["c", "a"]];
    let inside: Arc<[Occupancy; 3]> = Arc::default();
    let requests: Vec<_> = (0..24)
        .map(|i| {
            let (locker, set, inside) = (lockers[i % 2].clone(), sets[i % 3], inside.clone());
            tokio::spawn(async move {
                let held = locker.lock_all(set).await?;
                let visits = set.map(|key| {
                    let index = usize::from(key.as_bytes()[0] - b'a');
                    inside[index].visit(Duration::from_millis(2))
                });
                futures_util::future::join_all(visits).await;
                held.release().await
            })
        })
        .collect();
    for request in requests {
        let done = request.await.expect("a request panicked");
        done.expect("every set is taken and released");
    }
    assert!(
        inside.iter().all(|key| key.most() == 1),
        "each key had one holder at a time"
    );
}

/// A waiter gets the lock soon after its release, well before the holder's lease would have
/// run out.
pub async fn a_waiter_wakes_soon_after_the_release<S: Store>(store: &S) {
    let (a, b) = two_processes(store).await;
    let wait = |builder: crate::LockerBuilder<_>| builder.wait(LONG).ttl(LONG);
    let (holder, waiter) = (locker(a, wait), locker(b, wait));
    let held = holder.lock("k").await.expect("free");
    let waiting = taking(async move { waiter.lock("k").await });
    sleep(SHORT).await;

    let released = Instant::now();
    held.release().await.expect("released");
    let taken = waiting.await.expect("the waiter finished");
    let taken = taken.expect("the waiter got the lock and released it");

    // The holder's lease had 30 s left: a tenth of that is twelve times a polling waiter's
    // longest backoff, and far from what a waiter that missed the release would wait.
    let after = taken.saturating_duration_since(released);
    assert!(
        after < LONG / 10,
        "woken {after:?} after the release, not by the lease"
    );
}

/// A lock that vanishes without an announcement (its holder crashed, so its lease just runs
/// out) costs a waiter at most the holder's remaining lease, never the whole wait.
pub async fn a_lost_announcement_costs_at_most_the_holders_lease<S: Store>(store: &S) {
    let (a, b) = two_processes(store).await;
    granted(
        a.acquire("lock:k", request(SHORT)).await,
        "the crashed holder",
    );
    let waiter = locker(b, |builder| builder.wait(LONG).ttl(LONG));
    let started = Instant::now();

    let taken = waiter.lock("k").await;

    let waited = started.elapsed();
    drop(taken.expect("the waiter gets the lock once the lease runs out"));
    // The busy answer says when the lease ends; the waiter sleeps until then and asks again.
    // The 2 s are that attempt's room on a slow machine; a waiter that relied on the
    // announcement would wait its whole 30 s.
    assert!(
        waited < SHORT + Duration::from_secs(2),
        "waited {waited:?} for a {SHORT:?} lease"
    );
}
