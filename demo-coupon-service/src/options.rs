//! The command line: what an operator can ask of the demo, and the lock settings it makes.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use tower_lock::OnLost;

use crate::admin::AdminToken;

/// Command-line options; each can also come from the environment.
#[derive(Clone, Debug, clap::Parser)]
#[command(version, about)]
pub struct Options {
    /// Address to listen on.
    #[arg(long, env = "LISTEN", default_value = "127.0.0.1:3000")]
    pub listen: SocketAddr,
    /// Where coupons and locks live, shared by replicas: `redis://…` (`rediss://…` over TLS,
    /// built with the `tls` feature),
    /// `redis+cluster://host:port[,host:port…]` (a Redis Cluster's nodes),
    /// `redis+sentinel://host:port[,host:port…]/<master>[?wait=<n>]` (the master that Redis
    /// Sentinels name; `wait`: replicas that must acknowledge each lock), `postgres://…` or
    /// `mysql://…`. Without it, or with `memory://`: the embedded in-process store and lock
    /// backend (one process only).
    #[arg(long, env = "STORE")]
    pub store: Option<String>,
    /// The same as `--store`, under its older name.
    #[arg(long, env = "REDIS_URL", conflicts_with = "store")]
    pub redis_url: Option<String>,
    /// Keep the locks in another store than the coupons, any URL tower-lock's `AnyMutexBackend`
    /// takes: `etcd://host:port[,host:port…][?session_ms=<ms>]` (a cluster's members),
    /// `zk://host:port[,host:port…][?session_ms=<ms>]` (an ensemble's servers),
    /// `redlock://host:port,host:port,host:port` (mutexes only), any `--store` URL. The claim's
    /// write is then fenced by the coupon store with the lock store's tokens. Without it, locks
    /// live beside the coupons.
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
    /// Serve the operator's routes — `GET /admin/locks` (who holds which lock, for how long,
    /// with how many waiting) and `DELETE /admin/locks/{key}` (free a stuck holder's lock) —
    /// to requests with `Authorization: Bearer <token>` (at least 16 characters). Without it
    /// they are not served.
    #[arg(long, env = "ADMIN_TOKEN", conflicts_with_all = ["no_lock", "optimistic"])]
    pub admin_token: Option<String>,
    /// How many audits (`POST /coupons/{id}/audit`) may run at once across all replicas.
    #[arg(long, env = "AUDIT_PERMITS", default_value_t = TWO)]
    pub audit_permits: NonZeroU32,
}

impl Options {
    /// The store's URL, from `--store` or its alias `--redis-url`.
    pub fn store_url(&self) -> Option<&str> {
        self.store.as_deref().or(self.redis_url.as_deref())
    }

    /// The operator's token, `--admin-token`, if given.
    ///
    /// # Errors
    ///
    /// One line naming the option, for a token too short or with whitespace.
    pub fn admin_token(&self) -> Result<Option<AdminToken>, String> {
        self.admin_token.as_deref().map(AdminToken::new).transpose()
    }

    /// The claim's simulated work, `--work-ms`.
    ///
    /// # Errors
    ///
    /// One line naming the option and its bound, for work longer than a minute.
    pub fn work(&self) -> Result<Duration, String> {
        match self.work_ms {
            work_ms if work_ms > MAX_WORK_MS => Err(format!(
                "--work-ms {work_ms}: a claim's simulated work is at most {MAX_WORK_MS} ms (a minute)"
            )),
            work_ms => Ok(Duration::from_millis(work_ms)),
        }
    }
}

/// The longest `--work-ms`: a claim's work longer than a minute is no demonstration, and one
/// of `u64::MAX` would hold its lock for good.
const MAX_WORK_MS: u64 = 60_000;

/// Two audits at once, unless `--audit-permits` says otherwise.
const TWO: NonZeroU32 = NonZeroU32::new(2).expect("two is not zero");

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
    /// Who holds a lock this replica takes, as the operator's view shows it: the replica's
    /// listening address (as the dashboard names replicas); `None`: host and process id.
    pub holder: Option<&'static str>,
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
            holder: None,
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
            // Made once per process, for the locker's life.
            holder: Some(Box::leak(options.listen.to_string().into_boxed_str())),
        }
    }
}
