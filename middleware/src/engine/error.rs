//! Why a lock was not taken, or not kept.

use std::time::Duration;

use super::KeyError;
use crate::backend::{BackendError, Hold};

/// Why a lock was not taken, or not kept.
///
/// Through the layer each becomes an RFC 9457 `application/problem+json` answer
/// ([`Rejection`](crate::Rejection)); its `Display` is what the answer's detail says,
/// and never contains store addresses or internal errors (a [`BackendError`] is its
/// [`source`](std::error::Error::source), for logs).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Somebody else holds the lock (at once with `reject()`, or after the wait timed out).
    #[error("lock `{key}` is held by another request")]
    Busy {
        /// The key that was busy (several keys joined with `, `).
        key: String,
        /// The holder's remaining lease, when the store reported it.
        holder_ttl: Option<Duration>,
        /// How long this process's locks are typically held (a moving average), once it has
        /// released one.
        typical_hold: Option<Duration>,
    },
    /// The key cannot name a lock.
    #[error(transparent)]
    InvalidKey(#[from] KeyError),
    /// The lock store did not answer, or not within the store timeout.
    #[error("the lock store is unavailable")]
    StoreUnavailable(#[source] BackendError),
    /// The lease was lost while the work ran, and the work was stopped (`OnLost::Abort`).
    #[error("the lock on `{key}` was lost while the request ran; it was stopped")]
    LeaseLost {
        /// The key whose lock was lost.
        key: String,
    },
    /// The caller already holds this key in a way that does not cover what it asks for now
    /// (it holds a read lock and asks to write): waiting would mean waiting for itself.
    #[error(
        "lock `{key}` is already held by this task as {held}; it cannot also take it as \
         {wanted} (upgrades would wait for themselves)"
    )]
    Upgrade {
        /// The key.
        key: String,
        /// What the caller holds.
        held: Hold,
        /// What it asked for.
        wanted: Hold,
    },
    /// The caller holds some of the keys it asks for and not others: taking more keys while
    /// holding some can deadlock, so all of them must be taken at once.
    #[error(
        "this task holds lock `{held}` and asks for `{wanted}` too; taking more keys while \
         holding some can deadlock: take them all at once"
    )]
    MoreKeys {
        /// The keys the caller holds, among those it asked for.
        held: String,
        /// Every key it asked for.
        wanted: String,
    },
}
