//! Lock stores. A backend knows nothing about HTTP: it takes, reports and releases leases.

use std::future::Future;
use std::time::Duration;

use crate::OwnerToken;

pub mod memory;
#[cfg(feature = "redis")]
pub mod redis;

/// How long a fencing counter outlives the last acquire of its key.
///
/// Counters are refreshed on every acquire and forgotten after a day without one, so keys
/// that are never locked again do not fill the store. A holder that stalls for longer than
/// this could see a token that is not larger than an earlier one; that is out of scope.
pub const FENCE_COUNTER_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The answer to an acquire attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// The lock is ours. `fence` is strictly larger than every token issued earlier for the
    /// same key (within [`FENCE_COUNTER_TTL`] of the last acquire).
    Acquired {
        /// The fencing token of this lease.
        fence: u64,
    },
    /// Somebody else holds the lock.
    Busy {
        /// How long the holder's lease has left, when the store knows it.
        holder_ttl: Option<Duration>,
    },
}

/// The lock store could not answer (unreachable, timed out, or an unexpected reply).
///
/// Its message is for logs; it never reaches an HTTP client.
#[derive(Debug, thiserror::Error)]
#[error("lock store unavailable: {0}")]
pub struct BackendError(#[source] pub Box<dyn std::error::Error + Send + Sync>);

impl BackendError {
    /// Wraps any error of the underlying client.
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self(error.into())
    }
}

/// A store of leases: owner-checked, expiring, fenced locks.
///
/// Implementations must make each call atomic: two concurrent `acquire` calls for the same
/// key never both succeed, and `extend` and `release` act only while `token` still owns it.
/// `key` is the full lock name (prefix included); a backend may wrap it (the Redis backend
/// adds a hash tag) but must not share state between different names.
pub trait LockBackend: Send + Sync + 'static {
    /// Takes the lock for `ttl` if it is free; otherwise reports how long the holder has left.
    fn acquire(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
    ) -> impl Future<Output = Result<Acquire, BackendError>> + Send;

    /// Resets the lease of lock `key` to `ttl` from now, if `token` still owns it. Returns
    /// whether it did; `false` means the lease is lost (expired, or taken by someone else).
    fn extend(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// Deletes the lock if `token` still owns it. Returns whether it did.
    fn release(
        &self,
        key: &str,
        token: OwnerToken,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;
}
