//! [`AnyLease`] and [`AnyMutexLease`]: the lease of whichever store an
//! [`AnyBackend`](super::AnyBackend) or [`AnyMutexBackend`](super::AnyMutexBackend) chose.

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

/// The lease of an [`AnyMutexBackend`](super::AnyMutexBackend)'s store: an [`AnyLease`], a
/// RedLock token or a database session holding the lock.
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyMutexLease {
    /// A store with every shape.
    Any(AnyLease),
    /// RedLock.
    #[cfg(feature = "redis")]
    Redlock(TokenLease),
    /// A PostgreSQL session holding an advisory lock.
    #[cfg(feature = "postgres")]
    Advisory(crate::backend::ConnectionLease<sqlx::Postgres>),
    /// A MySQL session holding a row `FOR UPDATE NOWAIT`.
    #[cfg(feature = "mysql")]
    Nowait(crate::backend::ConnectionLease<sqlx::MySql>),
}

/// A store's own lease, wrapped in the run-time lease `Outer` and found again in it.
pub(super) trait LeaseIn<Outer>: Sized {
    fn wrap(self) -> Outer;

    /// This store's lease in `outer`; another store's is an error (a lease is only ever given
    /// back to the backend that granted it, so it cannot happen).
    fn of(outer: &Outer) -> Result<&Self, BackendError>;
}

macro_rules! lease_in {
    ($(#[$cfg:meta])* $lease:ty, $outer:ident :: $variant:ident) => {
        $(#[$cfg])*
        impl LeaseIn<$outer> for $lease {
            fn wrap(self) -> $outer {
                $outer::$variant(self)
            }

            #[allow(unreachable_patterns)]
            fn of(outer: &$outer) -> Result<&Self, BackendError> {
                match outer {
                    $outer::$variant(own) => Ok(own),
                    other => Err(BackendError::new(format!("a lease of another store: {other:?}"))),
                }
            }
        }
    };
}

lease_in!(TokenLease, AnyLease::Token);
lease_in!(
    #[cfg(feature = "etcd")]
    crate::backend::etcd::EtcdLease,
    AnyLease::Etcd
);
lease_in!(
    #[cfg(feature = "zookeeper")]
    crate::backend::zookeeper::ZookeeperLease,
    AnyLease::Zookeeper
);
lease_in!(AnyLease, AnyMutexLease::Any);
lease_in!(
    #[cfg(feature = "redis")]
    TokenLease,
    AnyMutexLease::Redlock
);
lease_in!(
    #[cfg(feature = "postgres")]
    crate::backend::ConnectionLease<sqlx::Postgres>,
    AnyMutexLease::Advisory
);
lease_in!(
    #[cfg(feature = "mysql")]
    crate::backend::ConnectionLease<sqlx::MySql>,
    AnyMutexLease::Nowait
);

/// `attempt` with its grant's lease wrapped.
pub(super) fn wrapped<L: LeaseIn<O>, O>(attempt: Attempt<Granted<L>>) -> Attempt<Granted<O>> {
    match attempt {
        Attempt::Acquired(granted) => Attempt::Acquired(grant(granted)),
        Attempt::Busy { holder_ttl } => Attempt::Busy { holder_ttl },
    }
}

/// `attempt` with each grant's lease wrapped.
pub(super) fn all_wrapped<L: LeaseIn<O>, O>(
    attempt: Attempt<Vec<Granted<L>>>,
) -> Attempt<Vec<Granted<O>>> {
    match attempt {
        Attempt::Acquired(grants) => Attempt::Acquired(grants.into_iter().map(grant).collect()),
        Attempt::Busy { holder_ttl } => Attempt::Busy { holder_ttl },
    }
}

/// `attempt` with its lease, or its handover's, wrapped.
pub(super) fn queued_wrapped<L: LeaseIn<O>, O>(attempt: QueuedAttempt<L>) -> QueuedAttempt<O> {
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

fn grant<L: LeaseIn<O>, O>(granted: Granted<L>) -> Granted<O> {
    Granted {
        lease: granted.lease.wrap(),
        fence: granted.fence,
    }
}
