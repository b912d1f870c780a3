//! The lock store chosen at run time, from a URL: `LOCK_STORE=redis://…` in one deployment,
//! `etcd://…` in another, the same code in both.
//!
//! [`AnyBackend::connect`] reads the URL (the table of schemes is there); [`AnyBackend`] is a
//! [`LockBackend`](super::LockBackend) with every lock shape, [`AnyLease`] its lease. A backend
//! you configured yourself becomes one with `AnyBackend::from(backend)`. The statically typed
//! backends stay the cheapest way to one store chosen in code; an `AnyBackend` adds one
//! `match` per store call.

mod lease;
mod store;
#[cfg(test)]
mod tests;
mod url;

pub use lease::AnyLease;
pub use store::AnyBackend;
pub use url::StoreUrlError;
