//! The lock engine: taking, waiting for, keeping and releasing locks, with no HTTP in sight.
//!
//! [`Locker`] is its face: built on a backend with settings ([`LockerBuilder`]), it takes a
//! lock under the busy policy (reject, wait woken by release announcements, fair, polling),
//! keeps its lease while the work runs, reports its loss and releases it. The HTTP layer is an
//! adapter over it; background jobs and queue consumers use it directly.
//!
//! The engine depends on the backend contract ([`crate::backend`]) and nothing above it.

mod acquire;
mod error;
mod guard;
mod held;
mod key_error;
mod line;
mod locker;
mod names;
pub(crate) mod observer;
mod operator;
mod policy;
mod reentry;
mod settings;
pub mod telemetry;
#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) use acquire::HEAD_TICKET_TTL;
#[cfg(any(test, feature = "conformance"))]
pub(crate) use acquire::SHARED_REFRESH;
pub use error::LockError;
pub use guard::LockGuard;
pub use held::HeldLock;
pub use held::LeaseLost;
pub use key_error::KeyError;
pub use locker::Locker;
pub(crate) use policy::BusyPolicy;
pub use policy::OnLost;
pub use settings::{ConfigError, LockerBuilder};
