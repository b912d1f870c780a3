//! Replica acknowledgements: a lock counts as taken only once this many replicas have it
//! (`WAIT`), so that a failover to one of them keeps it.

use std::time::Duration;

use super::commands::millis;
use super::{RedisBackend, RedisConnection};
use crate::backend::{Attempt, BackendError, Granted, LockBackend, TokenLease};

/// How many replicas must acknowledge a lock, and for how long the backend waits for them.
#[derive(Clone, Copy, Debug)]
pub(super) struct ReplicaAcks {
    replicas: u32,
    timeout: Duration,
}

/// A grant whose lease is given back when its replicas do not acknowledge it.
pub(super) trait GrantedLease {
    fn lease(&self) -> Option<TokenLease>;
}

impl GrantedLease for Granted<TokenLease> {
    fn lease(&self) -> Option<TokenLease> {
        Some(self.lease)
    }
}

impl GrantedLease for Vec<Granted<TokenLease>> {
    fn lease(&self) -> Option<TokenLease> {
        self.first().map(|grant| grant.lease)
    }
}

impl<C: RedisConnection> RedisBackend<C> {
    /// Every lock taken counts as taken only once `replicas` replicas acknowledged it (`WAIT
    /// replicas timeout`, after the acquire, on the same connection): otherwise the lock is
    /// given back and the acquire fails (the layer answers 503), naming how many did. Every
    /// renewal counts only once they acknowledged it too: a failover that forgot a renewal
    /// would end the lease sooner than its holder counts on. On Redis Cluster every master is
    /// asked, and the fewest acknowledgements count.
    ///
    /// `WAIT` narrows the window in which a failover loses a lock, and does not close it: it
    /// is not consensus. A replica that acknowledged can still lose the race to be promoted to
    /// one that did not, and a lock taken after the last acknowledgement and before the master
    /// died is on no replica. What it buys is measured in `docs/BENCHMARKS.md`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tower_lock::RedisBackend;
    ///
    /// # async fn run() -> Result<(), redis::RedisError> {
    /// let backend = RedisBackend::connect("redis://127.0.0.1:6379")
    ///     .await?
    ///     .replica_acks(1, Duration::from_millis(100));
    /// # Ok(()) }
    /// ```
    pub fn replica_acks(mut self, replicas: u32, timeout: Duration) -> Self {
        self.acks = (replicas > 0).then_some(ReplicaAcks { replicas, timeout });
        self
    }

    /// `taken` (of `names`), once the replicas asked for acknowledged it; given back otherwise.
    pub(super) async fn acknowledged<T: GrantedLease>(
        &self,
        names: &[&str],
        taken: Attempt<T>,
    ) -> Result<Attempt<T>, BackendError> {
        let (Some(acks), Attempt::Acquired(grant)) = (self.acks, &taken) else {
            return Ok(taken);
        };
        let Err(shortfall) = self.wait_for_replicas(acks).await else {
            return Ok(taken);
        };
        if let Some(lease) = grant.lease() {
            for name in names {
                if let Err(error) = self.release(name, &lease).await {
                    tracing::warn!(lock = name, %error, "giving back an unacknowledged lock failed");
                }
            }
        }
        Err(BackendError::new(format!(
            "lock {}: {shortfall}; given back",
            names.join(", ")
        )))
    }

    /// A renewal of `name` (`extended`: whether the store had the lease to renew), once the
    /// replicas asked for acknowledged it. A renewal they lack is forgotten when one of them is
    /// promoted: the lease would then end sooner than its holder counts on. Unacknowledged, the
    /// renewal fails (the lease stays the holder's on this master): the engine renews again,
    /// and tells the holder the lock is lost if it cannot before the lease it counts on ends.
    pub(super) async fn renewal_acknowledged(
        &self,
        name: &str,
        extended: bool,
    ) -> Result<bool, BackendError> {
        let (Some(acks), true) = (self.acks, extended) else {
            return Ok(extended);
        };
        match self.wait_for_replicas(acks).await {
            Ok(()) => Ok(true),
            Err(shortfall) => Err(BackendError::new(format!(
                "renewing lock {name}: {shortfall}"
            ))),
        }
    }

    /// `WAIT`: whether the replicas asked for acknowledged every write so far; if not, how
    /// many did.
    async fn wait_for_replicas(&self, acks: ReplicaAcks) -> Result<(), String> {
        let acknowledged = redis::cmd("WAIT")
            .arg(acks.replicas)
            .arg(millis(acks.timeout))
            .query_async::<i64>(&mut self.connection.clone())
            .await;
        match acknowledged {
            Ok(count) if count >= i64::from(acks.replicas) => Ok(()),
            Ok(count) => Err(format!(
                "{count} of the {} replicas asked for acknowledged it within {:?}",
                acks.replicas, acks.timeout
            )),
            Err(error) => Err(format!("WAIT failed: {error}")),
        }
    }
}
