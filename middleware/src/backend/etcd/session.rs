//! The process's session: one etcd lease that every key of the backend is bound to, kept
//! alive by one keep-alive stream — renewing the session renews every lock it holds.
//!
//! The session knows until when the lease is certainly alive: a keep-alive sent at `t` and
//! answered with a TTL of `s` seconds keeps it at least until `t + s` on the cluster (the
//! leader counts from when it receives it, and a new leader extends every lease), less the
//! drift margin ([`lease_deadline`]). A lock is vouched for as far as the session is: extending
//! one renews nothing while the session is confirmed far enough ahead (it reads the lock's key,
//! which an operator may have deleted), and renews the session at once when it is not.
//!
//! A lease the cluster let expire (a keep-alive answered with TTL 0) is replaced by a new one:
//! the keys of the old one are gone, and so are its locks, which their extends then report.
//!
//! A key the session's lease keeps alive that no lock or waiter of this process owns any more
//! would hold its lock's line up for as long as the process lives: one whose deletion failed
//! or was cut short (the cluster was unreachable), or one put by an attempt whose answer was
//! lost and that reached the cluster only after the attempt was given up. So the session knows
//! which keys it owns — a key is owned from before it is put until it is given up, and one
//! being deleted until its deletion ends (were it disowned before, a sweep could delete it
//! first, and the release that deleted it would find nothing: a lock reported lost) — and a
//! sweeper task asks the cluster every renewal period which keys its lease holds and deletes
//! the others. After a deletion that failed or was given up (a release lost while the cluster
//! elected a leader), it sweeps at once, and again every [`RETRY_PAUSE`] until a sweep
//! finishes: the lock is free as soon as the cluster answers, not a renewal period later. The
//! sweeps do not wait for the keep-alive: a member without a leader holds a renewal back for a
//! whole election timeout even when a leader is elected meanwhile.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use etcd_client::{Compare, CompareOp, LeaseTimeToLiveOptions, Txn, TxnOp};
use tokio::sync::Notify;
use tokio::time::{Instant, sleep, timeout};

use super::members::Members;
use crate::backend::store_support::owned_keys::{Deletion, OwnedKeys};
use crate::backend::store_support::session_term::{Term, Terms};
use crate::backend::{BackendError, lease_deadline};

/// How long a given-up mark stays: far longer than any request of the attempt it marks can
/// still be on its way.
const GIVEN_UP_FOR: Duration = Duration::from_secs(30);

/// How long the keep-alive task pauses after a failure before it tries again, and the sweeper
/// after a sweep that did not finish.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// The backend's end of the session; the keep-alive task ends (revoking the lease, which
/// frees every lock still held) when it is dropped.
#[derive(Debug)]
pub(super) struct Session {
    shared: Arc<EtcdSessionState>,
    ttl: Duration,
}

#[derive(Debug)]
struct EtcdSessionState {
    terms: Terms,
    /// The session was dropped: revoke the lease now.
    closed: Notify,
    /// Strays are suspected, or the session was dropped: the sweeper's wake-up.
    sweep_now: Arc<Notify>,
    /// The keys a lock or a waiter of this process owns.
    owned: OwnedKeys<Vec<u8>>,
    /// Given-up marks, oldest first, with when they were put.
    marks: Mutex<VecDeque<(Instant, Vec<u8>)>>,
    /// A deletion failed or was cut short, or a sweep did not finish: keys nobody owns may
    /// still hold lines up, so the next sweep comes soon rather than at the next renewal.
    strays_suspected: AtomicBool,
}

impl Session {
    /// Grants a lease of `ttl` (whole seconds, at least one; the cluster may raise it to its
    /// minimum) and starts keeping it alive.
    pub(super) async fn start(members: Arc<Members>, ttl: Duration) -> Result<Self, BackendError> {
        let (term, granted) = grant(&members, ttl).await?;
        let sweep_now = Arc::new(Notify::new());
        let shared = Arc::new(EtcdSessionState {
            terms: Terms::new(term),
            closed: Notify::new(),
            sweep_now: Arc::clone(&sweep_now),
            owned: OwnedKeys::default(),
            marks: Mutex::default(),
            strays_suspected: AtomicBool::new(false),
        });
        tokio::spawn(sweep_strays(
            Arc::clone(&members),
            Arc::downgrade(&shared),
            sweep_now,
            granted / 4,
        ));
        tokio::spawn(keep_alive(members, Arc::downgrade(&shared), granted));
        Ok(Self {
            shared,
            ttl: granted,
        })
    }

