//! A coupon service that shows the overselling problem and tower-lock fixing it.
//!
//! `POST /coupons/{id}/claim` is ordinary, non-atomic business code (read the stock, check
//! the user, work, write). Without a lock, concurrent claims read the same stock and the
//! coupon is claimed more often than it has units; with the lock layer on that route (key
//! `coupon:{id}`), it never is — on one process, or across replicas sharing Redis, PostgreSQL
//! or MySQL/MariaDB, with the locks there or in another store (etcd, ZooKeeper).

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::LazyLock;
use std::time::Duration;

use axum::Router;
use axum::http::request::Parts;
use axum::routing::{MethodRouter, get, post, put};
#[cfg(feature = "etcd")]
use tower_lock::backend::etcd::{EtcdBackend, EtcdSettings};
use tower_lock::backend::mysql::MysqlBackend;
use tower_lock::backend::postgres::PostgresBackend;
use tower_lock::backend::redis::ClusterLink;
use tower_lock::backend::redis::{RedlockBackend, SentinelConnection};
use tower_lock::backend::zookeeper::{ZookeeperBackend, ZookeeperSettings};
use tower_lock::backend::{BackendError, LockBackend, Semaphores, SharedLocks};
use tower_lock::key::{KeyError, KeyExtractor, KeyTemplate, many};
use tower_lock::{ConfigError, LockLayer, Locker, MemoryBackend, OnLost, RedisBackend};

pub mod bodies;
pub mod dashboard;
pub mod optimistic;
pub mod problem;
pub mod routes;
mod serving;
pub mod store;
pub mod telemetry;
pub mod transfers;

use metrics_exporter_prometheus::PrometheusHandle;
use store::{CouponStore, Dialect, MemoryStore, RedisConnection, RedisStore, SqlStore};

/// Command-line options; each can also come from the environment.
#[derive(Clone, Debug, clap::Parser)]
#[command(version, about)]
pub struct Options {
    /// Address to listen on.
    #[arg(long, env = "LISTEN", default_value = "127.0.0.1:3000")]
    pub listen: SocketAddr,
    /// Where coupons and locks live, shared by replicas: `redis://…`,
    /// `redis+cluster://host:port[,host:port…]` (a Redis Cluster's nodes),
    /// `redis+sentinel://host:port[,host:port…]/<master>[?wait=<n>]` (the master that Redis
    /// Sentinels name; `wait`: replicas that must acknowledge each lock), `postgres://…` or
    /// `mysql://…`. Without it: the embedded in-process store and lock backend (one process
    /// only).
    #[arg(long, env = "STORE")]
    pub store: Option<String>,
    /// The same as `--store`, under its older name.
    #[arg(long, env = "REDIS_URL", conflicts_with = "store")]
    pub redis_url: Option<String>,
    /// Keep the locks in another store than the coupons: `etcd://host:port[,host:port…]` (a
    /// cluster's members), `zk://host:port[,host:port…]` (an ensemble's servers), or any
    /// `--store` URL. The claim's write is then fenced by the
    /// coupon store with the lock store's tokens. Without it, locks live beside the coupons.
    #[arg(long, env = "LOCK_STORE", conflicts_with_all = ["no_lock", "optimistic"])]
    pub lock_store: Option<String>,
    /// Serve claims without the lock layer: the control that oversells.
    #[arg(long, env = "NO_LOCK")]
    pub no_lock: bool,
    /// No lock either, but claims and transfers write only if the coupon's version is the one
    /// they read, and retry otherwise (the optimistic lock). Needs a SQL `--store`.
    #[arg(long, env = "OPTIMISTIC", conflicts_with = "no_lock")]
    pub optimistic: bool,
    /// Simulated business work inside a claim, between reading and writing the stock (ms, at
    /// most 60 000).
    #[arg(long, env = "WORK_MS", default_value_t = 2)]
    pub work_ms: u64,
    /// How long a claim waits for a busy lock (ms); 0 rejects at once with 409.
    #[arg(long, env = "LOCK_WAIT_MS", default_value_t = 3000)]
    pub lock_wait_ms: u64,
    /// Lease TTL of a claim's lock (ms, from 10 to 86 400 000); renewed every TTL/3 while the
    /// claim runs. Default: 10 000, or the longest the lock store vouches for when shorter.
    #[arg(long, env = "LOCK_TTL_MS")]
    pub lock_ttl_ms: Option<u64>,
    /// How many claims of one coupon in a row a replica may hand its lock on among its own
    /// requests before releasing it to the store (1 to 256; 1 releases every lock in the
    /// store, so replicas alternate claim by claim).
    #[arg(long, env = "LOCK_LOCAL_RUN", default_value_t = 8)]
    pub lock_local_run: u32,
    /// Do not renew leases: a claim slower than the TTL loses its lock (for fault tests).
    #[arg(long, env = "NO_RENEW")]
    pub no_renew: bool,
    /// What a claim does when its lock is lost: abort (503) or continue to its fenced write.
    #[arg(long, env = "ON_LOST", value_enum, default_value_t = OnLostArg::Abort)]
    pub on_lost: OnLostArg,
    /// Claim without the lock's fencing token (reads do not register it, writes are not
    /// checked): a claim that lost its lock can then write over the next holder's (the
    /// control for the fencing proof).
    #[arg(long, env = "NO_FENCE")]
    pub no_fence: bool,
    /// How many audits (`POST /coupons/{id}/audit`) may run at once across all replicas.
    #[arg(long, env = "AUDIT_PERMITS", default_value_t = TWO)]
    pub audit_permits: NonZeroU32,
}

