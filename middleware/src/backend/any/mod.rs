//! The lock store chosen at run time, from a URL: `LOCK_STORE=redis://…` in one deployment,
//! `etcd://…` in another, the same code in both.
//!
//! [`AnyBackend::connect`] reads the URL (the table of schemes is there); [`AnyBackend`] is a
//! [`LockBackend`](super::LockBackend) with every lock shape, [`AnyLease`] its lease.
//! [`AnyMutexBackend`] takes every store, the mutex-only ones too (RedLock, advisory locks,
//! `NOWAIT`), and has mutexes only: the type says which shapes the locker can ask for, so a
//! store is never asked for one it lacks. A backend you configured yourself becomes one with
//! `AnyBackend::from(backend)`. The statically typed
//! backends stay the cheapest way to one store chosen in code; an `AnyBackend` adds one
//! `match` and one allocation per store call: each store's future is boxed, since an unboxed
//! `match` over them all would be as large as the largest (9 KiB against a Redis acquire's
//! 1 KiB), and every lock's future would carry it.

mod inspection;
mod lease;
mod mutex_store;
#[cfg(feature = "redis")]
mod redis_address;
mod store;
#[cfg(test)]
mod tests;
mod url;
mod url_parts;

pub use lease::{AnyLease, AnyMutexLease};
pub use mutex_store::AnyMutexBackend;
pub use store::AnyBackend;
pub use url::StoreUrlError;
