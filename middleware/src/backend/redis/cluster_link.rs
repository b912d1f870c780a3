//! The connection the backend sends its commands on in a Redis Cluster: redis-rs's cluster
//! connection, replaced by a fresh one when it stops answering.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};
use tokio::time::Instant;

/// How long commands may wait with nothing answered at all before the connection counts as
/// stalled.
const STALLED_AFTER: Duration = Duration::from_secs(1);
/// How often the watch looks for a stall.
const WATCH_EVERY: Duration = Duration::from_millis(250);
/// How long a fresh connection may take to be made.
const CONNECT_WITHIN: Duration = Duration::from_secs(5);

/// A connection to a Redis Cluster: redis-rs's `ClusterConnection`, which follows `MOVED` and
/// `ASK`, slot migrations and failovers by itself, watched for stalls. After every node of a
/// cluster was down, that connection can stop answering anything for good once the nodes are
/// back (redis-rs 1.8); while commands wait and nothing at all has been answered for a second,
/// a fresh connection is made from the cluster's nodes and takes the next commands (those
/// already sent end on the old one).
///
/// Made by [`RedisBackend::connect_cluster`](super::RedisBackend::connect_cluster); one made
/// from a connection you configured yourself
/// ([`from_cluster_connection`](super::RedisBackend::from_cluster_connection)) is not replaced.
#[derive(Clone)]
pub struct ClusterLink {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ClusterLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterLink")
            .field("replaced", &self.shared.replaced.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

struct Shared {
    current: Mutex<ClusterConnection>,
    /// Where a fresh connection comes from; none for a connection configured by the user.
    client: Option<ClusterClient>,
    /// Commands sent and not answered yet.
    waiting: AtomicUsize,
    /// When the connection last answered anything, or commands started waiting (ms since
    /// `epoch`).
    progress: AtomicU64,
    epoch: Instant,
    replacing: AtomicBool,
    /// How many times the connection was replaced.
    replaced: AtomicU64,
}

impl ClusterLink {
    /// A connection made by `client`, replaced through it when it stalls.
    pub(super) async fn connect(client: ClusterClient) -> RedisResult<Self> {
        let connection = client.get_async_connection().await?;
        let link = Self::on(connection, Some(client));
        let watched = Arc::downgrade(&link.shared);
        tokio::spawn(watch(watched));
        Ok(link)
    }

    /// `connection`, never replaced.
    pub(super) fn fixed(connection: ClusterConnection) -> Self {
        Self::on(connection, None)
    }

    fn on(connection: ClusterConnection, client: Option<ClusterClient>) -> Self {
        let shared = Shared {
            current: Mutex::new(connection),
            client,
            waiting: AtomicUsize::new(0),
            progress: AtomicU64::new(0),
            epoch: Instant::now(),
            replacing: AtomicBool::new(false),
            replaced: AtomicU64::new(0),
        };
        Self {
            shared: Arc::new(shared),
        }
    }

    /// Sends on the current connection, counting the command as waiting until it is answered
    /// (or dropped).
    fn send<'a, T: Send + 'a>(
        &self,
        command: impl FnOnce(ClusterConnection) -> RedisFuture<'a, T> + Send + 'a,
    ) -> RedisFuture<'a, T> {
        let waiting = Waiting::start(&self.shared);
        let connection = self.shared.current().clone();
        Box::pin(async move {
            let answer = command(connection).await;
            waiting.answered();
            answer
        })
    }
}

impl ConnectionLike for ClusterLink {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.send(move |mut connection| {
            Box::pin(async move { connection.req_packed_command(cmd).await })
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.send(move |mut connection| {
            Box::pin(async move { (connection.req_packed_commands(pipeline, offset, count)).await })
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

impl Shared {
    fn current(&self) -> MutexGuard<'_, ClusterConnection> {
        // One assignment changes it: a poisoned lock is still consistent.
        self.current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether commands wait and nothing was answered for [`STALLED_AFTER`].
    fn stalled(&self) -> bool {
        let quiet = self
            .now()
            .saturating_sub(self.progress.load(Ordering::Relaxed));
        self.waiting.load(Ordering::Relaxed) > 0 && quiet >= STALLED_AFTER.as_millis() as u64
    }

    /// Makes a fresh connection and sends the next commands on it, unless one is being made.
    fn replace(self: &Arc<Self>) {
        let Some(client) = self.client.clone() else {
            return;
        };
        if self.replacing.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::warn!("the Redis Cluster connection answers nothing; connecting afresh");
        let shared = Arc::downgrade(self);
        tokio::spawn(async move {
            let fresh = tokio::time::timeout(CONNECT_WITHIN, client.get_async_connection()).await;
            let Some(shared) = shared.upgrade() else {
                return;
            };
            match fresh {
                Ok(Ok(connection)) => {
                    *shared.current() = connection;
                    shared.replaced.fetch_add(1, Ordering::Relaxed);
                    shared.progress.store(shared.now(), Ordering::Relaxed);
                }
                Ok(Err(error)) => tracing::warn!(%error, "connecting afresh failed"),
                Err(_) => tracing::warn!(timeout = ?CONNECT_WITHIN, "connecting afresh timed out"),
            }
            shared.replacing.store(false, Ordering::Release);
        });
    }
}

/// Looks for a stall every [`WATCH_EVERY`] while the link lives.
async fn watch(shared: Weak<Shared>) {
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if shared.stalled() {
            shared.replace();
        }
    }
}

/// A command waiting for its answer: counted among the waiting until answered or dropped.
struct Waiting(Arc<Shared>);

impl Waiting {
    fn start(shared: &Arc<Shared>) -> Self {
        if shared.waiting.fetch_add(1, Ordering::Relaxed) == 0 {
            shared.progress.store(shared.now(), Ordering::Relaxed);
        }
        Self(Arc::clone(shared))
    }

    /// Any answer, an error included, shows that the connection works.
    fn answered(self) {
        self.0.progress.store(self.0.now(), Ordering::Relaxed);
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}