impl Options {
    /// The store's URL, from `--store` or its alias `--redis-url`.
    pub fn store_url(&self) -> Option<&str> {
        self.store.as_deref().or(self.redis_url.as_deref())
    }
}

/// The longest `--work-ms`: a claim's work longer than a minute is no demonstration, and one
/// of `u64::MAX` would hold its lock for good.
const MAX_WORK_MS: u64 = 60_000;

/// Two audits at once, unless `--audit-permits` says otherwise.
const TWO: NonZeroU32 = NonZeroU32::new(2).expect("two is not zero");

/// The kinds of shared store, told apart by the URL's scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// `redis://` or `rediss://`.
    Redis,
    /// `redis+cluster://host:port[,host:port…]`: a Redis Cluster's nodes (any of them).
    RedisCluster,
    /// `redis+sentinel://host:port[,host:port…]/<master>[?wait=<n>]`: Sentinels, and the master
    /// they name.
    RedisSentinel,
    /// `postgres://` or `postgresql://`.
    Postgres,
    /// `mysql://` (MySQL or MariaDB).
    Mysql,
}

impl StoreKind {
    /// The kind `url` names by its scheme.
    ///
    /// # Errors
    ///
    /// A message naming the schemes the demo knows, for any other.
    pub fn of(url: &str) -> Result<Self, String> {
        let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
        match scheme {
            "redis" | "rediss" => Ok(Self::Redis),
            "redis+cluster" => Ok(Self::RedisCluster),
            "redis+sentinel" => Ok(Self::RedisSentinel),
            "postgres" | "postgresql" => Ok(Self::Postgres),
            "mysql" => Ok(Self::Mysql),
            _ => Err(format!(
                "--store {}: the URL must start with redis://, redis+cluster://, redis+sentinel://, \
                 postgres:// or mysql://",
                redacted(url)
            )),
        }
    }

    /// The SQL the store speaks, `None` for Redis.
    pub fn dialect(self) -> Option<Dialect> {
        match self {
            Self::Redis | Self::RedisCluster | Self::RedisSentinel => None,
            Self::Postgres => Some(Dialect::Postgres),
            Self::Mysql => Some(Dialect::Mysql),
        }
    }

    /// The store's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Redis => "Redis",
            Self::RedisCluster => "Redis Cluster",
            Self::RedisSentinel => "Redis Sentinel",
            Self::Postgres => "PostgreSQL",
            Self::Mysql => "MySQL",
        }
    }
}

/// What a `redis+sentinel://host:port[,host:port…]/<master>[?wait=<n>]` URL names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentinelUrl {
    /// The Sentinels, as `redis://` URLs.
    pub sentinels: Vec<String>,
    /// The name they know the master by.
    pub master: String,
    /// How many replicas must acknowledge each lock (0: none).
    pub wait: u32,
}

impl SentinelUrl {
    /// Reads `url`, given as `option`.
    ///
    /// # Errors
    ///
    /// A message naming the option and what the URL lacks.
    pub fn parse(option: &str, url: &str) -> Result<Self, String> {
        let usage = || {
            format!(
                "{option} {}: name the Sentinels and the master, like \
                 redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster?wait=1",
                redacted(url)
            )
        };
        let rest = url.strip_prefix("redis+sentinel://").unwrap_or(url);
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (hosts, master) = rest.split_once('/').ok_or_else(usage)?;
        let sentinels: Vec<String> = (hosts.split(','))
            .filter(|host| !host.is_empty())
            .map(|host| format!("redis://{host}"))
            .collect();
        let master = master.trim_end_matches('/');
        if sentinels.is_empty() || master.is_empty() {
            return Err(usage());
        }
        let wait = match query.strip_prefix("wait=") {
            Some(wait) => wait.parse().map_err(|_| {
                format!(
                    "{option} {}: wait= takes how many replicas must acknowledge each lock, a \
                     whole number like 1",
                    redacted(url)
                )
            })?,
            None if query.is_empty() => 0,
            None => {
                return Err(format!(
                    "{option} {}: the only setting is wait=<n>",
                    redacted(url)
                ));
            }
        };
        Ok(Self {
            sentinels,
            master: master.to_owned(),
            wait,
        })
    }

    /// A backend on the master the Sentinels name, its locks acknowledged as `wait` says.
    async fn backend(&self) -> Result<RedisBackend<SentinelConnection>, redis::RedisError> {
        let backend = RedisBackend::connect_sentinel(self.sentinels.clone(), &self.master).await?;
        Ok(backend.replica_acks(self.wait, REPLICA_ACK_TIMEOUT))
    }
}

/// How long a lock waits for its replicas' acknowledgements (`wait=`) before it is refused.
const REPLICA_ACK_TIMEOUT: Duration = Duration::from_millis(100);

