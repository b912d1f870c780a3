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
///
/// # What a waiting caller is told
///
/// A caller that asks for a busy lock ends with the lock, or with one of two answers that
/// never stand for each other:
///
/// * [`Busy`](Self::Busy) — a store said the lock is held: to the caller itself (at once with
///   `reject()`, or at the end of its wait, when it asks once more), to the task of its locker
///   that asked for it while the caller waited behind that task (the store said so within the
///   store timeout before the wait ran out), or the lock is held by another task of the same
///   locker, its lease not run out. A caller whose wait runs out while nobody heard from the
///   store for longer than the store timeout asks the store itself before it answers.
/// * [`StoreUnavailable`](Self::StoreUnavailable) — the store failed, or did not answer within
///   the store timeout: for the caller's own attempt, or for the attempt of the task of its
///   locker it was waiting behind. Every task waiting behind a failed attempt is told at once,
///   with the same error, instead of asking the store in turn; a task that comes later asks
///   for itself. A store that refuses connections is answered at once where its client says so
///   (and, for the SQL stores and ZooKeeper, whose clients would wait to reconnect, once a
///   direct connection to the store is refused); a silent one after the store timeout. A store
///   that stops answering while a task sleeps until a release is noticed at that task's next
///   attempt: when it is woken, when the holder's lease is due to end, or when its wait ends.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// A store said somebody else holds the lock (at once with `reject()`, or after the wait
    /// timed out); never an answer for a store that could not be asked.
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
    /// The lock store failed or did not answer within the store timeout — for this caller's
    /// attempt, or for the attempt it waited behind in its locker's line.
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
