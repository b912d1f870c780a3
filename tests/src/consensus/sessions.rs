//! The session behind every lock of a consensus store: a holder whose server dies moves to
//! another within its session and keeps its locks; a holder cut off from the cluster past its
//! session's TTL loses them (it is told so by its deadline, another process takes them with a
//! larger fence, and its session cannot vouch for them again); a backend that is dropped frees
//! its locks at once.

use std::time::Duration;

use tokio::time::{Instant, sleep, timeout};
use tower_lock::Locker;
use tower_lock::backend::{Attempt, LockBackend};

use super::ConsensusStore;
use crate::{granted, request};

const SESSION_TTL: Duration = Duration::from_secs(3);

/// A holder talking to two followers keeps its lock while each of them is killed in turn (and
/// the first restarted before the second goes): it moves to the other within its session, its
/// lease is never reported lost, another process never gets the lock, and its release finds
/// the lock still its own.
///
/// # Panics
///
/// When any of that fails.
pub async fn a_holder_whose_server_dies_keeps_its_lock<S: ConsensusStore>() {
    let mut cluster = S::start(3);
    let leader = cluster.leader().expect("the cluster has a leader");
    let followers: Vec<usize> = (0..3).filter(|server| *server != leader).collect();
    let holder = Locker::builder(cluster.backend(&followers, SESSION_TTL).await)
        .ttl(Duration::from_secs(2))
        .build()
        .expect("valid settings");
    let other = cluster.backend(&[leader], SESSION_TTL).await;
    let held = holder.lock("k").await.expect("free");
    let mut lost = std::pin::pin!(held.guard().lost());

    for follower in followers {
        cluster.kill(follower);
        let back_at = Instant::now() + SESSION_TTL;
        while Instant::now() < back_at {
            let taken = other
                .acquire("lock:k", request(Duration::from_secs(2)))
                .await;
            assert!(
                !matches!(taken, Ok(Attempt::Acquired(_))),
                "another process took the lock while its holder moved servers"
            );
            assert!(
                timeout(Duration::from_millis(200), &mut lost)
                    .await
                    .is_err(),
                "the holder was told its lease was lost while its session lived"
            );
        }
        cluster.restart(follower);
        assert!(cluster.wait_serving(follower), "the follower serves again");
    }

    assert!(held.guard().is_held());
    held.release()
        .await
        .expect("the lock is still the holder's");
}

/// A holder whose only member is frozen (as a paused or partitioned holder is cut off): the
/// leader lets its session expire, another process takes the lock with a larger fence, and
/// the holder is told its lease is lost by its deadline; once the member thaws, its old
/// session is gone and its lock stays lost.
///
/// # Panics
///
/// When any of that fails.
pub async fn a_holder_cut_off_past_its_session_loses_the_lock<S: ConsensusStore>() {
    let cluster = S::start(3);
    let leader = cluster.leader().expect("the cluster has a leader");
    let (cut, others): (Vec<usize>, Vec<usize>) = (0..3).partition(|member| *member != leader);
    let (cut, others) = (cut[0], [others[0], cut[1]]);
    let holder = Locker::builder(cluster.backend(&[cut], SESSION_TTL).await)
        .ttl(Duration::from_secs(2))
        .build()
        .expect("valid settings");
    let taker = cluster.backend(&others, SESSION_TTL).await;
    let held = holder.lock("k").await.expect("free");
    let stale_fence = held.guard().fence().expect("the store fences");
    let lost = held.guard().lost();

    cluster.pause(cut);
    let cut_off = Instant::now();
    let taken = async {
        loop {
            if let Ok(Attempt::Acquired(grant)) = taker
                .acquire("lock:k", request(Duration::from_secs(2)))
                .await
            {
                return grant;
            }
            sleep(Duration::from_millis(100)).await;
        }
    };
    let taken = timeout(SESSION_TTL * 3, taken)
        .await
        .expect("the lock is taken once the cut-off holder's session expires");
    let taken_after = cut_off.elapsed();
    let reported = timeout(Duration::from_secs(1), lost).await;
    cluster.resume(cut);

    assert!(
        taken_after >= SESSION_TTL - Duration::from_millis(500),
        "taken {taken_after:?} after the cut, before the session could expire"
    );
    assert!(
        reported.is_ok(),
        "the holder was told by the time the lock passed on"
    );
    // The store's own token; a guard's is composed with its hold's number in its run: the
    // store's × 256 + the number (middleware/docs/fencing.md).
    let fence = taken.fence.expect("the store fences");
    assert!(
        fence.get() * 256 > stale_fence.get(),
        "the new holder's fence {fence} × 256 > the stale {stale_fence}"
    );
    assert!(!held.guard().is_held());
}

