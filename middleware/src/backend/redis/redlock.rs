//! RedLock: one lock over N independent Redis masters, held while a majority of them hold it.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::ConnectionManager;
use redis::{Client, IntoConnectionInfo, RedisError};
use tokio::time::{Instant, timeout};

use super::RedisBackend;
use super::connecting::commands_config;
use crate::backend::request::drift_margin;
use crate::backend::{Attempt, BackendError, Granted, Hold, LockBackend, LockRequest, TokenLease};

/// Locks over N independent Redis masters (3 or 5), the RedLock algorithm: a lock is granted
/// when a majority (N/2 + 1) of the masters granted it within its validity — the lease TTL
/// less the time the attempt took and a drift margin —, renewed while a majority renews it,
/// and released on every master; an attempt that falls short of a majority is given back on
/// every master at once. A master that fails, or does not answer within a twentieth of the
/// TTL, counts as a "no", and the error says which masters failed and why.
///
/// **No fencing tokens** ([`LockGuard::fence`](crate::LockGuard::fence) is `None`): N
/// independent counters cannot give one strictly increasing sequence. RedLock's safety rests
/// on bounded clock drift and bounded pauses (Kleppmann's critique): a holder paused past its
/// lease cannot be stopped from writing. Where a stale holder's write must be refused, use a
/// store that fences (one Redis node, PostgreSQL, etcd, ZooKeeper) and pass the token to the
/// store you write to; where the lock only saves work (a duplicate job, a cache refill), RedLock
/// survives the loss of a minority of the masters, which one Redis with replicas does not
/// promise.
///
/// Waiters poll (with the locker's backoff): the masters' announcements would need a quorum
/// too. Mutexes and several keys at once; no read-write locks or semaphores.
///
/// # Example
///
/// ```no_run
/// use tower_lock::Locker;
/// use tower_lock::backend::redis::RedlockBackend;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let masters = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"];
/// let locker = Locker::new(RedlockBackend::connect(masters)?);
/// let held = locker.lock("report:daily").await?;
/// assert!(held.fence().is_none(), "RedLock issues no fencing tokens");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedlockBackend {
    masters: Vec<Master>,
}

#[derive(Clone)]
struct Master {
    address: String,
    backend: RedisBackend,
}

impl RedlockBackend {
    /// Locks over the Redis masters at `urls`, each independent of the others (not replicas
    /// of one another, not one cluster). Connections are made on first use, so a minority of
    /// masters may be down at start.
    ///
    /// # Errors
    ///
    /// A URL that does not parse.
    pub fn connect<T: IntoConnectionInfo>(
        urls: impl IntoIterator<Item = T>,
    ) -> Result<Self, RedisError> {
        super::connecting::choose_tls_crypto();
        let mut masters = Vec::new();
        for url in urls {
            let info = url.into_connection_info()?;
            let address = info.addr().to_string();
            let config = commands_config();
            let connection = ConnectionManager::new_lazy_with_config(Client::open(info)?, config)?;
            let backend = RedisBackend::from_connection(connection).fencing(false);
            masters.push(Master { address, backend });
        }
        Ok(Self { masters })
    }

    /// Asks every master for a `PING` at once, each within `limit`: `Ok` when a majority
    /// answers, else an error naming each master that did not, and why.
    ///
    /// [`connect`](Self::connect) connects on first use, so that a minority of masters may be
    /// down at start; a service that should refuse to start without a quorum asks here.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tower_lock::backend::redis::RedlockBackend;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let masters = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"];
    /// let backend = RedlockBackend::connect(masters)?;
    /// backend.check_quorum(Duration::from_secs(1)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn check_quorum(&self, limit: Duration) -> Result<(), BackendError> {
        let pings = self.backends().map(|master| async move {
            let mut connection = master.connection();
            redis::cmd("PING")
                .query_async::<()>(&mut connection)
                .await
                .map_err(BackendError::new)
        });
        let failed = failures(&self.votes(limit, pings).await);
        if self.masters.len() - failed.len() >= self.quorum() {
            return Ok(());
        }
        Err(BackendError::new(format!(
            "RedLock: {} of {} masters must answer; {} did not: {}",
            self.quorum(),
            self.masters.len(),
            failed.len(),
            failed.join("; ")
        )))
    }

    /// How many masters must agree: a majority.
    fn quorum(&self) -> usize {
        self.masters.len() / 2 + 1
    }

    /// Awaits `calls` (one per master, in the masters' order) at once, each bounded by
    /// `limit`: each master's answer.
    async fn votes<T>(
        &self,
        limit: Duration,
        calls: impl Iterator<Item = impl Future<Output = Result<T, BackendError>>>,
    ) -> Vec<Vote<T>> {
        let calls = self
            .masters
            .iter()
            .zip(calls)
            .map(|(master, call)| async move {
                match timeout(limit, call).await {
                    Ok(Ok(answer)) => Vote::Answered(answer),
                    Ok(Err(error)) => Vote::Failed(format!("{}: {error}", master.address)),
                    Err(_) => {
                        Vote::Failed(format!("{}: no answer within {limit:?}", master.address))
                    }
                }
            });
        join_all(calls).await
    }

    /// Each master's backend.
    fn backends(&self) -> impl Iterator<Item = &RedisBackend> {
        self.masters.iter().map(|master| &master.backend)
    }

    /// Gives the lock back on every master, answered or not (a lost answer may have taken it).
    async fn release_everywhere(&self, name: &str, lease: &TokenLease, limit: Duration) {
        let calls = self.backends().map(|master| master.release(name, lease));
        let released = self.votes(limit, calls).await;
        let failed = failures(&released);
        if !failed.is_empty() {
            tracing::warn!(
                lock = name,
                failed = failed.join("; "),
                "release failed on masters; their leases run out"
            );
        }
    }
}

