//! The operator's view: who holds a lock as another process sees it, the held locks paged
//! through, and the operator's release that fences out the holder it frees.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use super::Store;
use super::support::{LONG, SHORT, SLACK, locker, two_processes, until};
use crate::backend::{
    Attempt, Hold, Inspect, LockBackend, LockRequest, OwnerToken, Semaphores, SharedLocks,
};
use crate::{FencingToken, LeaseLost, LockError};

/// The operator's view of a lock held in its own process counts that process's tasks waiting
/// in its locker's line behind the holder: the store knows nothing of them (another process's
/// view counts none, the twin).
pub async fn an_operator_counts_the_waiters_in_its_own_processs_line<S: Store>(store: &S)
where
    S::Backend: Inspect,
{
    let (a, b) = two_processes(store).await;
    let worker = locker(a, |builder| builder.wait(LONG).ttl(LONG));
    let elsewhere = locker(b, |builder| builder.wait(LONG).ttl(LONG));
    let held = worker.lock("coupon:42").await.expect("free");
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let worker = worker.clone();
            tokio::spawn(async move { worker.lock("coupon:42").await.map(drop) })
        })
        .collect();
    let name = format!("{}coupon:42", worker.settings().prefix);
    until("both tasks wait in the worker's line", || {
        worker.waiting_in_line(&name) == 2
    })
    .await;

    let seen_here = worker.inspect("coupon:42").await.expect("inspected");
    let seen_elsewhere = elsewhere.inspect("coupon:42").await.expect("inspected");
    assert_eq!(seen_here.waiting, 2, "{seen_here:?}");
    assert_eq!(seen_elsewhere.waiting, 0, "{seen_elsewhere:?}");

    held.release().await.expect("released");
    for waiter in waiters {
        let done = waiter.await.expect("a waiter panicked");
        done.expect("each waiter gets the lock in turn");
    }
}

/// A lock taken in one process and held past its first renewal is seen from another with its
/// holder's label, its fence, how long it has been held and how long its lease has left; a
/// free lock has no holder.
pub async fn an_operator_sees_the_holder_from_another_process<S: Store>(store: &S)
where
    S::Backend: Inspect,
{
    let (a, b) = two_processes(store).await;
    let worker = locker(a, |builder| builder.holder_label("worker-a").ttl(SHORT));
    let operator = locker(b, |builder| builder.holder_label("operator"));
    assert!(
        !operator
            .inspect("coupon:42")
            .await
            .expect("inspected")
            .is_held()
    );

    let held = worker.lock("coupon:42").await.expect("taken");
    tokio::time::sleep(SHORT / 2).await;
    let state = operator.inspect("coupon:42").await.expect("inspected");
    let [holder] = &state.holders[..] else {
        panic!("one holder: {state:?}");
    };
    assert_eq!(holder.label, "worker-a");
    assert_eq!(holder.hold, Hold::Mutex);
    assert_eq!(holder.fence, held.fence(), "the fence the holder was given");
    // Held for half a lease when looked at: a count from anything but the grant (the store's
    // epoch, an older record) is off by far more than the 5 s allowed for a slow machine.
    assert!(holder.held_for < Duration::from_secs(5), "{holder:?}");
    if let Some(left) = holder.lease_left {
        assert!(left <= SHORT && !left.is_zero(), "{holder:?}");
    }

    held.release().await.expect("released");
    let state = operator.inspect("coupon:42").await.expect("inspected");
    assert!(!state.is_held(), "released: {state:?}");
}

/// The operator's release frees a lock whatever its holder (one that renewed its lease at least
/// once): the next holder's fence is above the freed one's, so a fenced write by the freed
/// holder, late, is refused; and the freed holder finds its lease lost at its next renewal.
/// Its twin: without the release, the stuck holder keeps the lock from everybody else.
pub async fn an_operators_release_fences_out_the_holder_it_frees<S: Store>(store: &S)
where
    S::Backend: Inspect,
{
    let (a, b) = two_processes(store).await;
    let stuck = locker(a, |builder| builder.holder_label("stuck").ttl(SHORT));
    let next = locker(b, |builder| builder.holder_label("next").reject());
    let held = stuck.lock("coupon:42").await.expect("taken");
    tokio::time::sleep(SHORT / 2).await;

    let refused = next.lock("coupon:42").await;
    assert!(
        matches!(refused, Err(LockError::Busy { .. })),
        "without the release, the stuck holder keeps it: {refused:?}"
    );

    let freed = next.force_release("coupon:42").await.expect("released");
    assert_eq!(freed.len(), 1, "{freed:?}");
    assert_eq!(
        (freed[0].label.as_str(), freed[0].fence),
        ("stuck", held.fence())
    );
    let taken = next.lock("coupon:42").await.expect("free once released");

    let register = FencedRegister::default();
    if store.fences() {
        let (old, new) = (
            held.fence().expect("fenced"),
            taken.fence().expect("fenced"),
        );
        assert!(new > old, "the next fence {new} is above the freed {old}");
        assert!(register.write(new), "the new holder writes");
        assert!(
            !register.write(old),
            "the freed holder's late write is refused"
        );
    }
    let lost = tokio::time::timeout(SHORT + SLACK, held.lost()).await;
    assert_eq!(
        lost,
        Ok(LeaseLost::Taken),
        "the freed holder learns at its next renewal"
    );
    assert!(!held.is_held());
    assert!(
        next.force_release("coupon:9")
            .await
            .expect("asked")
            .is_empty()
    );
}

