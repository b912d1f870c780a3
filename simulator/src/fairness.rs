//! Fair waiters and the order the store served them in: every ticket a fair waiter took (its
//! first ask the store applied), when each gave up, and (from the oracle) when the store
//! first held the lock for each — granted at its ask, or handed over at a release. The check:
//! a fair waiter is served before every waiter that came after it, unless a fault struck its
//! process or its calls about the lock while it waited (a call that failed, a pause, a stall),
//! or its wait ended first.

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
    /// the earlier one's process or its calls about the lock meanwhile (`struck(pid, name,
    /// (from, until))`), described with times since `epoch`; `served(name, token)`: when the
    /// store first held the lock for a ticket, if it did.
    pub(crate) fn overtaken(
        &self,
        served: impl Fn(&str, OwnerToken) -> Option<Instant>,
        struck: impl Fn(u64, &str, (Instant, Instant)) -> bool,
        epoch: Instant,
    ) -> Vec<String> {
        let waiters = lock(&self.0);
        let ms = |at: Instant| (at - epoch).as_secs_f64() * 1e3;
        // Each waiter: its name, pid, arrival, when the store served it and until when it waited.
        let waiters: Vec<(&str, u64, Instant, Option<Instant>, Instant)> = (waiters.iter())
            .map(|((name, token), waiter)| {
                let served = served(name, *token);
                let until = (served.into_iter())
                    .chain(waiter.left)
                    .fold(waiter.deadline, Instant::min);
                (name.as_str(), waiter.pid, waiter.arrived, served, until)
            })
            .collect();
        let mut found = Vec::new();
        for &(name, pid, arrived, served, _) in &waiters {
            let Some(served) = served else { continue };
            let overtaken = (waiters.iter()).filter(|&&(earlier, earlier_pid, came, _, until)| {
                earlier == name
                    && came < arrived
                    && until > served
                    && !struck(earlier_pid, name, (came, served))
            });
            found.extend(overtaken.map(|&(_, earlier_pid, came, _, until)| {
                format!(
                    "{name}: p{pid}'s fair waiter, come at {:.3} ms, was served at {:.3} ms while \
                     p{earlier_pid}'s, come at {:.3} ms, still waited (until {:.3} ms), no fault \
                     having struck it",
                    ms(arrived),
                    ms(served),
                    ms(came),
                    ms(until),
                )
            }));
        }
        found
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