/// The nodes a `redis+cluster://[user:password@]host:port[,host:port…]` URL, given as
/// `option`, names, as `redis://` URLs (each with the credentials).
///
/// # Errors
///
/// A message naming the option and what the URL lacks.
pub fn cluster_nodes(option: &str, url: &str) -> Result<Vec<String>, String> {
    let rest = url.strip_prefix("redis+cluster://").unwrap_or(url);
    let (credentials, hosts) = match rest.rsplit_once('@') {
        Some((credentials, hosts)) => (format!("{credentials}@"), hosts),
        None => (String::new(), rest),
    };
    let hosts = hosts.trim_end_matches('/');
    let nodes: Vec<String> = hosts
        .split(',')
        .filter(|host| !host.is_empty())
        .map(|host| format!("redis://{credentials}{host}"))
        .collect();
    match nodes.is_empty() {
        true => Err(format!(
            "{option} {}: name the cluster's nodes, like \
             redis+cluster://127.0.0.1:7000,127.0.0.1:7001",
            redacted(url)
        )),
        false => Ok(nodes),
    }
}

/// `--on-lost` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OnLostArg {
    /// Stop the claim at its next await point and answer 503.
    Abort,
    /// Let the claim run on to its write, which the fence refuses.
    Continue,
}

impl From<OnLostArg> for OnLost {
    fn from(arg: OnLostArg) -> Self {
        match arg {
            OnLostArg::Abort => Self::Abort,
            OnLostArg::Continue => Self::Continue,
        }
    }
}

/// How claims are locked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockSettings {
    /// How long a claim waits for a busy lock (zero: reject at once).
    pub wait: Duration,
    /// The lease TTL; `None`: the locker's default (10 s, or the longest the lock store
    /// vouches for when shorter).
    pub ttl: Option<Duration>,
    /// Whether leases are renewed while a claim runs.
    pub renew: bool,
    /// Holds in a row a lock may pass among this replica's requests.
    pub local_run: u32,
    /// What happens to a claim whose lock is lost.
    pub on_lost: OnLost,
    /// Whether claims read and write with the lock's fencing token.
    pub fence_writes: bool,
    /// How many audits may run at once across all replicas.
    pub audit_permits: NonZeroU32,
}

impl Default for LockSettings {
    fn default() -> Self {
        Self {
            wait: Duration::from_secs(3),
            ttl: None,
            renew: true,
            local_run: 8,
            on_lost: OnLost::Abort,
            fence_writes: true,
            audit_permits: TWO,
        }
    }
}

impl From<&Options> for LockSettings {
    fn from(options: &Options) -> Self {
        Self {
            wait: Duration::from_millis(options.lock_wait_ms),
            ttl: options.lock_ttl_ms.map(Duration::from_millis),
            renew: !options.no_renew,
            local_run: options.lock_local_run,
            on_lost: options.on_lost.into(),
            fence_writes: !options.no_fence,
            audit_permits: options.audit_permits,
        }
    }
}

/// Where claims are locked: the lock store, before the settings are applied.
#[derive(Clone, Debug)]
enum LockStore {
    Off,
    Memory(MemoryBackend),
    Redis(RedisBackend),
    RedisCluster(RedisBackend<ClusterLink>),
    RedisSentinel(RedisBackend<SentinelConnection>),
    Redlock(RedlockBackend),
    Postgres(PostgresBackend),
    Mysql(MysqlBackend),
    #[cfg(feature = "etcd")]
    Etcd(EtcdBackend),
    Zookeeper(ZookeeperBackend),
}

/// How claims are locked: the locker the lock layers share, its settings checked.
#[derive(Clone, Debug)]
pub enum Locking {
    /// Not at all (`--no-lock`).
    Off,
    /// In this process.
    Memory(Locker<MemoryBackend>),
    /// In Redis, across replicas.
    Redis(Locker<RedisBackend>),
    /// In a Redis Cluster, across replicas.
    RedisCluster(Locker<RedisBackend<ClusterLink>>),
    /// In the master Redis Sentinels name, across replicas.
    RedisSentinel(Locker<RedisBackend<SentinelConnection>>),
    /// RedLock over independent Redis masters, across replicas (mutexes only).
    Redlock(Locker<RedlockBackend>),
    /// In PostgreSQL, across replicas.
    Postgres(Locker<PostgresBackend>),
    /// In MySQL/MariaDB, across replicas.
    Mysql(Locker<MysqlBackend>),
    /// In etcd, across replicas.
    #[cfg(feature = "etcd")]
    Etcd(Locker<EtcdBackend>),
    /// In ZooKeeper, across replicas.
    Zookeeper(Locker<ZookeeperBackend>),
}

impl Locking {
    /// Where the locks are, for the dashboard: `off`, or the backend's kind (`redis`, …).
    pub fn name(&self) -> &'static str {
        self.ttl_and_name().map_or("off", |(_, name)| name)
    }

    /// The lease TTL locks are taken with (`None` when off).
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl_and_name().map(|(ttl, _)| ttl)
    }

    fn ttl_and_name(&self) -> Option<(Duration, &'static str)> {
        fn of<B: LockBackend>(locker: &Locker<B>) -> Option<(Duration, &'static str)> {
            Some((locker.ttl(), locker.backend().store_kind()))
        }
        match self {
            Self::Off => None,
            Self::Memory(locker) => of(locker),
            Self::Redis(locker) => of(locker),
            Self::RedisCluster(locker) => of(locker),
            Self::RedisSentinel(locker) => of(locker),
            Self::Redlock(locker) => of(locker),
            Self::Postgres(locker) => of(locker),
            Self::Mysql(locker) => of(locker),
            #[cfg(feature = "etcd")]
            Self::Etcd(locker) => of(locker),
            Self::Zookeeper(locker) => of(locker),
        }
    }
}