/// Dropping a backend ends its session: a lock it held is free at once, not after the
/// session's TTL. The twin: a backend still alive keeps it.
///
/// # Panics
///
/// When any of that fails.
pub async fn a_dropped_backend_frees_its_locks_at_once<S: ConsensusStore>() {
    let cluster = S::start(1);
    let (kept, dropped, other) = (
        cluster.backend(&[0], SESSION_TTL).await,
        cluster.backend(&[0], SESSION_TTL).await,
        cluster.backend(&[0], SESSION_TTL).await,
    );
    granted(
        kept.acquire("lock:kept", request(Duration::from_secs(2)))
            .await,
    );
    granted(
        dropped
            .acquire("lock:dropped", request(Duration::from_secs(2)))
            .await,
    );

    drop(dropped);
    sleep(Duration::from_millis(500)).await;

    let freed = other
        .acquire("lock:dropped", request(Duration::from_secs(2)))
        .await;
    assert!(
        matches!(freed, Ok(Attempt::Acquired(_))),
        "the dropped backend's lock is free well within its session's TTL"
    );
    let kept_lock = other
        .acquire("lock:kept", request(Duration::from_secs(2)))
        .await;
    assert!(
        matches!(kept_lock, Ok(Attempt::Busy { .. })),
        "the live backend's lock is still held"
    );
}

/// A release lost while the cluster is down (its only server killed) leaves the lock's key
/// behind, kept alive by the holder's session; once the server is back, the session deletes
/// it at once (within 12 s here: the client's reconnection to a server that just came back
/// took more than 8 s once on a loaded machine, with the whole suite running), not at its next
/// renewal, a quarter of the session away (15 s here). The twin: a lock its holder keeps stays
/// held.
///
/// # Panics
///
/// When any of that fails.
pub async fn a_release_lost_while_the_cluster_is_down_frees_the_lock_once_it_is_back<
    S: ConsensusStore,
>() {
    let mut cluster = S::start(1);
    let session = Duration::from_secs(60);
    let (holder, other) = (
        cluster.backend(&[0], session).await,
        cluster.backend(&[0], session).await,
    );
    let ttl = Duration::from_secs(20);
    let released = granted(holder.acquire("lock:released", request(ttl)).await);
    granted(holder.acquire("lock:kept", request(ttl)).await);

    cluster.kill(0);
    let release = holder.release("lock:released", &released.lease);
    let lost = timeout(Duration::from_millis(500), release).await;
    assert!(
        !matches!(lost, Ok(Ok(_))),
        "the release could not go through"
    );
    cluster.restart(0);
    assert!(cluster.wait_serving(0), "the server serves again");
    let back = Instant::now();

    while !matches!(
        other.acquire("lock:released", request(ttl)).await,
        Ok(Attempt::Acquired(_))
    ) {
        assert!(
            back.elapsed() < Duration::from_secs(12),
            "the lock whose release was lost is still held 12 s after the server came back"
        );
        sleep(Duration::from_millis(50)).await;
    }
    let kept = other.acquire("lock:kept", request(ttl)).await;
    assert!(
        matches!(kept, Ok(Attempt::Busy { .. })),
        "the lock its holder keeps is still held"
    );
}
