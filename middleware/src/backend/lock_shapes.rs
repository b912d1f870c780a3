//! Lock shapes beyond the mutex, as capabilities: a backend that can keep read-write locks
//! implements [`SharedLocks`], one that can keep semaphores [`Semaphores`]. Asking a locker or
//! layer for a shape its backend lacks does not compile.

use std::fmt;
use std::future::Future;
use std::num::NonZeroU32;
use std::time::Duration;

use super::{Attempt, BackendError, Granted, LockBackend, LockRequest};

/// How long a waiter's mark on a read-write lock lives unless its waiter asks again: a writer's
/// intent, a reader's claim on the next turn.
pub(crate) const WAITER_MARK_TTL: Duration = Duration::from_secs(2);

/// What kind of hold a lock is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Hold {
    /// The only holder of a mutex (also of several names locked together). A [`Write`](Self::Write)
    /// hold is just as exclusive, but on a read-write lock.
    Mutex,
    /// One of any number of readers of a read-write lock.
    Read,
    /// The writer of a read-write lock: the only holder, readers included.
    Write,
    /// One of at most `permits` holders of a semaphore.
    Permit {
        /// How many holders the semaphore admits at once.
        permits: NonZeroU32,
    },
}

impl Hold {
    /// Whether the holder is alone on the lock (mutex or writer): only then are fencing tokens
    /// issued.
    pub fn is_exclusive(self) -> bool {
        matches!(self, Hold::Mutex | Hold::Write)
    }

    /// Whether holding `self` already grants `wanted` on the same lock: an exclusive hold
    /// covers a read, a read covers only a read, a permit only a permit of the same semaphore.
    pub fn covers(self, wanted: Hold) -> bool {
        match (self, wanted) {
            (Hold::Mutex | Hold::Write, Hold::Mutex | Hold::Write | Hold::Read) => true,
            (Hold::Read, Hold::Read) => true,
            (Hold::Permit { permits }, Hold::Permit { permits: wanted }) => permits == wanted,
            _ => false,
        }
    }
}

impl fmt::Display for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Hold::Mutex => f.write_str("a mutex"),
            Hold::Read => f.write_str("a read lock"),
            Hold::Write => f.write_str("a write lock"),
            Hold::Permit { permits } => write!(f, "a permit of {permits}"),
        }
    }
}

/// Read-write locks: readers share a name, a writer holds it alone.
///
/// The rules, which the conformance suite checks:
///
/// * A reader is excluded by a writer and by an exclusive lock ([`LockBackend::acquire`],
///   [`acquire_many`](LockBackend::acquire_many)) on the same name, and excludes both.
/// * A writer that finds the lock busy and will wait ([`Patience::Polls`] or
///   [`Listens`](super::Patience::Listens)) queues its intent, which bars new readers, so that
///   a stream of readers cannot starve it; the intent lapses after a short time unless the
///   writer asks again, and [`abandon`](LockBackend::abandon) withdraws it at once. A writer
///   that asks once ([`Patience::Once`]) leaves nothing behind.
/// * Each reader's lease expires on its own; a writer is fenced like a mutex, a reader is not.
///
/// [`Patience::Polls`]: super::Patience::Polls
/// [`Patience::Once`]: super::Patience::Once
pub trait SharedLocks: LockBackend {
    /// Takes a read hold on `name` if no writer holds or waits for it.
    fn acquire_read(
        &self,
        name: &str,
        request: LockRequest,
    ) -> impl Future<Output = Result<Attempt<Granted<Self::Lease>>, BackendError>> + Send;

    /// Takes the write hold on `name` if nobody holds it; see the rules above when busy.
    fn acquire_write(
        &self,
        name: &str,
        request: LockRequest,
    ) -> impl Future<Output = Result<Attempt<Granted<Self::Lease>>, BackendError>> + Send;
}

/// Semaphores: at most `permits` holders per name, each with its own lease, so a crashed
/// holder's permit comes back after its TTL. Permits are not fenced.
pub trait Semaphores: LockBackend {
    /// Takes one of the `permits` permits of `name`, if one is free.
    fn acquire_permit(
        &self,
        name: &str,
        request: LockRequest,
        permits: NonZeroU32,
    ) -> impl Future<Output = Result<Attempt<Granted<Self::Lease>>, BackendError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exclusive_hold_covers_reads_but_a_read_covers_no_upgrade() {
        assert!(Hold::Mutex.covers(Hold::Read));
        assert!(Hold::Write.covers(Hold::Mutex));
        assert!(Hold::Read.covers(Hold::Read));
        assert!(!Hold::Read.covers(Hold::Write));
        assert!(!Hold::Read.covers(Hold::Mutex));
    }

    #[test]
    fn a_permit_covers_only_a_permit_of_the_same_semaphore() {
        let permits = |n| Hold::Permit {
            permits: NonZeroU32::new(n).unwrap(),
        };
        assert!(permits(2).covers(permits(2)));
        assert!(!permits(2).covers(permits(3)));
        assert!(!permits(2).covers(Hold::Read));
        assert!(!Hold::Mutex.covers(permits(2)));
    }
}