impl LockStore {
    /// Lockers on this store with `settings`.
    ///
    /// # Errors
    ///
    /// One line naming the option the store refuses and what it would accept.
    fn locking(self, settings: &LockSettings) -> Result<Locking, String> {
        let store = self.name();
        let checked = |error| refused(error, store);
        Ok(match self {
            Self::Off => Locking::Off,
            Self::Memory(backend) => Locking::Memory(locker(backend, settings).map_err(checked)?),
            Self::Redis(backend) => Locking::Redis(locker(backend, settings).map_err(checked)?),
            Self::RedisCluster(backend) => {
                Locking::RedisCluster(locker(backend, settings).map_err(checked)?)
            }
            Self::RedisSentinel(backend) => {
                Locking::RedisSentinel(locker(backend, settings).map_err(checked)?)
            }
            Self::Redlock(backend) => Locking::Redlock(locker(backend, settings).map_err(checked)?),
            Self::Postgres(backend) => {
                Locking::Postgres(locker(backend, settings).map_err(checked)?)
            }
            Self::Mysql(backend) => Locking::Mysql(locker(backend, settings).map_err(checked)?),
            #[cfg(feature = "etcd")]
            Self::Etcd(backend) => Locking::Etcd(locker(backend, settings).map_err(checked)?),
            Self::Zookeeper(backend) => {
                Locking::Zookeeper(locker(backend, settings).map_err(checked)?)
            }
        })
    }

    /// The store's name in messages.
    fn name(&self) -> &'static str {
        match self {
            Self::Off | Self::Memory(_) => "the in-process lock store",
            Self::Redis(_) => "Redis",
            Self::RedisCluster(_) => "Redis Cluster",
            Self::RedisSentinel(_) => "Redis Sentinel",
            Self::Redlock(_) => "RedLock",
            Self::Postgres(_) => "PostgreSQL",
            Self::Mysql(_) => "MySQL",
            #[cfg(feature = "etcd")]
            Self::Etcd(_) => "etcd",
            Self::Zookeeper(_) => "ZooKeeper",
        }
    }
}

/// A locker on `backend` configured as `settings` say.
fn locker<B: LockBackend>(backend: B, settings: &LockSettings) -> Result<Locker<B>, ConfigError> {
    let builder = Locker::builder(backend)
        .wait(settings.wait)
        .renew(settings.renew)
        .max_local_run(settings.local_run)
        .on_lost(settings.on_lost);
    match settings.ttl {
        Some(ttl) => builder.ttl(ttl),
        None => builder,
    }
    .build()
}

/// `error`, a lock setting `store` refuses, as one line naming the option and what would work.
fn refused(error: ConfigError, store: &str) -> String {
    match error {
        ConfigError::TtlTooShort(ttl) => format!(
            "--lock-ttl-ms {}: a lease needs at least 10 ms",
            ttl.as_millis()
        ),
        ConfigError::TtlTooLong(ttl) => format!(
            "--lock-ttl-ms {}: a lease can be at most 86400000 ms (24 h); renewal keeps a lock \
             while its claim runs",
            ttl.as_millis()
        ),
        ConfigError::TtlTooLongForBackend { ttl, max } => format!(
            "--lock-ttl-ms {}: {store} vouches for leases of at most {} ms (two thirds of the \
             session it grants); use --lock-ttl-ms {} or less, or leave it out to get that",
            ttl.as_millis(),
            max.as_millis(),
            max.as_millis()
        ),
        ConfigError::LocalRunOutOfRange(holds) => format!(
            "--lock-local-run {holds}: a replica hands a lock on among its requests from 1 \
             (never) to 256 times in a row"
        ),
        error => format!("the lock settings were refused: {error}"),
    }
}

/// What the handlers share.
#[derive(Clone, Debug)]
pub struct AppState {
    /// Where coupons live.
    pub store: CouponStore,
    /// How claims are locked.
    pub locking: Locking,
    /// The simulated work inside a claim.
    pub work: Duration,
    /// How claims are locked.
    pub lock: LockSettings,
    /// Whether claims and transfers retry on a version check instead of locking.
    pub optimistic: bool,
    /// The metrics recorder whose records `GET /metrics` serves (none: answered 404).
    pub metrics: Option<PrometheusHandle>,
}

impl AppState {
    /// This state recording into `metrics`, served at `GET /metrics` and reported to the
    /// dashboard.
    pub fn with_metrics(self, metrics: PrometheusHandle) -> Self {
        Self {
            metrics: Some(metrics),
            ..self
        }
    }

    /// Does the claim's simulated business work: sleeps `work`. Zero work takes no time at all
    /// (a zero-length sleep would still wait for the timer's next tick, about a millisecond).
    pub(crate) async fn simulate_work(&self) {
        if !self.work.is_zero() {
            tokio::time::sleep(self.work).await;
        }
    }

    /// The embedded mode: coupons and locks in this process (`lock: false` for the control).
    ///
    /// # Errors
    ///
    /// One line naming the lock setting refused and what would work.
    pub fn embedded(work: Duration, settings: LockSettings, lock: bool) -> Result<Self, String> {
        let locks = if lock {
            LockStore::Memory(MemoryBackend::new())
        } else {
            LockStore::Off
        };
        Self::coupons_in_process(work, settings, locks)
    }

    /// Coupons in this process, locked in `locks`.
    fn coupons_in_process(
        work: Duration,
        settings: LockSettings,
        locks: LockStore,
    ) -> Result<Self, String> {
        Ok(Self {
            store: CouponStore::Memory(MemoryStore::default()),
            locking: locks.locking(&settings)?,
            work,
            lock: settings,
            optimistic: false,
            metrics: None,
        })
    }