    /// The lease TTL the cluster granted.
    pub(super) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The longest lease the session vouches for without asking the cluster: two thirds of
    /// its TTL. Renewed every quarter, it is always confirmed that far ahead while the cluster
    /// answers.
    pub(super) fn max_ttl(&self) -> Duration {
        self.ttl * 2 / 3
    }

    /// The session's current lease, as last confirmed.
    pub(super) fn term(&self) -> Term {
        self.shared.terms.current()
    }

    /// The session once it is confirmed alive until `until` or later, renewing it at once
    /// when it is not yet. Waits as long as the cluster does not answer (callers bound it by
    /// their store timeout); a lease that expired meanwhile is answered with its successor.
    pub(super) async fn vouch(&self, until: Instant) -> Term {
        self.shared.terms.vouch(until).await
    }

    /// A lock or a waiter is about to put `key`: the session keeps it.
    pub(super) fn own(&self, key: &[u8]) {
        self.shared.owned.own(key.to_vec());
    }

    /// The session keeps the given-up mark `key` for a while, then lets the sweep delete it.
    pub(super) fn bury(&self, key: &[u8]) {
        self.own(key);
        let mut marks = lock(&self.shared.marks);
        marks.push_back((Instant::now(), key.to_vec()));
    }

    /// Nobody here owns `key` any more: if the caller's deletion does not remove it, the next
    /// sweep does.
    pub(super) fn disown(&self, key: &[u8]) {
        self.shared.owned.disown(key);
    }

    /// A deletion of `keys` begins; they are disowned once it ends, and the sweeper sweeps at
    /// once unless it is seen through: see [`Deletion`].
    pub(super) fn deleting<'s>(
        &'s self,
        keys: &[Vec<u8>],
    ) -> Deletion<'s, Vec<u8>, impl FnOnce() + use<'s>> {
        let shared = &self.shared;
        shared
            .owned
            .deleting(keys.to_vec(), || shared.suspect_strays())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.shared.closed.notify_one();
        self.shared.sweep_now.notify_one();
    }
}

impl EtcdSessionState {
    /// Keys nobody owns may be left: sweep now, and again soon until a sweep finishes.
    fn suspect_strays(&self) {
        self.strays_suspected.store(true, Ordering::Relaxed);
        self.sweep_now.notify_one();
    }

