//! Fair waiters and the order the store served them in: every ticket a fair waiter took (its
//! first ask the store applied), whom the store granted the lock, when each gave up. The check:
//! a fair waiter is served before every waiter that came after it, unless a fault struck its
//! process while it waited (a call that failed, a pause, a stall, an announcement lost or late
//! on its way to it), or its wait ended first.

use std::sync::{Arc, Mutex};

use tokio::time::Instant;
use tower_lock::backend::OwnerToken;

/// Every fair waiter of a run.
#[derive(Clone, Debug, Default)]
pub(crate) struct Waiters(Arc<Mutex<Vec<Waiter>>>);

#[derive(Debug)]
struct Waiter {
    name: String,
    token: OwnerToken,
    pid: u64,
    /// When the store first saw its ticket.
    arrived: Instant,
    /// When its wait ends.
    deadline: Instant,
    served: Option<Instant>,
    /// When the store withdrew its ticket.
    left: Option<Instant>,
}

impl Waiter {
    /// Until when it waited.
    fn waited_until(&self) -> Instant {
        (self.served.into_iter())
            .chain(self.left)
            .fold(self.deadline, Instant::min)
    }
}

impl Waiters {
    /// The store applied an ask of `token`'s ticket for `name`, by process `pid` whose wait
    /// ends at `deadline`: `served`, the lock is the ticket's now.
    pub(crate) fn asked(
        &self,
        (name, token): (&str, OwnerToken),
        (pid, deadline): (u64, Instant),
        served: bool,
    ) {
        let now = Instant::now();
        let mut waiters = lock(&self.0);
        let waiter =
            (waiters.iter_mut()).find(|waiter| waiter.token == token && waiter.name == name);
        match waiter {
            Some(waiter) => {
                if served {
                    waiter.served.get_or_insert(now);
                }
            }
            None => waiters.push(Waiter {
                name: name.to_owned(),
                token,
                pid,
                arrived: now,
                deadline,
                served: served.then_some(now),
                left: None,
            }),
        }
    }

    /// The store withdrew `token`'s ticket for `name`.
    pub(crate) fn left(&self, name: &str, token: OwnerToken) {
        let now = Instant::now();
        let mut waiters = lock(&self.0);
        let waiter =
            (waiters.iter_mut()).find(|waiter| waiter.token == token && waiter.name == name);
        if let Some(waiter) = waiter {
            waiter.left.get_or_insert(now);
        }
    }

    /// Every waiter served while one that came before it still waited, no fault having struck
    /// the earlier one's process or its calls about the lock meanwhile (`struck(pid, name,
    /// (from, until))`), described with times
    /// since `epoch`.
    pub(crate) fn overtaken(
        &self,
        struck: impl Fn(u64, &str, (Instant, Instant)) -> bool,
        epoch: Instant,
    ) -> Vec<String> {
        let waiters = lock(&self.0);
        let ms = |at: Instant| (at - epoch).as_secs_f64() * 1e3;
        let mut found = Vec::new();
        for later in waiters.iter() {
            let Some(served) = later.served else { continue };
            let overtaken = (waiters.iter()).filter(|earlier| {
                earlier.name == later.name
                    && earlier.arrived < later.arrived
                    && earlier.waited_until() > served
                    && !struck(earlier.pid, &earlier.name, (earlier.arrived, served))
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
                    ms(earlier.waited_until()),
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