    /// The state `options` ask for, connecting to the store when a URL is given.
    ///
    /// # Errors
    ///
    /// One line naming the store and why it cannot be used.
    pub async fn from_options(options: &Options) -> Result<Self, String> {
        if options.work_ms > MAX_WORK_MS {
            return Err(format!(
                "--work-ms {}: a claim's simulated work is at most {MAX_WORK_MS} ms (a minute)",
                options.work_ms
            ));
        }
        let work = Duration::from_millis(options.work_ms);
        let settings = LockSettings::from(options);
        let Some(url) = options.store_url() else {
            if options.optimistic {
                return Err(OPTIMISTIC_NEEDS_SQL.to_owned());
            }
            let locks = match &options.lock_store {
                Some(lock_store) => lock_backend(lock_store, settings.ttl).await?,
                None if options.no_lock => LockStore::Off,
                None => LockStore::Memory(MemoryBackend::new()),
            };
            return Self::coupons_in_process(work, settings, locks);
        };
        let kind = StoreKind::of(url)?;
        if options.optimistic && kind.dialect().is_none() {
            return Err(OPTIMISTIC_NEEDS_SQL.to_owned());
        }
        // With a lock store of its own, the coupon store takes no locks.
        let unlocked = options.no_lock || options.optimistic || options.lock_store.is_some();
        let cannot = |error: &dyn std::fmt::Display| {
            format!(
                "cannot connect to {} at {}: {error}",
                kind.name(),
                redacted(url)
            )
        };
        let (store, locking) = match kind {
            StoreKind::Redis => Self::redis(url, unlocked)
                .await
                .map_err(|error| cannot(&error))?,
            StoreKind::RedisCluster => {
                Self::redis_cluster(&cluster_nodes("--store", url)?, unlocked)
                    .await
                    .map_err(|error| cannot(&error))?
            }
            StoreKind::RedisSentinel => {
                Self::redis_sentinel(&SentinelUrl::parse("--store", url)?, unlocked)
                    .await
                    .map_err(|error| cannot(&error))?
            }
            StoreKind::Postgres | StoreKind::Mysql => {
                let dialect = kind.dialect().ok_or("a SQL store has a dialect")?;
                let store = SqlStore::connect(url, dialect)
                    .await
                    .map_err(|error| cannot(&error))?;
                let locking = if unlocked {
                    LockStore::Off
                } else {
                    sql_locking(url, dialect)
                        .await
                        .map_err(|error| cannot(&error))?
                };
                (CouponStore::Sql(store), locking)
            }
        };
        let locking = match &options.lock_store {
            Some(lock_store) => lock_backend(lock_store, settings.ttl).await?,
            None => locking,
        };
        Ok(Self {
            store,
            locking: locking.locking(&settings)?,
            work,
            lock: settings,
            optimistic: options.optimistic,
            metrics: None,
        })
    }

    /// Coupons and locks in Redis. With the lock on, the store shares the lock backend's
    /// connection: the claim's own commands and its lock's travel together.
    async fn redis(
        url: &str,
        no_lock: bool,
    ) -> Result<(CouponStore, LockStore), redis::RedisError> {
        let (connection, locking) = if no_lock {
            let client = redis::Client::open(url)?;
            (
                redis::aio::ConnectionManager::new(client).await?,
                LockStore::Off,
            )
        } else {
            let backend = RedisBackend::connect(url).await?;
            (backend.connection(), LockStore::Redis(backend))
        };
        let connection = RedisConnection::Node(connection);
        Ok((CouponStore::Redis(RedisStore::new(connection)), locking))
    }

    /// Coupons and locks in the master the Sentinels of `url` name, sharing one connection as
    /// on a node.
    async fn redis_sentinel(
        url: &SentinelUrl,
        no_lock: bool,
    ) -> Result<(CouponStore, LockStore), redis::RedisError> {
        let backend = url.backend().await?;
        let connection = RedisConnection::Sentinel(backend.connection());
        let locking = match no_lock {
            true => LockStore::Off,
            false => LockStore::RedisSentinel(backend),
        };
        Ok((CouponStore::Redis(RedisStore::new(connection)), locking))
    }

    /// Coupons and locks in the Redis Cluster of `nodes`, sharing one connection as on a node.
    async fn redis_cluster(
        nodes: &[String],
        no_lock: bool,
    ) -> Result<(CouponStore, LockStore), redis::RedisError> {
        let backend = RedisBackend::connect_cluster(nodes.to_vec()).await?;
        let (connection, locking) = match no_lock {
            true => (backend.connection(), LockStore::Off),
            false => (backend.connection(), LockStore::RedisCluster(backend)),
        };
        let connection = RedisConnection::Cluster(connection);
        Ok((CouponStore::Redis(RedisStore::new(connection)), locking))
    }
}

/// Why `--optimistic` was refused.
const OPTIMISTIC_NEEDS_SQL: &str =
    "--optimistic needs a SQL store: --store postgres://… or --store mysql://…";

