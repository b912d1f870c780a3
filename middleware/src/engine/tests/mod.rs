//! The engine through its public face, [`Locker`](crate::Locker), on the memory backend (and
//! wrappers that make it fail on purpose), mostly in paused time.

use std::time::Duration;

use crate::backend::LockBackend;
use crate::{Locker, LockerBuilder};

mod adapters;
mod beyond_the_mutex;
mod handles;
mod outage;
mod reentry;
mod telemetry;
mod waiting;

const TTL: Duration = Duration::from_secs(30);

/// A locker on `backend`, configured.
fn locker<B: LockBackend>(
    backend: B,
    configure: impl FnOnce(LockerBuilder<B>) -> LockerBuilder<B>,
) -> Locker<B> {
    configure(Locker::builder(backend)).build().unwrap()
}
