//! The term of the one session that keeps every lock of a process — etcd's lease, ZooKeeper's
//! session: which session, and until when it is certainly alive, as its keeper last confirmed
//! it. A lock is vouched for as far as its session is.

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

/// A session as last confirmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend) struct Term {
    /// The session's id, which locks are bound to: etcd's lease id, ZooKeeper's session id.
    pub(in crate::backend) session: i64,
    /// Until when the store certainly keeps it.
    pub(in crate::backend) until: Instant,
}

/// A session's terms as its keeper confirms them, and the keeper's call to renew at once.
#[derive(Debug)]
pub(in crate::backend) struct Terms {
    current: watch::Sender<Term>,
    renew_now: Notify,
}

impl Terms {
    /// The terms of a session started with `first`.
    pub(in crate::backend) fn new(first: Term) -> Self {
        Self {
            current: watch::Sender::new(first),
            renew_now: Notify::new(),
        }
    }

    /// The term last confirmed.
    pub(in crate::backend) fn current(&self) -> Term {
        *self.current.borrow()
    }

    /// The keeper confirmed `term` (a renewal, or a new session after one expired).
    pub(in crate::backend) fn confirm(&self, term: Term) {
        self.current.send_replace(term);
    }

    /// The session once it is confirmed alive until `until` or later, asking the keeper to
    /// renew at once while it is not yet. Waits as long as the store does not answer (callers
    /// bound it by their store timeout); a session that expired meanwhile is answered with its
    /// successor.
    pub(in crate::backend) async fn vouch(&self, until: Instant) -> Term {
        let mut terms = self.current.subscribe();
        loop {
            let term = *terms.borrow_and_update();
            if term.until >= until {
                return term;
            }
            self.renew_now();
            if terms.changed().await.is_err() {
                // The sender lives in `self`: it cannot have been dropped.
                return term;
            }
        }
    }

    /// Asks the keeper to renew at once.
    pub(in crate::backend) fn renew_now(&self) {
        self.renew_now.notify_one();
    }

    /// Resolves when the keeper is asked to renew at once (a call made while it was not
    /// listening counts).
    pub(in crate::backend) async fn renewal_asked(&self) {
        self.renew_now.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn vouching_past_the_term_asks_for_a_renewal_and_waits_for_it() {
        let now = Instant::now();
        let terms = Terms::new(Term {
            session: 7,
            until: now,
        });
        let wanted = now + Duration::from_secs(1);
        let keeper = async {
            terms.renewal_asked().await;
            terms.confirm(Term {
                session: 7,
                until: wanted,
            });
        };
        let (vouched, ()) = tokio::join!(terms.vouch(wanted), keeper);
        assert_eq!(vouched.until, wanted);
    }

    #[tokio::test]
    async fn a_term_far_enough_ahead_is_vouched_for_at_once() {
        let until = Instant::now() + Duration::from_secs(5);
        let terms = Terms::new(Term { session: 7, until });
        assert_eq!(terms.vouch(until).await, terms.current());
    }
}
