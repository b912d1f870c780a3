//! Owner tokens: the random value that proves who holds a lock.

use std::fmt;

use uuid::Uuid;

/// A fresh random owner token (UUID v4, 122 random bits) identifying one lock holder.
///
/// Only the holder knows its token, so only the holder can release or extend its lock;
/// a holder whose lease expired cannot delete the lock somebody else took since.
/// It is written to the store as 32 lowercase hex digits.
///
/// # Example
///
/// ```
/// use tower_lock::backend::OwnerToken;
///
/// let a = OwnerToken::new();
/// assert_ne!(a, OwnerToken::new());
/// assert_eq!(a.to_string().len(), 32);
/// assert_eq!(OwnerToken::parse(&a.to_string()), Some(a));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OwnerToken(Uuid);

impl OwnerToken {
    /// Draws a new random token (from the thread's seed, where a simulation
    /// [seeded](crate::testing::seed_this_thread) it).
    pub fn new() -> Self {
        #[cfg(any(test, feature = "test-util"))]
        if let Some(bytes) = crate::testing::seeded_bytes() {
            return Self(uuid::Builder::from_random_bytes(bytes).into_uuid());
        }
        Self(Uuid::new_v4())
    }

    /// Reads a token written by [`encode`](Self::encode) (or any UUID form); `None` if `text`
    /// is not one.
    pub fn parse(text: &str) -> Option<Self> {
        Uuid::try_parse(text).ok().map(Self)
    }

    /// The token as 32 lowercase hex digits, without allocating.
    pub fn encode<'a>(&self, buf: &'a mut [u8; 32]) -> &'a str {
        self.0.simple().encode_lower(buf)
    }
}

impl Default for OwnerToken {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.simple(), f)
    }
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerToken({self})")
    }
}
