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
    /// given back and the acquire fails (the layer answers 503), naming how many did. On Redis
    /// Cluster every master is asked, and the fewest acknowledgements count.
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
        let acknowledged = redis::cmd("WAIT")
            .arg(acks.replicas)
            .arg(millis(acks.timeout))
            .query_async::<i64>(&mut self.connection.clone())
            .await;
        let shortfall = match acknowledged {
            Ok(count) if count >= i64::from(acks.replicas) => return Ok(taken),
            Ok(count) => format!(
                "{count} of the {} replicas asked for acknowledged it within {:?}",
                acks.replicas, acks.timeout
            ),
            Err(error) => format!("WAIT failed: {error}"),
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
}
