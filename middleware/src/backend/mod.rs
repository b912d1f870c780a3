//! Lock stores. A backend knows nothing about HTTP: it takes, reports and releases leases.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::OwnerToken;
pub use crate::waiting::WaitingRoom;
pub use counting::{CallCounts, CountingBackend};

mod counting;
pub mod memory;
#[cfg(feature = "redis")]
pub mod redis;

/// The answer to an acquire attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// The lock is ours. `fence` is strictly larger than every token issued earlier for the
    /// same key. Tokens need not be consecutive: one counter may serve many keys.
    Acquired {
        /// The fencing token of this lease (0 when the backend's fencing is switched off).
        fence: u64,
    },
    /// Somebody else holds the lock.
    Busy {
        /// How long the holder's lease has left, when the store knows it.
        holder_ttl: Option<Duration>,
    },
}

/// The answer to a multi-key acquire: all keys, or none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireMany {
    /// Every key is ours; one fencing token per key, in the order the keys were given.
    Acquired {
        /// The fencing tokens.
        fences: Vec<u64>,
    },
    /// At least one key is held by somebody else; none was taken.
    Busy {
        /// How long that holder's lease has left, when known.
        holder_ttl: Option<Duration>,
    },
}

/// What kind of hold a request takes on its lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// The only holder: a mutex.
    Exclusive,
    /// One of any number of readers. Excluded by a writer, and barred while a writer waits.
    Read,
    /// The only holder, excluding readers too: it waits for readers to leave and bars new
    /// ones meanwhile, so a stream of readers cannot starve it.
    Write,
    /// One of at most `permits` holders: a distributed semaphore.
    Permit {
        /// How many holders the key admits at once.
        permits: u32,
    },
}

impl Hold {
    /// Whether the holder is alone on the key (mutex or writer): only then are fencing tokens
    /// issued.
    pub fn is_exclusive(self) -> bool {
        matches!(self, Hold::Exclusive | Hold::Write)
    }
}

fn unsupported(hold: Hold) -> BackendError {
    BackendError::new(format!("this lock backend does not support {hold:?} holds"))
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

    /// Deletes the lock if `token` still owns it, and announces the release to waiters: to the
    /// holder of the first ticket in the key's queue (see [`acquire_fair`](Self::acquire_fair))
    /// if there is one, else to anybody. Returns whether it did.
    fn release(
        &self,
        key: &str,
        token: OwnerToken,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// Takes a hold of any kind: [`Hold::Exclusive`] is [`acquire`](Self::acquire); the
    /// others are read-write locks and semaphores. Shared holds (read, permit) have their own
    /// lease each, and report fence 0. Backends without them (the default) answer an error.
    fn acquire_hold(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
        hold: Hold,
    ) -> impl Future<Output = Result<Acquire, BackendError>> + Send {
        async move {
            match hold {
                Hold::Exclusive => self.acquire(key, token, ttl).await,
                _ => Err(unsupported(hold)),
            }
        }
    }

    /// Extends a hold taken with [`acquire_hold`](Self::acquire_hold).
    fn extend_hold(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
        hold: Hold,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send {
        async move {
            match hold {
                Hold::Exclusive | Hold::Write => self.extend(key, token, ttl).await,
                _ => Err(unsupported(hold)),
            }
        }
    }

    /// Releases a hold taken with [`acquire_hold`](Self::acquire_hold), announcing it.
    fn release_hold(
        &self,
        key: &str,
        token: OwnerToken,
        hold: Hold,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send {
        async move {
            match hold {
                Hold::Exclusive | Hold::Write => self.release(key, token).await,
                _ => Err(unsupported(hold)),
            }
        }
    }

    /// Takes every lock in `keys` (sorted, distinct) for `token`, or none of them.
    ///
    /// The default takes them one by one in the given (sorted) order and, at the first busy
    /// key, gives back those it took: no caller ever waits while holding part of a set, and
    /// everybody takes keys in the same order, so two requests over overlapping keys cannot
    /// deadlock. Backends that can take them atomically (the Redis backend on one node, the
    /// memory backend) override it.
    fn acquire_many(
        &self,
        keys: &[String],
        token: OwnerToken,
        ttl: Duration,
    ) -> impl Future<Output = Result<AcquireMany, BackendError>> + Send {
        async move {
            let mut fences = Vec::with_capacity(keys.len());
            for key in keys {
                let not_taken = match self.acquire(key, token, ttl).await {
                    Ok(Acquire::Acquired { fence }) => {
                        fences.push(fence);
                        continue;
                    }
                    Ok(Acquire::Busy { holder_ttl }) => Ok(AcquireMany::Busy { holder_ttl }),
                    Err(error) => Err(error),
                };
                for taken in &keys[..fences.len()] {
                    self.release(taken, token).await?;
                }
                return not_taken;
            }
            Ok(AcquireMany::Acquired { fences })
        }
    }

    /// Where this backend's waiters wait for release announcements. Backends without one
    /// (the default) make waiters poll with backoff.
    ///
    /// A backend that returns a room implements [`acquire_fair`](Self::acquire_fair) and
    /// [`leave_fair_queue`](Self::leave_fair_queue) (the head of each process's line of waiters
    /// holds a ticket), and promises to announce the release of every lock taken by, or found
    /// busy by, `acquire_fair`: the next waiter waits for that announcement without asking (up
    /// to a lease). A wrapper around another backend must therefore forward all three methods,
    /// or none ([`CountingBackend`] forwards all).
    fn waiting_room(&self) -> Option<&Arc<WaitingRoom>> {
        None
    }

    /// Takes the lock only if it is free and `token` is first in the key's queue of tickets (or
    /// the queue is empty); otherwise puts `token` in the queue (or refreshes its ticket for
    /// `ticket_ttl`) and reports busy, with how long to wait at most before asking again.
    /// Tickets that are not refreshed expire, so a crashed waiter blocks the queue for at most
    /// `ticket_ttl`. Fair mode's waiters all ask this way; in notified mode, the head of each
    /// process's line does, so processes take turns.
    ///
    /// A backend may hand a released lock straight to the first ticket, when the ticket
    /// outlives the lease `ttl` it asked for: the lock is then held for `token` with a `ttl`
    /// lease counted from the release, and the announcement names the ticket and its fence
    /// (the waiter holds the lock on hearing it, without asking). A ticket that asks again holding
    /// a lock handed to it gets it (with a fresh `ttl` lease and fence), so a lost announcement
    /// costs one wait, never the lock.
    fn acquire_fair(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
        ticket_ttl: Duration,
    ) -> impl Future<Output = Result<Acquire, BackendError>> + Send {
        let _ = (key, token, ttl, ticket_ttl);
        async { Err(BackendError::new("this lock backend has no fair mode")) }
    }

    /// Withdraws `token`'s ticket (the waiter gave up), waking the next ticket if
    /// the lock is free, and releasing the lock if it was handed to `token` meanwhile.
    fn leave_fair_queue(
        &self,
        key: &str,
        token: OwnerToken,
    ) -> impl Future<Output = Result<(), BackendError>> + Send {
        let _ = (key, token);
        async { Ok(()) }
    }
}