/// Locks in the store at `url` (`--lock-store`), for leases of `ttl` (`None`: the default).
///
/// # Errors
///
/// One line naming the lock store and why it cannot be used.
async fn lock_backend(url: &str, ttl: Option<Duration>) -> Result<LockStore, String> {
    let ttl = ttl.unwrap_or(DEFAULT_LOCK_TTL);
    let cannot = |store: &str, error: &dyn std::fmt::Display| cannot_connect(store, url, error);
    if let Some(members) = url.strip_prefix("etcd://") {
        return etcd_locking(url, members, ttl).await;
    }
    if let Some(masters) = url.strip_prefix("redlock://") {
        let masters = masters.trim_end_matches('/').split(',');
        let masters = masters.filter(|master| !master.is_empty());
        let urls: Vec<String> = masters.map(|master| format!("redis://{master}")).collect();
        if urls.is_empty() {
            return Err(format!(
                "--lock-store {}: name the masters, like redlock://10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379",
                redacted(url)
            ));
        }
        let backend = RedlockBackend::connect(urls).map_err(|error| cannot("RedLock", &error))?;
        // RedLock connects on first use: a majority must answer now, as every other lock
        // store must.
        (backend.check_quorum(Duration::from_secs(1)).await)
            .map_err(|error| cannot("RedLock", &error))?;
        return Ok(LockStore::Redlock(backend));
    }
    if let Some(servers) = url.strip_prefix("zk://") {
        let settings = ZookeeperSettings::default().session_timeout(session_outliving(ttl));
        let backend = ZookeeperBackend::connect_with(servers, settings)
            .await
            .map_err(|error| cannot("ZooKeeper", &error))?;
        return Ok(LockStore::Zookeeper(backend));
    }
    let kind = StoreKind::of(url).map_err(|_| {
        format!(
            "--lock-store {}: the URL must start with etcd://, zk://, redlock://, redis://, \
             redis+cluster://, redis+sentinel://, postgres:// or mysql://",
            redacted(url)
        )
    })?;
    match (kind, kind.dialect()) {
        (StoreKind::RedisCluster, _) => {
            RedisBackend::connect_cluster(cluster_nodes("--lock-store", url)?)
                .await
                .map(LockStore::RedisCluster)
                .map_err(|error| cannot(kind.name(), &error))
        }
        (StoreKind::RedisSentinel, _) => SentinelUrl::parse("--lock-store", url)?
            .backend()
            .await
            .map(LockStore::RedisSentinel)
            .map_err(|error| cannot(kind.name(), &error)),
        (_, None) => RedisBackend::connect(url)
            .await
            .map(LockStore::Redis)
            .map_err(|error| cannot(kind.name(), &error)),
        (_, Some(dialect)) => sql_locking(url, dialect)
            .await
            .map_err(|error| cannot(kind.name(), &error)),
    }
}

/// Why the lock store at `url` could not be reached, in one line without its password.
fn cannot_connect(store: &str, url: &str, error: &dyn std::fmt::Display) -> String {
    format!("cannot connect to {store} at {}: {error}", redacted(url))
}

/// Locks in the etcd cluster at `url`, whose members are `members` (`host:port,…`), for leases
/// of `ttl`.
#[cfg(feature = "etcd")]
async fn etcd_locking(url: &str, members: &str, ttl: Duration) -> Result<LockStore, String> {
    let endpoints: Vec<String> = members
        .split(',')
        .map(|member| format!("http://{member}"))
        .collect();
    let settings = EtcdSettings::default().session_ttl(session_outliving(ttl));
    EtcdBackend::connect_with(endpoints, settings)
        .await
        .map(LockStore::Etcd)
        .map_err(|error| cannot_connect("etcd", url, &error))
}

/// Without the `etcd` feature: why etcd cannot be used, and how to build a demo that can.
#[cfg(not(feature = "etcd"))]
async fn etcd_locking(url: &str, _members: &str, _ttl: Duration) -> Result<LockStore, String> {
    Err(format!(
        "--lock-store {}: this demo was built without etcd support; run it with \
         `cargo run -p demo-coupon-service --features etcd` (etcd's client needs `protoc`: \
         apt-get install protobuf-compiler)",
        redacted(url)
    ))
}

/// The lease TTL unless `--lock-ttl-ms` says otherwise (the locker's default).
const DEFAULT_LOCK_TTL: Duration = Duration::from_secs(10);

/// The session (etcd's lease TTL, ZooKeeper's session timeout) for lock leases of `ttl`: three
/// halves of it (a locker may lease two thirds of its session), in whole seconds, at least
/// etcd's shortest (2 s; ZooKeeper raises it to its own minimum).
fn session_outliving(ttl: Duration) -> Duration {
    let seconds = (ttl.as_millis() * 3).div_ceil(2 * 1000);
    Duration::from_secs(u64::try_from(seconds).unwrap_or(u64::MAX).max(2))
}

/// Locks in the SQL database at `url`, beside the coupons.
async fn sql_locking(url: &str, dialect: Dialect) -> Result<LockStore, BackendError> {
    Ok(match dialect {
        Dialect::Postgres => LockStore::Postgres(PostgresBackend::connect(url).await?),
        Dialect::Mysql => LockStore::Mysql(MysqlBackend::connect(url).await?),
    })
}

/// A layer taking its locks with `locker`, answering rejections as the demo does.
fn lock_layer<B: LockBackend, K: KeyExtractor>(locker: &Locker<B>, key: K) -> LockLayer<B, K> {
    LockLayer::new(locker.clone(), key)
        .body_limit(bodies::BODY_LIMIT)
        .on_rejection(problem::lock_rejection)
}

