//! Tools for tests and benchmarks (feature `test-util`): not part of the default API.

mod counting;
pub mod history;

pub use counting::{Availability, CallCounts, CountingBackend};
