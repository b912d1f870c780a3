//! Locks on a three-member cluster while members fail: the leader killed under contention
//! (nobody is let in twice, and grants go on), and the quorum lost (new acquires fail within
//! the store timeout, holders are told their leases are lost by their deadline) and restored
//! (locks are granted again by the same backends, nothing restarted).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{Instant, sleep, timeout};
use tower_lock::backend::LockBackend;
use tower_lock::{LockError, Locker};

use super::{ConsensusStore, all};
use crate::Occupancy;

/// Sessions of 6 s: lockers lease up to 4 s.
const SESSION_TTL: Duration = Duration::from_secs(6);
const TTL: Duration = Duration::from_secs(3);
const STORE_TIMEOUT: Duration = Duration::from_secs(1);

async fn backend<S: ConsensusStore>(cluster: &S) -> S::Backend {
    cluster.backend(&all(3), SESSION_TTL).await
}

fn locker<B: LockBackend>(backend: B, wait: Duration) -> Locker<B> {
    Locker::builder(backend)
        .ttl(TTL)
        .wait(wait)
        .store_timeout(STORE_TIMEOUT)
        .build()
        .expect("valid settings")
}

/// Sixteen contenders in two processes take one lock over and over while the cluster's leader
/// is killed: never two inside at once, and locks are granted after the kill as before it. The
/// same contenders without the lock are seen inside together (the probe works).
///
/// # Panics
///
/// When any of that fails.
pub async fn killing_the_leader_under_contention_lets_nobody_in_twice<S: ConsensusStore>() {
    let mut cluster = S::start(3);
    let lockers = [
        locker(backend(&cluster).await, Duration::from_secs(20)),
        locker(backend(&cluster).await, Duration::from_secs(20)),
    ];
    let inside = Arc::new(Occupancy::default());
    let granted = Arc::new(Mutex::new(Vec::new()));
    let refused = Arc::new(AtomicUsize::new(0));
    let stop_at = Instant::now() + Duration::from_secs(6);
    let contenders: Vec<_> = (0..16)
        .map(|contender| {
            let locker = lockers[contender % 2].clone();
            let (inside, granted, refused) = (inside.clone(), granted.clone(), refused.clone());
            tokio::spawn(async move {
                while Instant::now() < stop_at {
                    match locker.lock("k").await {
                        Ok(held) => {
                            granted.lock().expect("not poisoned").push(Instant::now());
                            inside.visit(Duration::from_millis(2)).await;
                            held.release().await.ok();
                        }
                        // During the election: the store answers no (or late); ask again.
                        Err(LockError::StoreUnavailable(_) | LockError::Busy { .. }) => {
                            refused.fetch_add(1, Ordering::SeqCst);
                            sleep(Duration::from_millis(20)).await;
                        }
                        Err(error) => panic!("unexpected: {error}"),
                    }
                }
            })
        })
        .collect();

    sleep(Duration::from_secs(2)).await;
    let leader = cluster.leader().expect("the cluster has a leader");
    cluster.kill(leader);
    let killed = Instant::now();
    for contender in contenders {
        contender.await.expect("a contender panicked");
    }
    let grants = granted.lock().expect("not poisoned").clone();
    let before_kill = grants.iter().filter(|at| **at < killed).count();
    let next_grant = grants.iter().filter(|at| **at >= killed).min();
    let refusals = refused.load(Ordering::SeqCst);
    // The failover's figures, for docs/BENCHMARKS.md.
    eprintln!(
        "leader killed: next grant after {:?}; {refusals} acquires refused meanwhile; {} grants before, {} after",
        next_grant.map(|at| *at - killed),
        before_kill,
        grants.len() - before_kill
    );

    assert_eq!(inside.most(), 1, "two contenders held the lock at once");
    assert!(before_kill > 0, "locks were granted before the kill");
    assert!(
        next_grant.is_some(),
        "locks were granted after the leader's kill ({refusals} refusals)"
    );
    let unlocked = Arc::new(Occupancy::default());
    let visits: Vec<_> = (0..16)
        .map(|_| {
            let unlocked = unlocked.clone();
            tokio::spawn(async move { unlocked.visit(Duration::from_millis(2)).await })
        })
        .collect();
    for visit in visits {
        visit.await.expect("a visitor panicked");
    }
    assert!(unlocked.most() > 1, "without the lock they overlap");
}

/// Two of three members killed: a new acquire fails within the store timeout, and a holder is
/// told its lease is lost by its deadline (the session's last confirmed renewal plus its TTL).
/// Both members restarted: the same backends take locks again (on a new session where the
/// cluster expired the old one), the dropped one too.
///
/// # Panics
///
/// When any of that fails.
pub async fn losing_the_quorum_fails_fast_and_restoring_it_resumes_service<S: ConsensusStore>() {
    let mut cluster = S::start(3);
    let holder = locker(backend(&cluster).await, Duration::ZERO);
    let other = locker(backend(&cluster).await, Duration::ZERO);
    let held = holder.lock("held").await.expect("free");
    let lost = held.guard().lost();

    let leader = cluster.leader().expect("the cluster has a leader");
    let killed: Vec<usize> = (0..3).filter(|member| *member != leader).collect();
    for member in &killed {
        cluster.kill(*member);
    }
    let cut_off = Instant::now();

    let asked = Instant::now();
    let refused = other.lock("free").await;
    let answered_in = asked.elapsed();
    assert!(
        matches!(refused, Err(LockError::StoreUnavailable(_))),
        "without a quorum a new acquire fails: {refused:?}"
    );
    assert!(
        answered_in < STORE_TIMEOUT + Duration::from_millis(500),
        "answered after {answered_in:?}, store timeout {STORE_TIMEOUT:?}"
    );
    // The session vouches for the lock until the cluster could expire it at the earliest: the
    // last confirmed renewal plus the session's TTL.
    let reported = timeout(SESSION_TTL + Duration::from_secs(1), lost).await;
    assert!(
        reported.is_ok(),
        "the holder was told its lease was lost within the session's TTL"
    );
    assert!(cut_off.elapsed() <= SESSION_TTL + Duration::from_secs(1));
    drop(held);

    for member in &killed {
        cluster.restart(*member);
    }
    let resumed = async {
        loop {
            match other.lock("held").await {
                Ok(again) => return again,
                Err(_) => sleep(Duration::from_millis(100)).await,
            }
        }
    };
    let again = timeout(Duration::from_secs(30), resumed)
        .await
        .expect("the lock the cut-off holder dropped is granted again once the quorum is back");
    again.release().await.expect("released");
}
