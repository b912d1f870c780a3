//! The process's session: one etcd lease that every key of the backend is bound to, kept
//! alive by one keep-alive stream — renewing the session renews every lock it holds.
//!
//! The session knows until when the lease is certainly alive: a keep-alive sent at `t` and
//! answered with a TTL of `s` seconds keeps it at least until `t + s` on the cluster (the
//! leader counts from when it receives it, and a new leader extends every lease), less the
//! drift margin ([`lease_deadline`]). A lock is vouched for as far as the session is: extending
//! one asks the store nothing while the session is confirmed far enough ahead, and renews the
//! session at once when it is not.
//!
//! A lease the cluster let expire (a keep-alive answered with TTL 0) is replaced by a new one:
//! the keys of the old one are gone, and so are its locks, which their extends then report.
//! Keys whose deletion failed (the cluster was unreachable) are deleted again after every
//! renewal, so a waiter's place or an abandoned lock never outlives the outage in the queue.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use etcd_client::{Client, KvClient, LeaseClient};
use tokio::sync::{Notify, watch};
use tokio::time::{Instant, sleep, timeout};

use crate::backend::{BackendError, lease_deadline};

/// How long the keep-alive task pauses after a failure before it tries again.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// The session's lease as last confirmed: which lease, and until when it is certainly alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Term {
    /// The lease id keys are bound to.
    pub(super) lease: i64,
    /// Until when the cluster certainly keeps it.
    pub(super) until: Instant,
}

/// The backend's end of the session; the keep-alive task ends (revoking the lease, which
/// frees every lock still held) when it is dropped.
#[derive(Debug)]
pub(super) struct Session {
    shared: Arc<Shared>,
    ttl: Duration,
}

#[derive(Debug)]
struct Shared {
    term: watch::Sender<Term>,
    renew_now: Notify,
    /// Keys to delete once the cluster answers again.
    orphans: Mutex<Vec<Vec<u8>>>,
}

impl Session {
    /// Grants a lease of `ttl` (whole seconds, at least one; the cluster may raise it to its
    /// minimum) and starts keeping it alive.
    pub(super) async fn start(client: &Client, ttl: Duration) -> Result<Self, BackendError> {
        let mut leases = client.lease_client();
        let (term, granted) = grant(&mut leases, ttl).await?;
        let shared = Arc::new(Shared {
            term: watch::Sender::new(term),
            renew_now: Notify::new(),
            orphans: Mutex::default(),
        });
        tokio::spawn(keep_alive(client.clone(), Arc::downgrade(&shared), granted));
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
        *self.shared.term.borrow()
    }

    /// The session once it is confirmed alive until `until` or later, renewing it at once
    /// when it is not yet. Waits as long as the cluster does not answer (callers bound it by
    /// their store timeout); a lease that expired meanwhile is answered with its successor.
    pub(super) async fn vouch(&self, until: Instant) -> Term {
        let mut terms = self.shared.term.subscribe();
        loop {
            let term = *terms.borrow_and_update();
            if term.until >= until {
                return term;
            }
            self.shared.renew_now.notify_one();
            if terms.changed().await.is_err() {
                // The sender lives in `self.shared`: it cannot have been dropped.
                return term;
            }
        }
    }

    /// Remembers `key` as one to delete once the cluster answers again.
    pub(super) fn orphan(&self, key: Vec<u8>) {
        self.shared.orphans().push(key);
    }
}

impl Shared {
    fn orphans(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        self.orphans
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Grants a lease of `ttl`: its term, and the TTL the cluster granted.
async fn grant(leases: &mut LeaseClient, ttl: Duration) -> Result<(Term, Duration), BackendError> {
    let seconds = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
    let sent = Instant::now();
    let granted = leases
        .grant(seconds, None)
        .await
        .map_err(BackendError::new)?;
    let ttl = Duration::from_secs(granted.ttl().unsigned_abs());
    let until = lease_deadline(sent, ttl);
    Ok((
        Term {
            lease: granted.id(),
            until,
        },
        ttl,
    ))
}

/// Keeps the session's lease alive every quarter of its TTL (or at once when asked), until the
/// session is dropped; then revokes it.
async fn keep_alive(client: Client, shared: Weak<Shared>, ttl: Duration) {
    let mut leases = client.lease_client();
    let mut kv = client.kv_client();
    let Some(mut lease) = shared.upgrade().map(|shared| shared.term.borrow().lease) else {
        return;
    };
    while shared.strong_count() > 0 {
        match keep_stream(&mut leases, &mut kv, &shared, lease, ttl).await {
            Stream::Dropped => break,
            Stream::Broken => {}
            Stream::Expired => {
                tracing::warn!(
                    lease,
                    "etcd session expired: its locks are lost; starting a new one"
                );
                match grant(&mut leases, ttl).await {
                    Ok((term, _)) => {
                        lease = term.lease;
                        if let Some(alive) = shared.upgrade() {
                            alive.term.send_replace(term);
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
    leases.revoke(lease).await.ok();
}

/// How a keep-alive stream ended.
enum Stream {
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
    leases: &mut LeaseClient,
    kv: &mut KvClient,
    shared: &Weak<Shared>,
    lease: i64,
    ttl: Duration,
) -> Stream {
    let period = ttl / 4;
    let Ok((mut keeper, mut answers)) = leases.keep_alive(lease).await else {
        return Stream::Broken;
    };
    loop {
        let sent = Instant::now();
        if keeper.keep_alive().await.is_err() {
            return Stream::Broken;
        }
        let Ok(Ok(Some(answer))) = timeout(period, answers.message()).await else {
            return Stream::Broken;
        };
        if answer.ttl() <= 0 {
            return Stream::Expired;
        }
        let Some(alive) = shared.upgrade() else {
            return Stream::Dropped;
        };
        let answered = Duration::from_secs(answer.ttl().unsigned_abs());
        let until = lease_deadline(sent, answered);
        alive.term.send_replace(Term { lease, until });
        delete_orphans(&alive, kv).await;
        tokio::select! {
            () = sleep(period) => {}
            () = alive.renew_now.notified() => {}
        }
    }
}

/// Deletes the keys whose deletion failed earlier; those that fail again stay.
async fn delete_orphans(shared: &Shared, kv: &mut KvClient) {
    let orphans = std::mem::take(&mut *shared.orphans());
    for key in orphans {
        if kv.delete(key.clone(), None).await.is_err() {
            shared.orphans().push(key);
        }
    }
}
