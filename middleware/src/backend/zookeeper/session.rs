//! The process's session: one ZooKeeper session that every node of the backend is bound to
//! (its nodes are ephemeral) — keeping the session alive keeps every lock it holds.
//!
//! The client reconnects on its own, to any server of the ensemble, and the session survives
//! as long as it reconnects within the session timeout. The session knows until when the
//! ensemble certainly keeps it: any request the servers receive renews it for the whole
//! timeout, so a request sent at `t` and answered keeps it at least until `t + timeout`, less
//! the drift margin ([`lease_deadline`]). The session renews itself every quarter of the
//! timeout (a request of its own, beside the client's pings), or at once when a lock must be
//! vouched for further ahead. A lock is vouched for as far as the session is.
//!
//! A session the ensemble expired (the process was paused or cut off past the timeout) is
//! replaced by a new one: the nodes of the old one are gone, and so are its locks, which their
//! extends then report.
//!
//! A node the session keeps that no lock or waiter of this process owns any more would hold
//! its lock's line up for as long as the process lives: one whose deletion failed (the ensemble
//! was unreachable), or one whose creation's answer was lost. So the session knows which
//! nodes it owns — by the path they are created at, owned from before the creation until given
//! up, or until its owner's deletion has ended — and after every renewal asks the ensemble
//! which ephemeral nodes it holds (`getEphemerals`) and deletes the others, on a task of its
//! own (a renewal, and a lock waiting to be vouched for, never waits for a sweep). After a
//! deletion that failed or was given up (a release lost while the ensemble elected a leader),
//! it renews at once, and sweeps again every [`RETRY_PAUSE`] until a sweep finishes.

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::{Instant, sleep};
use zookeeper_client::Client;

use super::nodes::owner_prefix;
use crate::backend::store_support::owned_keys::{Deletion, OwnedKeys};
use crate::backend::store_support::session_term::{Term, Terms};
use crate::backend::{BackendError, lease_deadline};

/// How long the session task pauses after a failure before it tries again.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// How the backend reaches the ensemble: what a new session is started with.
#[derive(Clone, Debug)]
pub(super) struct Ensemble {
    /// The connect string, `host:port,host:port[/chroot]`.
    pub(super) cluster: String,
    /// The session timeout asked for.
    pub(super) timeout: Duration,
    /// Every node of the backend lies under this path.
    pub(super) root: String,
}

/// The backend's end of the session; the session task closes the session (freeing every lock
/// still held) when it is dropped.
#[derive(Debug)]
pub(super) struct Session {
    shared: Arc<ZookeeperSessionState>,
    timeout: Duration,
}

#[derive(Debug)]
struct ZookeeperSessionState {
    client: Mutex<Client>,
    terms: Terms,
    /// Whether the client is connected: waiters trust their watches only while it is.
    connected: watch::Sender<bool>,
    closed: Notify,
    /// Counts renewals: the sweeper follows it (and ends when the session is gone).
    renewals: watch::Sender<u64>,
    /// The paths (less their sequence) of the nodes a lock or waiter of this process owns.
    owned: OwnedKeys<String>,
}

impl Session {
    /// Connects to `ensemble` and starts keeping the session alive.
    pub(super) async fn start(ensemble: Ensemble) -> Result<Self, BackendError> {
        let (client, term) = connect(&ensemble).await?;
        let timeout = client.session_timeout();
        let shared = Arc::new(ZookeeperSessionState {
            client: Mutex::new(client),
            terms: Terms::new(term),
            connected: watch::Sender::new(true),
            closed: Notify::new(),
            renewals: watch::Sender::new(0),
            owned: OwnedKeys::default(),
        });
        let renewals = shared.renewals.subscribe();
        tokio::spawn(sweeper(
            renewals,
            Arc::downgrade(&shared),
            ensemble.root.clone(),
        ));
        tokio::spawn(keep_alive(ensemble, Arc::downgrade(&shared), timeout));
        Ok(Self { shared, timeout })
    }

    /// The session timeout the ensemble granted.
    pub(super) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The longest lease the session vouches for without asking the ensemble: two thirds of
    /// its timeout. Renewed every quarter, it is always confirmed that far ahead while the
    /// ensemble answers.
    pub(super) fn max_ttl(&self) -> Duration {
        self.timeout * 2 / 3
    }

    /// The client of the current session.
    pub(super) fn client(&self) -> Client {
        lock(&self.shared.client).clone()
    }

    /// The session's current term, as last confirmed.
    pub(super) fn term(&self) -> Term {
        self.shared.terms.current()
    }

    /// Follows whether the client is connected.
    pub(super) fn connection(&self) -> watch::Receiver<bool> {
        self.shared.connected.subscribe()
    }

    /// The session once it is confirmed alive until `until` or later, renewing it at once
    /// when it is not yet. Waits as long as the ensemble does not answer (callers bound it by
    /// their store timeout); a session that expired meanwhile is answered with its successor.
    pub(super) async fn vouch(&self, until: Instant) -> Term {
        self.shared.terms.vouch(until).await
    }

    /// A lock or a waiter is about to create a node at `prefix`: the session keeps it.
    pub(super) fn own(&self, prefix: &str) {
        self.shared.owned.own(prefix.to_owned());
    }

    /// Nobody here owns the node at `prefix` any more: if the caller's deletion does not
    /// remove it, the next sweep does.
    pub(super) fn disown(&self, prefix: &str) {
        self.shared.owned.disown(prefix);
    }