    /// Disowns the given-up marks that have served their time.
    fn expire_marks(&self) {
        let mut marks = lock(&self.marks);
        while let Some((put, key)) = marks.front() {
            if put.elapsed() < GIVEN_UP_FOR {
                break;
            }
            self.owned.disown(key);
            marks.pop_front();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update leaves the data consistent between statements.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Grants a lease of `ttl`: its term, and the TTL the cluster granted.
async fn grant(members: &Members, ttl: Duration) -> Result<(Term, Duration), BackendError> {
    let seconds = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
    let sent = Instant::now();
    let call = |client: etcd_client::Client| async move {
        client.lease_client().grant(seconds, None).await
    };
    let granted = members.call(call).await?;
    let ttl = Duration::from_secs(granted.ttl().unsigned_abs());
    let until = lease_deadline(sent, ttl);
    Ok((
        Term {
            session: granted.id(),
            until,
        },
        ttl,
    ))
}

/// Keeps the session's lease alive every quarter of its TTL (or at once when asked), until the
/// session is dropped; then revokes it.
async fn keep_alive(members: Arc<Members>, shared: Weak<EtcdSessionState>, ttl: Duration) {
    let Some(mut lease) = shared
        .upgrade()
        .map(|shared| shared.terms.current().session)
    else {
        return;
    };
    while shared.strong_count() > 0 {
        match keep_stream(&members, &shared, lease, ttl).await {
            StreamEnd::Dropped => break,
            StreamEnd::Broken => {}
            StreamEnd::Expired => {
                tracing::warn!(
                    lease,
                    "etcd session expired: its locks are lost; starting a new one"
                );
                match grant(&members, ttl).await {
                    Ok((term, _)) => {
                        lease = term.session;
                        if let Some(alive) = shared.upgrade() {
                            alive.terms.confirm(term);
                        }
                        continue;
                    }
                    Err(error) => tracing::warn!(%error, "etcd session: no new lease yet"),
                }
            }
        }
        sleep(RETRY_PAUSE).await;
    }
    // The backend is gone: its locks go with it at once rather than at the lease's end.
    let call =
        |client: etcd_client::Client| async move { client.lease_client().revoke(lease).await };
    members.call(call).await.ok();
}

/// How a keep-alive stream ended.
enum StreamEnd {
    /// The session was dropped.
    Dropped,
    /// The stream failed or an answer was late: open another.
    Broken,
    /// The cluster let the lease expire.
    Expired,
}

/// Keeps `lease` alive on one keep-alive stream until it breaks, the lease expires or the
/// session is dropped.
async fn keep_stream(
    members: &Members,
    shared: &Weak<EtcdSessionState>,
    lease: i64,
    ttl: Duration,
) -> StreamEnd {
    let period = ttl / 4;
    let (member, client) = members.pinned();
    let broken = || {
        members.failed(member);
        StreamEnd::Broken
    };
    let Ok((mut keeper, mut answers)) = client.lease_client().keep_alive(lease).await else {
        return broken();
    };
    loop {
        let sent = Instant::now();
        if keeper.keep_alive().await.is_err() {
            return broken();
        }
        let Ok(Ok(Some(answer))) = timeout(period, answers.message()).await else {
            return broken();
        };
        if answer.ttl() <= 0 {
            return StreamEnd::Expired;
        }
        let Some(alive) = shared.upgrade() else {
            return StreamEnd::Dropped;
        };
        let answered = Duration::from_secs(answer.ttl().unsigned_abs());
        let until = lease_deadline(sent, answered);
        alive.terms.confirm(Term {
            session: lease,
            until,
        });
        tokio::select! {
            () = sleep(period) => {}
            () = alive.terms.renewal_asked() => {}
            () = alive.closed.notified() => return StreamEnd::Dropped,
        }
    }
}

/// Sweeps every `period`, or at once when woken by `sweep_now`, and every [`RETRY_PAUSE`] while
/// strays are suspected; ends once the session is dropped.
async fn sweep_strays(
    members: Arc<Members>,
    shared: Weak<EtcdSessionState>,
    sweep_now: Arc<Notify>,
    period: Duration,
) {
    loop {
        let pause = {
            let Some(alive) = shared.upgrade() else {
                return;
            };
            alive.expire_marks();
            alive.strays_suspected.store(false, Ordering::Relaxed);
            let lease = alive.terms.current().session;
            if !sweep(&alive, &members, lease).await {
                alive.strays_suspected.store(true, Ordering::Relaxed);
            }
            if alive.strays_suspected.load(Ordering::Relaxed) {
                RETRY_PAUSE
            } else {
                period
            }
        };
        tokio::select! {
            () = sleep(pause) => {}
            () = sweep_now.notified() => {}
        }
    }
}

/// Deletes the keys `lease` keeps alive that nobody here owns: whether every one is gone.
///
/// A key can be given up and put again under the same name (a permit that landed behind the
/// others deletes its key and asks again), so a name that was a stray when listed may be owned
/// again by the time the deletion lands. So each stray's create revision is read first, the
/// key is checked to be still unowned after that read, and it is deleted only if it is still
/// that incarnation: a later one was owned before it was put, so it has another revision.
async fn sweep(shared: &EtcdSessionState, members: &Members, lease: i64) -> bool {
    let listed = |client: etcd_client::Client| async move {
        let options = LeaseTimeToLiveOptions::new().with_keys();
        client
            .lease_client()
            .time_to_live(lease, Some(options))
            .await
    };
    let Ok(listed) = members
        .call_idempotent(listed)
        .await
        .map(|listed| listed.answer)
    else {
        return false;
    };
    let strays = shared.owned.strays(listed.keys(), |key| key.as_slice());
    let mut swept = true;
    for key in strays {
        let read = |client: etcd_client::Client| {
            let key = key.clone();
            async move { client.kv_client().get(key, None).await }
        };
        let Ok(mut read) = members.call_idempotent(read).await.map(|read| read.answer) else {
            swept = false;
            continue;
        };
        let Some(seen) = read.take_kvs().into_iter().next() else {
            continue;
        };
        if shared.owned.contains(key) {
            continue;
        }
        tracing::debug!(key = %String::from_utf8_lossy(key), "etcd session: deleting a key nobody owns");
        let incarnation =
            Compare::create_revision(key.clone(), CompareOp::Equal, seen.create_revision());
        let delete = Txn::new()
            .when([incarnation])
            .and_then([TxnOp::delete(key.clone(), None)]);
        let delete = |client: etcd_client::Client| {
            let delete = delete.clone();
            async move { client.kv_client().txn(delete).await }
        };
        swept &= members.call_idempotent(delete).await.is_ok();
    }
    swept
}
