//! Locks against real stores while everything works: exclusion across processes, waiting and
//! handing over, busy answers, lock shapes, bad keys, and what each acquisition costs in round
//! trips; and over TLS.

mod bad_keys;
mod busy_policy;
mod consensus_waiting;
mod handover;
mod mutual_exclusion;
mod round_trips;
mod shapes;
mod tls;
mod waiting;
mod zookeeper_permits;
mod zookeeper_writers;
