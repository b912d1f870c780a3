//! A deterministic simulation of tower-lock: many processes, each a real [`Locker`] with its
//! own line and its own recorded history, sharing one simulated store through links that
//! delay, refuse, lose and never answer calls; processes paused past their leases, killed and
//! started again; leases of both kinds (a TTL, or a session's); a store that fails over to a
//! replica that had not caught up. All on one thread, on Tokio's
//! paused clock, every random choice drawn from one seed: a run is a function of its seed,
//! and a seed that finds a violation finds it again.
//!
//! [`Locker`]: tower_lock::Locker

mod caller;
mod check;
mod delivery;
mod fairness;
mod link;
mod oracle;
mod plan;
mod register;
mod replication;
mod store;
mod workload;
mod world;

pub use check::Outcome;
pub use world::{simulate, simulate_quietly};