/// A coupon's lock key, `coupon:{id}`, for a valid coupon id; any other id is refused as the
/// handlers refuse it.
fn coupon_key(parts: &Parts) -> Result<Option<String>, KeyError> {
    let Some(key) = COUPON_KEY.extract(parts)? else {
        return Ok(None);
    };
    let id = key.strip_prefix("coupon:").unwrap_or_default();
    if bodies::is_coupon_id(id) {
        Ok(Some(key))
    } else {
        Err(KeyError::invalid(bodies::COUPON_ID_RULE))
    }
}

static COUPON_KEY: LazyLock<KeyTemplate> =
    LazyLock::new(|| KeyTemplate::parse("coupon:{path id}").expect("a valid key template"));

/// The coupon routes' locks: a read-write lock on `coupon:{id}` (reading a coupon shares it,
/// resetting or claiming takes it alone), and a semaphore admitting `audit_permits` audits.
fn with_locks<B: SharedLocks + Semaphores>(
    locker: &Locker<B>,
    settings: LockSettings,
    routes: Routes,
) -> Routes {
    let (coupon, audit, transfer) = mutexes(locker);
    let audit = audit.semaphore(settings.audit_permits);
    locked(routes, (coupon.read_write(), audit, transfer))
}

/// The coupon routes' locks on a store with mutexes only (RedLock): a mutex on `coupon:{id}`
/// for reading a coupon too, and one on `audits`, so audits run one at a time.
fn with_mutexes<B: LockBackend>(locker: &Locker<B>, routes: Routes) -> Routes {
    locked(routes, mutexes(locker))
}

/// Mutex layers on `locker` for a coupon, the audits, and a transfer's coupons.
fn mutexes<B: LockBackend>(
    locker: &Locker<B>,
) -> (
    LockLayer<B, KeyOf>,
    LockLayer<B, KeyOf>,
    LockLayer<B, impl KeyExtractor + use<B>>,
) {
    let audits: KeyOf = |_| Ok(Some("audits".to_owned()));
    let coupon: KeyOf = coupon_key;
    (
        lock_layer(locker, coupon),
        lock_layer(locker, audits),
        lock_layer(locker, many(transfers::lock_keys)),
    )
}

/// A key extractor that is a plain function.
type KeyOf = fn(&Parts) -> Result<Option<String>, KeyError>;

/// `routes` under the coupon's, the audits' and a transfer's lock layers.
fn locked<B: LockBackend, T: KeyExtractor>(
    routes: Routes,
    (coupon, audit, transfer): (LockLayer<B, KeyOf>, LockLayer<B, KeyOf>, LockLayer<B, T>),
) -> Routes {
    Routes {
        coupon: routes.coupon.route_layer(coupon.clone()),
        claim: routes.claim.route_layer(coupon),
        audit: routes.audit.route_layer(audit),
        // The body names the coupons: read them into the request before the lock looks.
        transfer: routes
            .transfer
            .route_layer(transfer)
            .route_layer(axum::middleware::from_fn(transfers::name_coupons)),
    }
}

/// The routes that take locks.
struct Routes {
    coupon: MethodRouter<AppState>,
    claim: MethodRouter<AppState>,
    audit: MethodRouter<AppState>,
    transfer: MethodRouter<AppState>,
}

/// The service's routes.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use demo_coupon_service::{AppState, app};
/// use demo_coupon_service::LockSettings;
///
/// let state = AppState::embedded(Duration::from_millis(2), LockSettings::default(), true)?;
/// let router = app(state);
/// # Ok::<_, String>(())
/// ```
pub fn app(state: AppState) -> Router {
    let routes = if state.optimistic {
        Routes {
            coupon: put(routes::reset).get(routes::show),
            claim: post(optimistic::claim),
            audit: post(routes::audit),
            transfer: post(optimistic::transfer),
        }
    } else {
        Routes {
            coupon: put(routes::reset).get(routes::show),
            claim: post(routes::claim),
            audit: post(routes::audit),
            transfer: post(transfers::transfer),
        }
    };
    let routes = match &state.locking {
        Locking::Off => routes,
        Locking::Memory(locker) => with_locks(locker, state.lock, routes),
        Locking::Redis(locker) => with_locks(locker, state.lock, routes),
        Locking::RedisCluster(locker) => with_locks(locker, state.lock, routes),
        Locking::RedisSentinel(locker) => with_locks(locker, state.lock, routes),
        Locking::Redlock(locker) => with_mutexes(locker, routes),
        Locking::Postgres(locker) => with_locks(locker, state.lock, routes),
        Locking::Mysql(locker) => with_locks(locker, state.lock, routes),
        #[cfg(feature = "etcd")]
        Locking::Etcd(locker) => with_locks(locker, state.lock, routes),
        Locking::Zookeeper(locker) => with_locks(locker, state.lock, routes),
    };
    Router::new()
        .route("/coupons/{id}", routes.coupon)
        .route("/coupons/{id}/claim", routes.claim)
        .route("/coupons/{id}/audit", routes.audit)
        .route("/transfers", routes.transfer)
        .route("/healthz", get(routes::healthz))
        .route("/metrics", get(telemetry::metrics))
        .route("/", get(dashboard::page))
        .route("/favicon.ico", get(dashboard::icon))
        .route("/favicon.svg", get(dashboard::icon))
        .route("/dashboard/stats", get(dashboard::stats))
        .fallback(routes::no_such_route)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(axum::middleware::from_fn(telemetry::count_responses))
        .with_state(state)
}

