//! The ZooKeeper backend (feature `zookeeper`): Curator's lock recipes on ephemeral sequential
//! nodes, on the `zookeeper-client` crate.
//!
//! Every contender for a lock creates an ephemeral sequential node of its own in the lock's
//! directory (`<root>/<name>/x-<owner token>-<sequence>`, `nodes.rs`), bound to the process's
//! session; the node with the lowest sequence holds the lock, and its creation zxid is its
//! fencing token. ZooKeeper answers a write only once a majority of the ensemble has it, so a
//! lock survives the loss of any minority of the servers.
//!
//! * **Acquire** creates the node and lists the directory: the lock is taken if nothing is
//!   ahead of the node, else the node is deleted again and the answer is busy. One such
//!   attempt per lock is under way from a process at a time; another meanwhile waits for its
//!   answer and answers as it was answered: busy, or the store's failure (`in_flight.rs`).
//! * **Waiting** ([`WaitQueue`]): a queued waiter's node stays, in line by its sequence, and
//!   watches only its predecessor (`watches.rs`): first come, first served across processes,
//!   and each release wakes one waiter — Curator's `InterProcessMutex`.
//! * **Leases**: one session per backend (`session.rs`) keeps every node alive; extending a
//!   lock renews nothing while the session is confirmed alive far enough ahead (it reads the
//!   lock's node, which an operator may have deleted). If the ensemble expires the session
//!   (the process was paused or cut off past its timeout), its nodes are deleted, its locks
//!   pass on, and their extends report them lost.
//!   [`LockBackend::max_ttl`] is two thirds of the session timeout.
//! * **Shapes** (`shared_holds.rs`, `permits.rs`): readers and permit holders create shared
//!   nodes beside the exclusive ones, as Curator's `InterProcessReadWriteLock` and semaphore
//!   do; a permit waiter keeps its node in line.
//! * **Release** deletes the node; its path (with its sequence) is the holder's alone. Lock
//!   directories are container nodes, which the server deletes once they are empty. Dropping the
//!   last clone of the backend closes its session, freeing its locks at once.
//!
//! [`WaitQueue`]: crate::backend::WaitQueue
//! [`LockBackend::max_ttl`]: crate::backend::LockBackend::max_ttl

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError};

use crate::backend::store_support::connect::within;
use crate::backend::store_support::holder_record::record;
use crate::backend::store_support::reach::{Dial, Reach};
use crate::backend::waiting::WaitingRoom;
use crate::backend::{
    Attempt, BackendError, FencingToken, Granted, Hold, LockRequest, lease_deadline,
};
use crate::token::OwnerToken;
use in_flight::{InFlight, Landed, Start};
use nodes::{Children, Kind, LockDir, Standing};
use session::{Ensemble, Session};
use watches::Watches;

mod in_flight;
mod inspection;
mod lock_backend;
mod nodes;
mod permits;
mod session;
mod settings;
mod shared_holds;
mod wait_queue;
mod watches;

pub use settings::{DEFAULT_ROOT, DEFAULT_SESSION_TIMEOUT, ZookeeperSettings};

/// Locks in ZooKeeper: an ephemeral sequential node per holder or waiter in the lock's
/// directory, the lowest holding it; fenced by its creation zxid; bound to one session per
/// backend. See the [module](self) docs.
///
/// Clones share the session and the waiting room.
///
/// # Example
///
/// ```no_run
/// use tower_lock::Locker;
/// use tower_lock::backend::zookeeper::ZookeeperBackend;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let backend = ZookeeperBackend::connect("127.0.0.1:2181,127.0.0.1:2182").await?;
/// let locker = Locker::builder(backend).build()?;
/// let held = locker.lock("coupon:42").await?;
/// let fence = held.guard().fence().expect("ZooKeeper fences every hold");
/// // ... write to the data store with `fence` ...
/// held.release().await?;
/// # let _ = fence;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct ZookeeperBackend {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    root: String,
    in_flight: InFlight,
    session: Arc<Session>,
    /// Whether every server refuses connections: the client itself waits to reconnect.
    reach: Arc<Reach>,
    watches: Watches,
    room: Arc<WaitingRoom>,
}

/// What the backend keeps of one hold: its node, the session it is bound to, and its creation
/// zxid (the fencing token).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZookeeperLease {
    path: String,
    session: i64,
    czxid: i64,
}

impl ZookeeperLease {
    /// The node that holds the lock.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The fencing token: the node's creation zxid.
    pub fn fence(&self) -> u64 {
        self.czxid.unsigned_abs()
    }

    fn sequence(&self) -> i64 {
        let digits = self.path.rsplit('-').next().unwrap_or_default();
        digits.parse().unwrap_or(i64::MAX)
    }
}

