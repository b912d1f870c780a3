//! [`ZookeeperBackend`] as a [`LockBackend`]: its mutexes (one name and several), and the extend,
//! release and abandon of every hold it grants.

use std::time::Duration;

use tokio::time::Instant;

use super::{ZookeeperBackend, ZookeeperLease};
use crate::backend::{
    Attempt, BackendError, Granted, LockBackend, LockRequest, WaitQueue, lease_deadline,
};

/// How long an extend waits to read its node before the session's word alone decides.
const NODE_READ_PATIENCE: Duration = Duration::from_millis(500);

impl LockBackend for ZookeeperBackend {
    type Lease = ZookeeperLease;

    fn store_kind(&self) -> &'static str {
        "zookeeper"
    }

    async fn acquire(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<ZookeeperLease>>, BackendError> {
        self.exclusively(name, || self.take_exclusive(name, request))
            .await
    }

    async fn extend(
        &self,
        _name: &str,
        lease: &ZookeeperLease,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        let deadline = lease_deadline(Instant::now(), ttl);
        let read = tokio::time::timeout(NODE_READ_PATIENCE, self.still_there(lease));
        let (term, node) = tokio::join!(self.inner.session.vouch(deadline), read);
        // A node that cannot be read in time is not known gone: the session vouches alone, as
        // when the ensemble is cut off.
        Ok(term.session == lease.session && !matches!(node, Ok(Ok(false))))
    }

    async fn release(&self, _name: &str, lease: &ZookeeperLease) -> Result<bool, BackendError> {
        self.inner.watches.forget_place(&lease.path);
        self.delete(&lease.path).await
    }

    async fn abandon(&self, name: &str, request: LockRequest) -> Result<(), BackendError> {
        self.give_up(name, request.token).await
    }

    fn wait_queue(&self) -> Option<&dyn WaitQueue<ZookeeperLease>> {
        Some(self)
    }

    fn max_ttl(&self) -> Option<Duration> {
        Some(self.inner.session.max_ttl())
    }
}