/// `url` without its password, for logs.
pub fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}://***{}", &url[..scheme_end], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// Serves until SIGTERM or Ctrl-C, then lets in-flight requests finish (and release their
/// locks) before returning.
pub async fn serve(options: Options) -> Result<(), Box<dyn std::error::Error>> {
    let state = AppState::from_options(&options)
        .await?
        .with_metrics(telemetry::prometheus());
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|error| format!("cannot listen on {}: {error}", options.listen))?;
    let address = listener.local_addr()?;
    dashboard::spawn_reporter(state.clone(), address.to_string());
    let store = match options.store_url() {
        Some(url) => format!("{} (shared by replicas)", redacted(url)),
        None if options.lock_store.is_some() => {
            "embedded in-process store (one process only; set STORE for replicas)".to_owned()
        }
        None => {
            "embedded in-process store and MemoryBackend (one process only; set STORE for replicas)"
                .to_owned()
        }
    };
    let locking = if options.no_lock {
        "OFF (--no-lock: claims will oversell)".to_owned()
    } else if options.optimistic {
        "OFF (--optimistic: claims and transfers retry on a version check)".to_owned()
    } else if let Some(lock_store) = &options.lock_store {
        format!(
            "on, in {} (writes fenced by the coupon store)",
            redacted(lock_store)
        )
    } else {
        "on".to_owned()
    };
    tracing::info!(
        %address,
        dashboard = %format_args!("http://{address}/"),
        store,
        locking,
        work_ms = options.work_ms,
        lock_wait_ms = options.lock_wait_ms,
        lock_ttl_ms = lease_ttl(&state.locking, options.lock_ttl_ms),
        lock_local_run = options.lock_local_run,
        audit_permits = options.audit_permits,
        renew = !options.no_renew,
        on_lost = ?options.on_lost,
        fenced_writes = !options.no_fence,
        "coupon service listening"
    );
    serving::serve(listener, app(state), shutdown_signal()).await;
    tracing::info!("stopped; in-flight claims finished");
    Ok(())
}

/// The whole program behind the `demo-coupon-service` binary: logs (`RUST_LOG`, default
/// `info`; coloured only on a terminal), options from the command line and environment, then
/// [`serve`]. A failure to start is one line on stderr, naming what failed, and exit code 1.
pub fn run_from_command_line() -> std::process::ExitCode {
    use clap::Parser;
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;

    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    let options = Options::parse();
    let served = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the runtime: {error}").into())
        .and_then(|runtime| runtime.block_on(serve(options)));
    match served {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("demo-coupon-service: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The lease TTL locks are taken with, for the start-up log: the one asked for, or the
/// default, said to be shortened where the lock store vouches for less.
fn lease_ttl(locking: &Locking, asked_ms: Option<u64>) -> String {
    match (locking.ttl(), asked_ms) {
        (None, _) => "none (no locks)".to_owned(),
        (Some(ttl), Some(_)) => ttl.as_millis().to_string(),
        (Some(ttl), None) if ttl < DEFAULT_LOCK_TTL => format!(
            "{} (the longest the lock store vouches for, below the default {})",
            ttl.as_millis(),
            DEFAULT_LOCK_TTL.as_millis()
        ),
        (Some(ttl), None) => ttl.as_millis().to_string(),
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {}
        _ = terminate.recv() => {}
    }
    tracing::info!("shutting down: finishing in-flight requests");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_outlives_its_locks_leases_by_half() {
        assert_eq!(
            session_outliving(Duration::from_secs(10)),
            Duration::from_secs(15)
        );
        assert_eq!(
            session_outliving(Duration::from_millis(2100)),
            Duration::from_secs(4)
        );
        assert_eq!(
            session_outliving(Duration::from_millis(500)),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn passwords_are_redacted_from_urls() {
        assert_eq!(
            redacted("redis://:secret@host:6379/0"),
            "redis://***@host:6379/0"
        );
        assert_eq!(redacted("redis://user:p@ss@host"), "redis://***@host");
        assert_eq!(redacted("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }

    #[test]
    fn a_sentinel_url_names_the_sentinels_the_master_and_the_acknowledgements() {
        let url = SentinelUrl::parse(
            "--store",
            "redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/m?wait=1",
        );
        assert_eq!(
            url,
            Ok(SentinelUrl {
                sentinels: vec![
                    "redis://10.0.0.1:26379".to_owned(),
                    "redis://10.0.0.2:26379".to_owned()
                ],
                master: "m".to_owned(),
                wait: 1,
            })
        );
        let no_master =
            SentinelUrl::parse("--store", "redis+sentinel://10.0.0.1:26379").unwrap_err();
        assert!(
            no_master.contains("name the Sentinels and the master"),
            "{no_master}"
        );
        let bad_wait = SentinelUrl::parse("--store", "redis+sentinel://h:1/m?wait=x").unwrap_err();
        assert!(bad_wait.contains("a whole number"), "{bad_wait}");
    }

    #[test]
    fn a_cluster_url_names_every_node_with_its_credentials() {
        assert_eq!(
            cluster_nodes(
                "--store",
                "redis+cluster://:pw@10.0.0.1:7000,10.0.0.2:7001/"
            ),
            Ok(vec![
                "redis://:pw@10.0.0.1:7000".to_owned(),
                "redis://:pw@10.0.0.2:7001".to_owned()
            ])
        );
        let none = cluster_nodes("--lock-store", "redis+cluster://").unwrap_err();
        assert!(none.starts_with("--lock-store redis+cluster://: name the cluster's nodes"));
    }
}
