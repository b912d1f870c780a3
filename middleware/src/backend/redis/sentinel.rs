//! The master a group of Redis Sentinels names, followed through failovers.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{
    Client, Cmd, IntoConnectionInfo, Pipeline, RedisError, RedisFuture, ServerErrorKind, Value,
};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::backend::store_support::connect::within;

/// How often a connection asks the Sentinels for the master again at most, while the one it
/// has fails.
const FOLLOW_AT_MOST_EVERY: Duration = Duration::from_millis(100);

/// A connection to the master that Redis Sentinels name, that asks them again when the master
/// it has stops answering or has become a replica (`READONLY`): after a failover, commands go
/// to the promoted replica. A command that failed on the old master is not sent again (a lock
/// command that may have run must not run twice): the next one goes to the new master.
#[derive(Clone)]
pub struct SentinelConnection {
    shared: Arc<SentinelState>,
}

impl std::fmt::Debug for SentinelConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelConnection")
            .field("failovers_followed", &self.shared.master().0)
            .finish_non_exhaustive()
    }
}

struct SentinelState {
    sentinels: tokio::sync::Mutex<SentinelClient>,
    /// The connection of the master named last, and how many times a new one was named.
    master: Mutex<(u64, ConnectionManager)>,
    /// The client of the master named last, for connections of other kinds to it (the
    /// subscriber's), sent anew when another master is named.
    named: watch::Sender<Client>,
    /// When the Sentinels were last asked.
    asked: Mutex<Instant>,
    config: ConnectionManagerConfig,
}

impl SentinelConnection {
    /// Asks the Sentinels at `sentinels` for the master they call `master_name`, and connects
    /// to it with `config`.
    ///
    /// # Errors
    ///
    /// No Sentinel answers, none knows `master_name`, or its master does not answer.
    pub(super) async fn connect<T: IntoConnectionInfo>(
        sentinels: Vec<T>,
        master_name: &str,
        config: ConnectionManagerConfig,
    ) -> Result<Self, RedisError> {
        // A `String` here, an `impl AsRef<str>` when redis-rs has TLS.
        let master_name: String = master_name.into();
        let mut client =
            SentinelClient::build(sentinels, master_name, None, SentinelServerType::Master)?;
        let master = client.async_get_client().await?;
        let connection = ConnectionManager::new_with_config(master.clone(), config.clone()).await?;
        Ok(Self {
            shared: Arc::new(SentinelState {
                sentinels: tokio::sync::Mutex::new(client),
                master: Mutex::new((0, connection)),
                named: watch::Sender::new(master),
                asked: Mutex::new(Instant::now()),
                config,
            }),
        })
    }

    /// The master named last, and each one named after it.
    pub(super) fn named(&self) -> watch::Receiver<Client> {
        self.shared.named.subscribe()
    }

    /// The master's connection now, and its number.
    fn master(&self) -> (u64, ConnectionManager) {
        self.shared.master().clone()
    }

    /// The master numbered `seen` failed: asks the Sentinels which master to use now (at most
    /// every [`FOLLOW_AT_MOST_EVERY`]), and connects to it if it is another.
    async fn follow(&self, seen: u64) {
        let mut sentinels = self.shared.sentinels.lock().await;
        {
            let mut asked = self.shared.asked();
            if self.shared.master().0 != seen || asked.elapsed() < FOLLOW_AT_MOST_EVERY {
                return;
            }
            *asked = Instant::now();
        }
        let connected = async {
            let master = sentinels.async_get_client().await?;
            let config = self.shared.config.clone();
            let connection = ConnectionManager::new_with_config(master.clone(), config).await?;
            Ok::<_, RedisError>((master, connection))
        };
        match connected.await {
            Ok((client, connection)) => {
                let mut master = self.shared.master();
                *master = (master.0 + 1, connection);
                drop(master);
                self.shared.named.send_replace(client);
                tracing::info!("the Sentinels named a master again; commands go there now");
            }
            Err(error) => tracing::debug!(%error, "no master to follow yet"),
        }
    }

    /// Runs `command` on the master; follows the Sentinels when the master has gone.
    async fn on_master<T>(
        &self,
        command: impl AsyncFnOnce(&mut ConnectionManager) -> Result<T, RedisError>,
    ) -> Result<T, RedisError> {
        let (seen, mut connection) = self.master();
        let answer = command(&mut connection).await;
        if let Err(error) = &answer
            && master_gone(error)
        {
            self.follow(seen).await;
        }
        answer
    }
}

/// Whether `error` says the master is not there, or is no master any more.
fn master_gone(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_refusal()
        || error.is_connection_dropped()
        || error.is_timeout()
        || error.kind() == redis::ErrorKind::Server(ServerErrorKind::ReadOnly)
}

impl SentinelState {
    fn master(&self) -> MutexGuard<'_, (u64, ConnectionManager)> {
        // A single assignment changes it: a poisoned lock is still consistent.
        self.master
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn asked(&self) -> MutexGuard<'_, Instant> {
        self.asked
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl ConnectionLike for SentinelConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.on_master(async |master| master.req_packed_command(cmd).await))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(self.on_master(async move |master| {
            master.req_packed_commands(pipeline, offset, count).await
        }))
    }

    fn get_db(&self) -> i64 {
        self.master().1.get_db()
    }
}

impl super::RedisBackend<SentinelConnection> {
    /// Connects to the master that the Redis Sentinels at `sentinels` (e.g.
    /// `redis://10.0.0.1:26379`) call `master_name`, with a second connection there for release
    /// announcements, and follows failovers: when the master stops answering (no answer within
    /// a second, a refused or dropped connection) or has become a replica (`READONLY`), the
    /// Sentinels are asked again, and commands — and announcements — go to the master they
    /// name. A command that failed on the old master is not sent again (it may have run).
    ///
    /// Replication is asynchronous: a lock the old master granted and had not yet passed on is
    /// not on the promoted replica, and can be granted again. [`replica_acks`](Self::replica_acks)
    /// narrows that window.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tower_lock::{Locker, RedisBackend};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let sentinels = ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"];
    /// let backend = RedisBackend::connect_sentinel(sentinels, "locks")
    ///     .await?
    ///     .replica_acks(1, Duration::from_millis(100));
    /// let held = Locker::new(backend).lock("coupon:42").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_sentinel<T: IntoConnectionInfo>(
        sentinels: impl IntoIterator<Item = T>,
        master_name: &str,
    ) -> Result<Self, RedisError> {
        super::connecting::choose_tls_crypto();
        let sentinels = sentinels
            .into_iter()
            .map(IntoConnectionInfo::into_connection_info)
            .collect::<Result<Vec<_>, _>>()?;
        let addresses: Vec<String> = sentinels
            .iter()
            .map(|node| node.addr().to_string())
            .collect();
        let target = format!(
            "the master {master_name} through the Sentinels at {}",
            addresses.join(",")
        );
        let config = super::connecting::manager_config()
            .set_number_of_retries(0)
            .set_response_timeout(Some(MASTER_ANSWERS_WITHIN));
        let connecting = async {
            let connection = SentinelConnection::connect(sentinels, master_name, config).await?;
            let room = super::announcements::sentinel_waiting_room(&connection).await?;
            Ok::<_, RedisError>(Self::on(connection, room))
        };
        within(&target, connecting)
            .await
            .map_err(super::connecting::unreachable)
    }
}

/// How long the master may take to answer before it counts as gone (and the Sentinels are
/// asked again): a frozen master answers nothing, and is failed over all the same.
const MASTER_ANSWERS_WITHIN: Duration = Duration::from_secs(1);
