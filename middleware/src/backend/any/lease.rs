//! [`AnyLease`]: the lease of whichever store an [`AnyBackend`](super::AnyBackend) chose.

use crate::backend::{Attempt, BackendError, Granted, QueuedAttempt, TokenLease};

/// The lease of an [`AnyBackend`](super::AnyBackend)'s store: a token (memory, Redis, the SQL
/// stores), an etcd key or a ZooKeeper node.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AnyLease {
    /// Memory, Redis (one node, Cluster, Sentinel), PostgreSQL and MySQL lease rows.
    Token(TokenLease),
    /// etcd.
    #[cfg(feature = "etcd")]
    Etcd(crate::backend::etcd::EtcdLease),
    /// ZooKeeper.
    #[cfg(feature = "zookeeper")]
    Zookeeper(crate::backend::zookeeper::ZookeeperLease),
}

/// A store's own lease, wrapped in and found again in an [`AnyLease`].
pub(super) trait StoreLease: Sized {
    fn wrap(self) -> AnyLease;

    /// This store's lease in `lease`; another store's is an error (a lease is only ever given
    /// back to the backend that granted it, so it cannot happen).
    fn of(lease: &AnyLease) -> Result<&Self, BackendError>;
}

/// The error of a lease given to a store that did not grant it.
fn foreign(lease: &AnyLease) -> BackendError {
    BackendError::new(format!("a lease of another store: {lease:?}"))
}

macro_rules! store_lease {
    ($(#[$cfg:meta])* $lease:ty, $variant:ident) => {
        $(#[$cfg])*
        impl StoreLease for $lease {
            fn wrap(self) -> AnyLease {
                AnyLease::$variant(self)
            }

            #[allow(unreachable_patterns)]
            fn of(lease: &AnyLease) -> Result<&Self, BackendError> {
                match lease {
                    AnyLease::$variant(own) => Ok(own),
                    other => Err(foreign(other)),
                }
            }
        }
    };
}

store_lease!(TokenLease, Token);
store_lease!(
    #[cfg(feature = "etcd")]
    crate::backend::etcd::EtcdLease,
    Etcd
);
store_lease!(
    #[cfg(feature = "zookeeper")]
    crate::backend::zookeeper::ZookeeperLease,
    Zookeeper
);

/// `attempt` with its grant's lease wrapped.
pub(super) fn wrapped<L: StoreLease>(attempt: Attempt<Granted<L>>) -> Attempt<Granted<AnyLease>> {
    match attempt {
        Attempt::Acquired(granted) => Attempt::Acquired(grant(granted)),
        Attempt::Busy { holder_ttl } => Attempt::Busy { holder_ttl },
    }
}

/// `attempt` with each grant's lease wrapped.
pub(super) fn all_wrapped<L: StoreLease>(
    attempt: Attempt<Vec<Granted<L>>>,
) -> Attempt<Vec<Granted<AnyLease>>> {
    match attempt {
        Attempt::Acquired(grants) => Attempt::Acquired(grants.into_iter().map(grant).collect()),
        Attempt::Busy { holder_ttl } => Attempt::Busy { holder_ttl },
    }
}

/// `attempt` with its lease, or its handover's, wrapped.
pub(super) fn queued_wrapped<L: StoreLease>(attempt: QueuedAttempt<L>) -> QueuedAttempt<AnyLease> {
    match attempt {
        QueuedAttempt::Acquired(granted) => QueuedAttempt::Acquired(grant(granted)),
        QueuedAttempt::Queued {
            holder_ttl,
            handover,
        } => QueuedAttempt::Queued {
            holder_ttl,
            handover: handover.wrap(),
        },
    }
}

fn grant<L: StoreLease>(granted: Granted<L>) -> Granted<AnyLease> {
    Granted {
        lease: granted.lease.wrap(),
        fence: granted.fence,
    }
}