    /// A deletion of the nodes at `prefixes` begins; they are disowned once it ends, and the
    /// session renews and sweeps at once unless it is seen through: see [`Deletion`].
    pub(super) fn deleting(&self, prefixes: Vec<String>) -> Deletion<'_, String, impl FnOnce()> {
        let shared = &self.shared;
        shared.owned.deleting(prefixes, || shared.terms.renew_now())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.shared.closed.notify_one();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update leaves the data consistent between statements.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Starts a session on `ensemble`: its client, and its first term.
async fn connect(ensemble: &Ensemble) -> Result<(Client, Term), BackendError> {
    let sent = Instant::now();
    let client = Client::connector()
        .with_session_timeout(ensemble.timeout)
        .with_fail_eagerly()
        .connect(&ensemble.cluster)
        .await
        .map_err(BackendError::new)?;
    let until = lease_deadline(sent, client.session_timeout());
    let session = client.session_id().0;
    Ok((client, Term { session, until }))
}

/// Keeps the session alive every quarter of its timeout (or at once when asked), follows the
/// client's connection, and starts a new session when the ensemble expired the old one —
/// until the session is dropped; then closes it.
async fn keep_alive(ensemble: Ensemble, shared: Weak<ZookeeperSessionState>, timeout: Duration) {
    let period = timeout / 4;
    loop {
        let Some(alive) = shared.upgrade() else {
            return;
        };
        let client = lock(&alive.client).clone();
        let mut states = client.state_watcher();
        if states.peek_state().is_terminated() {
            drop(client);
            match renew_session(&ensemble, &alive).await {
                Renewed::Yes => continue,
                Renewed::Closed => return,
            }
        }
        let sent = Instant::now();
        let pause = match client.check_stat("/").await {
            Ok(_) => {
                let session = client.session_id().0;
                let until = lease_deadline(sent, client.session_timeout());
                alive.terms.confirm(Term { session, until });
                alive.connected.send_replace(true);
                alive.renewals.send_modify(|renewals| *renewals += 1);
                period
            }
            Err(error) => {
                tracing::debug!(%error, "ZooKeeper session: no answer to the renewal");
                alive.connected.send_replace(false);
                RETRY_PAUSE
            }
        };
        drop(client);
        tokio::select! {
            () = sleep(pause) => {}
            () = alive.terms.renewal_asked() => {}
            _ = states.changed() => {}
            () = alive.closed.notified() => return,
        }
    }
}

/// How [`renew_session`] ended.
enum Renewed {
    /// A new session is current.
    Yes,
    /// The backend was dropped meanwhile: nothing to renew.
    Closed,
}

/// The ensemble expired the session (or the client ended it): its locks are lost. Starts a
/// new one, trying until it can or the backend is dropped, and makes it current.
async fn renew_session(ensemble: &Ensemble, alive: &ZookeeperSessionState) -> Renewed {
    tracing::warn!(
        session = alive.terms.current().session,
        "ZooKeeper session expired: its locks are lost; starting a new one"
    );
    alive.connected.send_replace(false);
    loop {
        let connected = tokio::select! {
            connected = connect(ensemble) => connected,
            () = alive.closed.notified() => return Renewed::Closed,
        };
        match connected {
            Ok((client, term)) => {
                *lock(&alive.client) = client;
                alive.terms.confirm(term);
                alive.connected.send_replace(true);
                return Renewed::Yes;
            }
            Err(error) => tracing::warn!(%error, "ZooKeeper session: no new session yet"),
        }
        tokio::select! {
            () = sleep(RETRY_PAUSE) => {}
            () = alive.closed.notified() => return Renewed::Closed,
        }
    }
}

/// After each renewal, sweeps the session's nodes nobody owns — on a task of its own, so that
/// no renewal (and no lock waiting to be vouched for) waits for a sweep — until the session is
/// gone.
async fn sweeper(
    mut renewals: watch::Receiver<u64>,
    shared: Weak<ZookeeperSessionState>,
    root: String,
) {
    let mut swept = true;
    loop {
        let renewed = if swept {
            renewals.changed().await
        } else {
            // The last sweep did not finish: again soon, renewed or not.
            tokio::select! {
                renewed = renewals.changed() => renewed,
                () = sleep(RETRY_PAUSE) => Ok(()),
            }
        };
        let (Ok(()), Some(alive)) = (renewed, shared.upgrade()) else {
            return;
        };
        let client = lock(&alive.client).clone();
        swept = sweep(&alive, &client, &root).await;
    }
}

/// Deletes the ephemeral nodes of the session under `root` that nobody here owns: whether
/// every one is gone. A node's path carries its sequence, so the deletion can only hit the
/// node listed, never a later one created at the same prefix.
async fn sweep(shared: &ZookeeperSessionState, client: &Client, root: &str) -> bool {
    let Ok(listed) = client.list_ephemerals(root).await else {
        return false;
    };
    let strays = shared.owned.strays(listed, |path| owner_prefix(path));
    let mut swept = true;
    for path in strays {
        tracing::debug!(%path, "ZooKeeper session: deleting a node nobody owns");
        let deleted = client.delete(&path, None).await;
        swept &= matches!(deleted, Ok(()) | Err(zookeeper_client::Error::NoNode));
    }
    swept
}
