//! What the engine asks of a backend in one attempt, and how long the answer may be trusted.

use std::time::Duration;

use tokio::time::Instant;

use crate::token::OwnerToken;

/// How the caller of an attempt waits when the lock is busy. It tells the store what to leave
/// behind for a caller that will ask again, and nothing for one that will not: public for store
/// authors, whose `acquire` reads it from [`LockRequest::patience`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Patience {
    /// The caller asks once (`reject()`, or a wait of zero): a busy answer leaves nothing in
    /// the store.
    Once,
    /// The caller will ask again on a timer: a busy writer queues its intent, which bars new
    /// readers until it lapses or is withdrawn ([`abandon`](super::LockBackend::abandon)).
    Polls,
    /// The caller will ask again when the release is announced: as [`Polls`](Self::Polls), and
    /// the store marks the lock as waited for, so that its release is announced.
    Listens,
}

/// The terms of one attempt, the same for every lock name it covers: who asks, for how long a
/// lease, and how it will wait if the lock is busy.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use tower_lock::backend::OwnerToken;
/// use tower_lock::backend::{LockRequest, Patience};
///
/// let request = LockRequest::new(OwnerToken::new(), Duration::from_secs(10)).patience(Patience::Polls);
/// assert_eq!(request.patience, Patience::Polls);
/// ```
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct LockRequest {
    /// The caller's owner token: only it may extend or release what it takes.
    pub token: OwnerToken,
    /// The lease asked for: the store frees the lock after this long unless it is extended.
    pub ttl: Duration,
    /// How the caller waits if the lock is busy.
    pub patience: Patience,
    /// Who asks: the locker's holder label, stored with the grant where the store can keep it
    /// (see [`Inspect`](super::Inspect)).
    pub holder: &'static str,
}

impl LockRequest {
    /// A request by `token` for a lease of `ttl`, from a caller that asks once.
    pub fn new(token: OwnerToken, ttl: Duration) -> Self {
        Self {
            token,
            ttl,
            patience: Patience::Once,
            holder: super::holder_label::default_label(),
        }
    }

    /// The same request from a caller that waits with `patience`.
    pub fn patience(self, patience: Patience) -> Self {
        Self { patience, ..self }
    }

    /// The same request from the holder labelled `holder`.
    pub fn holder(self, holder: &'static str) -> Self {
        Self { holder, ..self }
    }
}

/// How much earlier than the store's expiry a lease's local deadline falls: clocks drift, and
/// the store starts counting when it receives the command, not when it was sent.
pub(crate) fn drift_margin(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// Until when a lease of `ttl`, asked for (or extended) by a command sent at `sent`, is
/// certainly still held by this process's clock: `sent + ttl` less a drift margin of
/// `ttl / 100 + 2 ms`.
///
/// The engine reports a lease lost once this passes without a confirmed renewal; a backend
/// that must know its answer arrived while the lease ran (the Redis backend's fencing) checks
/// against the same instant.
pub(crate) fn lease_deadline(sent: Instant, ttl: Duration) -> Instant {
    sent + ttl.saturating_sub(drift_margin(ttl))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_falls_a_drift_margin_before_the_ttl() {
        let sent = Instant::now();
        let ttl = Duration::from_secs(10);
        assert_eq!(
            lease_deadline(sent, ttl),
            sent + Duration::from_millis(9_898)
        );
    }

    #[test]
    fn a_ttl_shorter_than_its_margin_is_no_lease_at_all() {
        let sent = Instant::now();
        assert_eq!(lease_deadline(sent, Duration::from_millis(1)), sent);
    }
}
