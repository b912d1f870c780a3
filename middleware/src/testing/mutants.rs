//! Bugs that were found and fixed, compiled back in (feature `simulation`, the simulator's) and
//! switched on one at a time, by name, on the thread that runs a simulation: the simulator
//! shows that it finds each of them (`scripts/simulate --mutant NAME`).

use std::cell::Cell;

/// Every mutant: its name, and the bug it brings back.
pub const MUTANTS: &[(&str, &str)] = &[
    (
        "abandon-one-by-one",
        "an attempt on several keys abandons them one after another, so one store call that \
         hangs keeps the next key taken — for as long as a session lives (etcd: 34–41 s)",
    ),
    (
        "checker-blames-the-told",
        "the history checker blames the first of two overlapping holders, though only the \
         other was told it had lost the lock (it blamed an innocent reader)",
    ),
    (
        "fair-refresh-by-ticket",
        "a fair waiter asks again every third of its ticket's TTL only, so a lock the store \
         handed it, whose announcement was lost, lapses first, and a waiter that came later \
         is served before it",
    ),
    (
        "lease-from-answer",
        "a lease is counted from the store's answer rather than from its request, so a slow \
         answer leaves the holder believing in a lease the store has let go",
    ),
    (
        "handed-lease-restarts",
        "a lock handed on within a process gets a lease of its own from the hand-on, past \
         the run's lease in the store",
    ),
    (
        "shared-release-ignores-owner",
        "the memory store's release of a shared hold that is gone drops another holder's",
    ),
    (
        "renewals-not-acknowledged",
        "a store that replicates answers a renewal before its replica has it, as the Redis \
         backend's `replica_acks` did: a failover forgets the renewal, and the lease ends \
         sooner than its holder counts on (the simulated store's replication)",
    ),
    (
        "no-replica-acks",
        "a store that replicates answers a grant before its replica has it, as Redis with \
         replicas does without `replica_acks`: a failover forgets the grant, and grants the \
         lock to another holder (the simulated store's replication)",
    ),
];

thread_local! {
    static ACTIVE: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// Switches mutant `name` on for this thread (none: `None`); `false` when no mutant has that
/// name.
pub fn switch_on(name: Option<&str>) -> bool {
    let Some(name) = name else {
        ACTIVE.with(|active| active.set(None));
        return true;
    };
    let Some(&(known, _)) = MUTANTS.iter().find(|(known, _)| *known == name) else {
        return false;
    };
    ACTIVE.with(|active| active.set(Some(known)));
    true
}

/// Whether mutant `name` is switched on for this thread: for the library's own mutants, and for
/// those a simulated store carries in its model of a real store (the simulator's replication).
pub fn active(name: &str) -> bool {
    ACTIVE.with(|active| active.get() == Some(name))
}