/// One master's answer, or why there is none.
enum Vote<T> {
    Answered(T),
    Failed(String),
}

/// Why each master that failed did.
fn failures<T>(votes: &[Vote<T>]) -> Vec<String> {
    votes
        .iter()
        .filter_map(|vote| match vote {
            Vote::Failed(why) => Some(why.clone()),
            Vote::Answered(_) => None,
        })
        .collect()
}

/// How long one master may take to answer a release.
const RELEASE_LIMIT: Duration = Duration::from_millis(500);

/// How long one master may take to answer: a twentieth of the lease, at least 50 ms.
fn per_master_limit(ttl: Duration) -> Duration {
    (ttl / 20).max(Duration::from_millis(50))
}

/// A quorum that could not be reached because masters failed.
fn no_quorum(name: &str, quorum: usize, of: usize, failed: &[String]) -> BackendError {
    BackendError::new(format!(
        "RedLock on {name}: {quorum} of {of} masters must agree; {} failed: {}",
        failed.len(),
        failed.join("; ")
    ))
}

impl LockBackend for RedlockBackend {
    type Lease = TokenLease;

    fn store_kind(&self) -> &'static str {
        "redlock"
    }

    async fn acquire(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
        let started = Instant::now();
        let limit = per_master_limit(request.ttl);
        let calls = self.backends().map(|master| master.acquire(name, request));
        let votes = self.votes(limit, calls).await;
        let taken = (votes.iter())
            .filter(|vote| matches!(vote, Vote::Answered(Attempt::Acquired(_))))
            .count();
        let lease = TokenLease::new(request.token, Hold::Mutex);
        let validity = (request.ttl).saturating_sub(started.elapsed() + drift_margin(request.ttl));
        if taken >= self.quorum() && !validity.is_zero() {
            return Ok(Attempt::Acquired(Granted { lease, fence: None }));
        }
        self.release_everywhere(name, &lease, limit).await;
        let failed = failures(&votes);
        if self.masters.len() - failed.len() < self.quorum() {
            return Err(no_quorum(name, self.quorum(), self.masters.len(), &failed));
        }
        let holder_ttl = (votes.iter())
            .filter_map(|vote| match vote {
                Vote::Answered(Attempt::Busy { holder_ttl }) => *holder_ttl,
                _ => None,
            })
            .min();
        Ok(Attempt::Busy { holder_ttl })
    }

    async fn extend(
        &self,
        name: &str,
        lease: &TokenLease,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        let calls = self
            .backends()
            .map(|master| master.extend(name, lease, ttl));
        let votes = self.votes(per_master_limit(ttl), calls).await;
        let extended = (votes.iter())
            .filter(|vote| matches!(vote, Vote::Answered(true)))
            .count();
        if extended >= self.quorum() {
            return Ok(true);
        }
        let failed = failures(&votes);
        match self.masters.len() - failed.len() >= self.quorum() {
            // Enough masters answered, and too few of them still hold it.
            true => Ok(false),
            false => Err(no_quorum(name, self.quorum(), self.masters.len(), &failed)),
        }
    }

    /// The operator's label a master recorded for `lease` (the operator's release ran on every
    /// master it could reach): the first master that answers with one tells.
    async fn released_by(
        &self,
        name: &str,
        lease: &TokenLease,
    ) -> Result<Option<String>, BackendError> {
        let calls = self
            .backends()
            .map(|master| master.released_by(name, lease));
        let votes = self.votes(RELEASE_LIMIT, calls).await;
        Ok(votes.into_iter().find_map(|vote| match vote {
            Vote::Answered(Some(label)) => Some(label),
            _ => None,
        }))
    }

    async fn release(&self, name: &str, lease: &TokenLease) -> Result<bool, BackendError> {
        let calls = self.backends().map(|master| master.release(name, lease));
        let votes = self.votes(RELEASE_LIMIT, calls).await;
        let released = (votes.iter())
            .filter(|vote| matches!(vote, Vote::Answered(true)))
            .count();
        let failed = failures(&votes);
        match released >= self.quorum() {
            true => Ok(true),
            false if self.masters.len() - failed.len() >= self.quorum() => Ok(false),
            false => Err(no_quorum(name, self.quorum(), self.masters.len(), &failed)),
        }
    }

    async fn abandon(&self, name: &str, request: LockRequest) -> Result<(), BackendError> {
        let limit = per_master_limit(request.ttl);
        let calls = self.backends().map(|master| master.abandon(name, request));
        let votes = self.votes(limit, calls).await;
        let failed = failures(&votes);
        match failed.is_empty() {
            true => Ok(()),
            false => Err(BackendError::new(format!(
                "RedLock on {name}: giving back failed on {}",
                failed.join("; ")
            ))),
        }
    }
}

mod inspection;

impl fmt::Debug for RedlockBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let masters: Vec<&str> = self
            .masters
            .iter()
            .map(|master| master.address.as_str())
            .collect();
        f.debug_struct("RedlockBackend")
            .field("masters", &masters)
            .finish()
    }
}