impl ZookeeperBackend {
    /// Connects to the ensemble at `cluster` (`host:port,host:port`, ZooKeeper's connect
    /// string) with the default [`ZookeeperSettings`], and starts the session.
    pub async fn connect(cluster: &str) -> Result<Self, BackendError> {
        Self::connect_with(cluster, ZookeeperSettings::default()).await
    }

    /// Connects to the ensemble at `cluster` with `settings`, and starts the session. Give
    /// every server: the client moves to another when its server fails.
    pub async fn connect_with(
        cluster: &str,
        settings: ZookeeperSettings,
    ) -> Result<Self, BackendError> {
        let ensemble = Ensemble {
            cluster: cluster.to_owned(),
            timeout: settings.session_timeout,
            root: settings.root.clone(),
        };
        let connecting = async {
            let session = Session::start(ensemble).await?;
            let directory = CreateMode::Persistent.with_acls(Acls::anyone_all());
            let root = session.client().mkdir(&settings.root, &directory).await;
            root.map_err(BackendError::new)?;
            Ok::<_, BackendError>(Arc::new(session))
        };
        let connecting = async { connecting.await.map_err(|error| error.reason()) };
        let session = within(&format!("ZooKeeper at {cluster}"), connecting).await?;
        let (watches, room) = Watches::start(&session);
        Ok(Self {
            inner: Arc::new(Inner {
                root: settings.root,
                in_flight: InFlight::default(),
                reach: Reach::new(dial_servers(cluster)),
                session,
                watches,
                room,
            }),
        })
    }

    /// The session timeout as the ensemble granted it.
    pub fn session_timeout(&self) -> Duration {
        self.inner.session.timeout()
    }

    fn dir(&self, name: &str) -> LockDir {
        LockDir::new(&self.inner.root, name)
    }

    fn client(&self) -> Client {
        self.inner.session.client()
    }

    /// Creates `token`'s `kind` node in `dir` (and the directory, when missing), holding
    /// `record` (a holder's record, `holder_record.rs`, or nothing), owned by the session from
    /// before it is sent.
    async fn create(
        &self,
        dir: &LockDir,
        kind: Kind,
        token: OwnerToken,
        record: &[u8],
    ) -> Result<ZookeeperLease, BackendError> {
        let prefix = dir.node_prefix(kind, token);
        self.inner.session.own(&prefix);
        let node = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let container = CreateMode::Container.with_acls(Acls::anyone_all());
        let client = self.client();
        let session = client.session_id().0;
        // The server deletes an empty directory on its own: it may go between two attempts.
        for _ in 0..3 {
            match self
                .inner
                .reach
                .call(client.create(&prefix, record, &node))
                .await?
            {
                Ok((stat, sequence)) => {
                    return Ok(ZookeeperLease {
                        path: format!("{prefix}{sequence}"),
                        session,
                        czxid: stat.czxid,
                    });
                }
                Err(ZkError::NoNode) => match client.create(dir.path(), &[], &container).await {
                    Ok(_) | Err(ZkError::NodeExists) => {}
                    Err(error) => return Err(BackendError::new(error)),
                },
                Err(error) => return Err(BackendError::new(error)),
            }
        }
        Err(BackendError::new(format!(
            "the lock directory {} kept disappearing",
            dir.path()
        )))
    }

    /// Whether `lease`'s node is still there: an operator's release (`inspection.rs`)
    /// deletes it while the session lives on.
    async fn still_there(&self, lease: &ZookeeperLease) -> Result<bool, BackendError> {
        match (self.inner.reach)
            .call(self.client().check_stat(&lease.path))
            .await?
        {
            Ok(stat) => Ok(stat.is_some_and(|stat| stat.czxid == lease.czxid)),
            Err(error) => Err(BackendError::new(error)),
        }
    }

    /// The children of `dir` (none when it does not exist).
    async fn children(&self, dir: &LockDir) -> Result<Children, BackendError> {
        match (self.inner.reach)
            .call(self.client().list_children(dir.path()))
            .await?
        {
            Ok(names) => Ok(Children::new(&names)),
            Err(ZkError::NoNode) => Ok(Children::default()),
            Err(error) => Err(BackendError::new(error)),
        }
    }

    /// Deletes the node at `path`, given up once the deletion has ended (if the node outlives
    /// it, the sweep takes it); whether it was there.
    async fn delete(&self, path: &str) -> Result<bool, BackendError> {
        let prefix = nodes::owner_prefix(path).to_owned();
        let deletion = self.inner.session.deleting(vec![prefix]);
        let was_there = match self
            .inner
            .reach
            .call(self.client().delete(path, None))
            .await?
        {
            Ok(()) => true,
            Err(ZkError::NoNode) => false,
            Err(error) => return Err(BackendError::new(error)),
        };
        deletion.done();
        Ok(was_there)
    }

