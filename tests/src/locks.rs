//! Talking to a backend directly, as another process holding locks would.

use std::time::Duration;

use tower_lock::FencingToken;
use tower_lock::backend::{Attempt, BackendError, Granted, LockBackend, LockRequest, OwnerToken};

/// A request by a fresh owner token for a lease of `ttl`, asking once.
pub fn request(ttl: Duration) -> LockRequest {
    LockRequest::new(OwnerToken::new(), ttl)
}

/// The grant in `answer`.
///
/// # Panics
///
/// When the lock was busy or the store failed.
pub fn granted<L>(answer: Result<Attempt<Granted<L>>, BackendError>) -> Granted<L> {
    match answer {
        Ok(Attempt::Acquired(grant)) => grant,
        Ok(Attempt::Busy { holder_ttl }) => {
            panic!("expected the lock, it was busy ({holder_ttl:?} left)")
        }
        Err(error) => panic!("expected the lock: {error}"),
    }
}

/// Takes lock `name` in `backend` for `ttl`, as another holder would.
///
/// # Panics
///
/// When it is busy or the store fails.
pub async fn hold<B: LockBackend>(backend: &B, name: &str, ttl: Duration) -> Granted<B::Lease> {
    granted(backend.acquire(name, request(ttl)).await)
}

/// The fencing token of a grant.
///
/// # Panics
///
/// When the grant has none.
pub fn fence_of<L>(grant: &Granted<L>) -> u64 {
    grant.fence.map(FencingToken::get).expect("a fenced grant")
}
