//! Waiters with a ticket in the store's queue (fair mode's, and the head of a notified
//! process's line) and the order they were served in: every ticket (its first ask the store
//! applied), when each gave up, and when each first held the lock (its holder's grant, under a
//! fence the store issued to the ticket). The check:
//! a fair waiter is served before every waiter that came after it, unless a fault struck its
//! process (a pause, a stall) or one of its calls about its ticket while it waited, or the
//! store's replication struck its lock meanwhile (a failover may forget a ticket, or a grant a
//! release handed one; a grant the replica did not acknowledge in time is given back, and
//! handed on), or its wait ended first. A lost or late announcement is no excuse: a waiter asks again within a third of
//! its TTL, before a lock handed to its ticket lapses.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::time::Instant;
use tower_lock::backend::OwnerToken;

/// Every fair waiter of a run, by lock name and owner token.
#[derive(Clone, Debug, Default)]
pub(crate) struct Waiters(Arc<Mutex<BTreeMap<(String, OwnerToken), Waiter>>>);

#[derive(Debug)]
struct Waiter {
    pid: u64,
    /// When the store first saw its ticket.
    arrived: Instant,
    /// When its wait ends.
    deadline: Instant,
    /// When the store withdrew its ticket.
    left: Option<Instant>,
}

impl Waiters {
    /// The store applied an ask of `token`'s ticket for `name`, by process `pid` whose wait
    /// ends at `deadline`.
    pub(crate) fn asked(&self, (name, token): (&str, OwnerToken), (pid, deadline): (u64, Instant)) {
        let waiter = Waiter {
            pid,
            arrived: Instant::now(),
            deadline,
            left: None,
        };
        (lock(&self.0))
            .entry((name.to_owned(), token))
            .or_insert(waiter);
    }

    /// The store withdrew `token`'s ticket for `name`.
    pub(crate) fn left(&self, name: &str, token: OwnerToken) {
        if let Some(waiter) = lock(&self.0).get_mut(&(name.to_owned(), token)) {
            waiter.left.get_or_insert(Instant::now());
        }
    }

    /// Every waiter served while one that came before it still waited, no fault having struck
    /// the earlier one's process, its calls about its ticket or its lock meanwhile
    /// (`struck((name, pid, ticket), (from, until))`), described with times since `epoch`;
    /// `served(name, token)`: when a ticket's waiter first held the lock, if it did.
    pub(crate) fn overtaken(
        &self,
        served: impl Fn(&str, OwnerToken) -> Option<Instant>,
        struck: impl Fn((&str, u64, OwnerToken), (Instant, Instant)) -> bool,
        epoch: Instant,
    ) -> Vec<String> {
        let waiters = lock(&self.0);
        let ms = |at: Instant| (at - epoch).as_secs_f64() * 1e3;
        let waiters: Vec<Judged<'_>> = (waiters.iter())
            .map(|((name, token), waiter)| {
                let served = served(name, *token);
                let until = (served.into_iter())
                    .chain(waiter.left)
                    .fold(waiter.deadline, Instant::min);
                Judged {
                    name,
                    token: *token,
                    pid: waiter.pid,
                    arrived: waiter.arrived,
                    served,
                    until,
                }
            })
            .collect();
        let mut found = Vec::new();
        for later in &waiters {
            let Some(served) = later.served else { continue };
            let overtaken = (waiters.iter()).filter(|earlier| {
                earlier.name == later.name
                    && earlier.arrived < later.arrived
                    && earlier.until > served
                    && !struck(
                        (earlier.name, earlier.pid, earlier.token),
                        (earlier.arrived, served),
                    )
            });
            found.extend(overtaken.map(|earlier| {
                format!(
                    "{}: p{}'s fair waiter, come at {:.3} ms, was served at {:.3} ms while \
                     p{}'s, come at {:.3} ms, still waited (until {:.3} ms), no fault having \
                     struck it",
                    later.name,
                    later.pid,
                    ms(later.arrived),
                    ms(served),
                    earlier.pid,
                    ms(earlier.arrived),
                    ms(earlier.until),
                )
            }));
        }
        found
    }
}

/// A waiter, as judged: when it came, when the store served it, until when it waited.
struct Judged<'a> {
    name: &'a str,
    token: OwnerToken,
    pid: u64,
    arrived: Instant,
    served: Option<Instant>,
    until: Instant,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
