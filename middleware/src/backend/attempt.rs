//! What a backend answers to an attempt: the lock granted with its lease and fencing token, or
//! busy.

use std::fmt;
use std::time::Duration;

use crate::token::OwnerToken;

use super::Hold;

/// A fencing token: strictly larger than every token issued earlier for the same lock name.
/// Tokens need not be consecutive (one counter may serve many names).
///
/// A store that remembers the largest token that has read a resource, and refuses writes
/// carrying a smaller one, cannot be written by a holder whose lease ran out while it was
/// paused (see [`fencing`](crate::fencing)).
///
/// # Example
///
/// ```
/// use tower_lock::FencingToken;
///
/// let (earlier, later) = (FencingToken::new(7), FencingToken::new(12));
/// assert!(earlier < later);
/// assert_eq!(later.get(), 12);
/// assert_eq!(later.to_string(), "12");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// The token `value`, as a backend issued it.
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The token as a number, to send to the store that checks it.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl From<FencingToken> for u64 {
    fn from(token: FencingToken) -> Self {
        token.0
    }
}

/// A lock granted to an attempt.
#[derive(Debug)]
pub struct Granted<L> {
    /// The backend's handle of this acquisition, given back to it to extend and release.
    pub lease: L,
    /// The fencing token, when the backend issues one for this kind of hold (exclusive holds,
    /// on backends that fence).
    pub fence: Option<FencingToken>,
}

/// The answer to an attempt: `T` when the lock was taken, or busy.
#[derive(Debug)]
#[must_use]
pub enum Attempt<T> {
    /// The lock is the caller's.
    Acquired(T),
    /// Somebody else holds it (for several names: at least one, and none was taken).
    Busy {
        /// How long until the holder's lease runs out, when the store knows it: the longest
        /// a waiter needs to sleep before the lock is certainly free or renewed.
        holder_ttl: Option<Duration>,
    },
}

/// The lease of stores that know a holder by its owner token (Redis, memory, SQL rows): the
/// token, the kind of hold it took, which decides how it is extended and released, and the
/// fence it was granted and its holder's label (which a store may record with its first
/// renewal, where the grant could not).
///
/// # Example
///
/// ```
/// use tower_lock::Hold;
/// use tower_lock::backend::{OwnerToken, TokenLease};
///
/// let token = OwnerToken::new();
/// let lease = TokenLease::new(token, Hold::Mutex);
/// assert_eq!((lease.token(), lease.hold()), (token, Hold::Mutex));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenLease {
    token: OwnerToken,
    hold: Hold,
    fence: Option<FencingToken>,
    label: Option<&'static str>,
}

impl TokenLease {
    /// The lease `token` holds as `hold`.
    pub fn new(token: OwnerToken, hold: Hold) -> Self {
        Self {
            token,
            hold,
            fence: None,
            label: None,
        }
    }

    /// The same lease, granted with `fence`.
    pub fn fenced(self, fence: Option<FencingToken>) -> Self {
        Self { fence, ..self }
    }

    /// The same lease, held by the locker labelled `label` (its request's `holder`).
    pub fn labelled(self, label: &'static str) -> Self {
        let label = Some(label);
        Self { label, ..self }
    }

    /// Its holder's label, if the store was told.
    pub fn label(&self) -> Option<&'static str> {
        self.label
    }

    /// The fence it was granted with, if the store said.
    pub fn fence(&self) -> Option<FencingToken> {
        self.fence
    }

    /// The holder's owner token.
    pub fn token(&self) -> OwnerToken {
        self.token
    }

    /// The kind of hold.
    pub fn hold(&self) -> Hold {
        self.hold
    }
}