/// An operator's release is kept, where the store records it ([`Store::records_releases`]),
/// for the freed holder to be told who freed it; elsewhere the store says nothing (`None`).
/// Its twin: before the release, nobody freed it.
pub async fn a_freed_holder_is_told_who_released_it<S: Store>(store: &S)
where
    S::Backend: Inspect,
{
    let backend = store.backend().await;
    let name = "lock:coupon:7";
    let request = LockRequest::new(OwnerToken::new(), LONG).holder("worker");
    let Attempt::Acquired(granted) = backend.acquire(name, request).await.expect("asked") else {
        panic!("a free lock is granted");
    };
    let before = backend.released_by(name, &granted.lease).await;
    assert_eq!(before.expect("asked"), None, "nobody freed it yet");

    let freed = backend
        .force_release(name, "ops-7")
        .await
        .expect("released");
    // A holder that records itself at its first renewal is not seen, nor freed, before it.
    let seen = usize::from(store.holders_seen_from_grant());
    assert_eq!(freed.len(), seen, "{freed:?}");
    let told = backend
        .released_by(name, &granted.lease)
        .await
        .expect("asked");
    let recorded = store.records_releases().then(|| "ops-7".to_owned());
    assert_eq!(told, recorded);
}

/// Readers and permit holders are each listed with their label, unfenced; a writer waiting for
/// the readers is counted among the waiters; the operator's release frees every one of them.
pub async fn an_operator_sees_every_reader_and_permit<S: Store>(store: &S)
where
    S::Backend: Inspect + SharedLocks + Semaphores,
{
    let (a, b) = two_processes(store).await;
    let readers = locker(a.clone(), |builder| {
        builder.holder_label("reader").ttl(LONG)
    });
    let operator = locker(b, |builder| builder.holder_label("operator"));
    let first = readers.read("report:1").await.expect("a reader");
    let second = locker(a.clone(), |builder| {
        builder.holder_label("reader-2").ttl(LONG)
    });
    let second = second.read("report:1").await.expect("readers share");
    let state = operator.inspect("report:1").await.expect("inspected");
    let mut labels: Vec<(&str, Hold, Option<FencingToken>)> = (state.holders.iter())
        .map(|holder| (holder.label.as_str(), holder.hold, holder.fence))
        .collect();
    labels.sort_by_key(|(label, ..)| *label);
    assert_eq!(
        labels,
        [("reader", Hold::Read, None), ("reader-2", Hold::Read, None)]
    );

    let writer = locker(a.clone(), |builder| {
        builder
            .holder_label("writer")
            .wait_polling(Duration::from_secs(5))
    });
    let waiting = tokio::spawn(async move { writer.write("report:1").await.map(|_| ()) });
    let counted = async {
        while operator
            .inspect("report:1")
            .await
            .expect("inspected")
            .waiting
            == 0
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(2), counted)
        .await
        .expect("the waiting writer is counted");
    let freed = operator.force_release("report:1").await.expect("released");
    assert_eq!(freed.len(), 2, "{freed:?}");
    waiting
        .await
        .expect("the writer ran")
        .expect("it got the lock");
    drop((first, second));

    let two = NonZeroU32::new(2).expect("two");
    let permits = locker(a, |builder| builder.holder_label("permit").ttl(LONG));
    let _held = permits.permit("pool", two).await.expect("a permit");
    let state = operator.inspect("pool").await.expect("inspected");
    let [holder] = &state.holders[..] else {
        panic!("one permit holder: {state:?}");
    };
    assert_eq!(
        (holder.label.as_str(), holder.hold, holder.fence),
        ("permit", Hold::Permit { permits: two }, None)
    );
}

/// The held locks under a prefix come in pages of at most the limit asked for, every one
/// once; free locks and locks under other prefixes are not listed. (Holders that record
/// themselves at their first renewal are listed once past it.)
pub async fn held_keys_come_in_bounded_pages<S: Store>(store: &S)
where
    S::Backend: Inspect,
{
    let (a, b) = two_processes(store).await;
    let from_grant = store.holders_seen_from_grant();
    let worker = locker(a, |builder| {
        builder.ttl(if from_grant { LONG } else { SHORT })
    });
    let operator = locker(b, |builder| builder);
    let mut held = Vec::new();
    for key in ["list:a", "list:b", "list:c", "list:d", "list:e", "other:x"] {
        held.push(worker.lock(key).await.expect("taken"));
    }
    worker
        .lock("list:f")
        .await
        .expect("taken")
        .release()
        .await
        .expect("released");
    if !from_grant {
        tokio::time::sleep(SHORT).await;
    }

    let (mut listed, mut after) = (Vec::new(), None::<String>);
    for _ in 0..100 {
        let page = (operator.held_keys("list:", after.as_deref(), 2).await).expect("a page");
        assert!(page.names.len() <= 2, "{page:?}");
        listed.extend(page.names);
        after = page.next;
        if after.is_none() {
            break;
        }
    }
    listed.sort();
    assert_eq!(listed, ["list:a", "list:b", "list:c", "list:d", "list:e"]);
}

/// A data store that keeps the largest fence it has seen and refuses writes with a smaller
/// one: what fencing asks of the resource.
#[derive(Debug, Default)]
struct FencedRegister(AtomicU64);

impl FencedRegister {
    fn write(&self, fence: FencingToken) -> bool {
        self.0.fetch_max(fence.get(), SeqCst) <= fence.get()
    }
}