    /// `lease` once the session vouches for it for `ttl` from `sent`.
    async fn vouch_for(
        &self,
        lease: ZookeeperLease,
        sent: Instant,
        ttl: Duration,
    ) -> Result<ZookeeperLease, BackendError> {
        let term = self.inner.session.vouch(lease_deadline(sent, ttl)).await;
        if term.session != lease.session {
            return Err(BackendError::new(
                "the ZooKeeper session expired while the lock was being taken",
            ));
        }
        Ok(lease)
    }

    /// The exclusive hold `lease`, granted by an attempt sent at `sent`, once the session
    /// vouches for it for `ttl`: the grant the engine gets, fenced by its creation zxid.
    async fn vouched(
        &self,
        lease: ZookeeperLease,
        sent: Instant,
        ttl: Duration,
    ) -> Result<Granted<ZookeeperLease>, BackendError> {
        let lease = self.vouch_for(lease, sent, ttl).await?;
        let fence = Some(FencingToken::new(lease.fence()));
        Ok(Granted { lease, fence })
    }

    /// `token` gave up on `name`: its nodes there (a hold, a place in line or among the
    /// writers, an intent, a claim) are deleted. The session sends requests in order and the
    /// ensemble applies them in order, so a creation of `token`'s sent earlier is listed here.
    async fn give_up(&self, name: &str, token: OwnerToken) -> Result<(), BackendError> {
        self.inner.watches.forget(token);
        let dir = self.dir(name);
        let kinds = [
            Kind::Exclusive,
            Kind::Shared,
            Kind::Writer,
            Kind::Intent,
            Kind::Claim,
        ];
        let prefixes = kinds.map(|kind| dir.node_prefix(kind, token)).to_vec();
        let deletion = self.inner.session.deleting(prefixes);
        let children = self.children(&dir).await?;
        for node in children.of(token) {
            self.delete(&dir.child(node)).await?;
        }
        deletion.done();
        Ok(())
    }
}

/// Dials every server of the connect string `cluster` (`host:port,…[/chroot]`): connected
/// when one of them takes a connection.
fn dial_servers(cluster: &str) -> Dial {
    let servers = cluster.split('/').next().unwrap_or_default();
    let servers: Arc<[String]> = servers.split(',').map(str::to_owned).collect();
    Box::new(move || {
        let servers = Arc::clone(&servers);
        Box::pin(async move {
            let mut refusals = Vec::new();
            for server in servers.iter() {
                match tokio::net::TcpStream::connect(server.as_str()).await {
                    Ok(_) => return Ok(()),
                    Err(error) => refusals.push(format!("{server}: {error}")),
                }
            }
            let refusals = refusals.join(", ");
            Err(BackendError::new(format!(
                "no ZooKeeper server takes a connection ({refusals})"
            )))
        })
    })
}

impl ZookeeperBackend {
    /// Runs `attempt` on `name` as this process's one exclusive attempt on it; while another
    /// is under way, answers as that one was answered (`in_flight.rs`).
    async fn exclusively<F>(
        &self,
        name: &str,
        attempt: impl FnOnce() -> F,
    ) -> Result<Attempt<Granted<ZookeeperLease>>, BackendError>
    where
        F: Future<Output = Result<Attempt<Granted<ZookeeperLease>>, BackendError>>,
    {
        let flight = loop {
            match self.inner.in_flight.start(name) {
                Start::Flies(flight) => break flight,
                Start::Follows(follows) => match in_flight::landing(follows).await {
                    Some(Landed::Busy) => return Ok(Attempt::Busy { holder_ttl: None }),
                    Some(Landed::Failed(error)) => return Err(error),
                    None => {}
                },
            }
        };
        let answer = attempt().await;
        flight.landed(&answer);
        answer
    }

    /// A mutex on `name`: our node created, kept if nothing is ahead of it.
    async fn take_exclusive(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<ZookeeperLease>>, BackendError> {
        let dir = self.dir(name);
        let sent = Instant::now();
        let record = record(&request, Hold::Mutex);
        let mine = (self.create(&dir, Kind::Exclusive, request.token, &record)).await?;
        let children = self.children(&dir).await?;
        if children.exclusive_standing(mine.sequence()) == Standing::Holds {
            return Ok(Attempt::Acquired(
                self.vouched(mine, sent, request.ttl).await?,
            ));
        }
        self.delete(&mine.path).await?;
        Ok(Attempt::Busy { holder_ttl: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_fences_with_its_creation_zxid_and_knows_its_place() {
        let lease = ZookeeperLease {
            path: "/tower-lock/k/x-token-0000000012".to_owned(),
            session: 7,
            czxid: 42,
        };
        assert_eq!(lease.fence(), 42);
        assert_eq!(lease.sequence(), 12);
        assert_eq!(lease.path(), "/tower-lock/k/x-token-0000000012");
    }

    #[test]
    fn the_default_session_lets_a_locker_keep_its_default_ttl() {
        assert_eq!(DEFAULT_SESSION_TIMEOUT * 2 / 3, Duration::from_secs(10));
    }
}
