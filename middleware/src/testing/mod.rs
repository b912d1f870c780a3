//! Tools for tests and benchmarks (feature `test-util`): not part of the default API.

mod counting;
pub mod history;
#[cfg(feature = "simulation")]
pub mod mutants;
mod seeded;
#[cfg(feature = "simulation")]
pub mod stalls;

pub use counting::{Availability, CallCounts, CountingBackend};
pub use seeded::seed_this_thread;
pub(crate) use seeded::seeded_bytes;
