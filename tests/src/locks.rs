//! Talking to a backend directly, as another process holding locks would.

use std::time::Duration;

use tower_lock::FencingToken;
use tower_lock::backend::{
    Attempt, BackendError, Granted, LockBackend, LockRequest, OwnerToken, Patience, SharedLocks,
};

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

/// On `backend`'s read-write lock `lock:k`: a reader that waits for a writer claims the next
/// turn, so when the writer leaves, the next writer is kept out and the reader comes in.
///
/// # Panics
///
/// When any step answers otherwise, or the store fails.
pub async fn a_waiting_readers_claim_holds_the_next_writer_back<B>(backend: &B)
where
    B: SharedLocks<Lease: std::fmt::Debug>,
{
    let ttl = Duration::from_secs(30);
    let writer = granted(backend.acquire_write("lock:k", request(ttl)).await);
    let reader = request(ttl).patience(Patience::Polls);
    let reading = backend.acquire_read("lock:k", reader).await;
    assert!(matches!(reading, Ok(Attempt::Busy { .. })), "{reading:?}");
    let released = backend.release("lock:k", &writer.lease).await;
    assert!(matches!(released, Ok(true)), "{released:?}");

    let next = backend.acquire_write("lock:k", request(ttl)).await;
    assert!(
        matches!(next, Ok(Attempt::Busy { .. })),
        "the waiting reader goes first: {next:?}"
    );
    granted(backend.acquire_read("lock:k", reader).await);
}

/// On `backend`'s read-write lock `lock:w`: writers that wait keep their places in line, so
/// when the holder leaves, the writers that came later are kept out until each writer before
/// them has had its turn — not only the first waiting writer's.
///
/// # Panics
///
/// When any step answers otherwise, or the store fails.
pub async fn waiting_writers_take_turns_in_the_order_they_came<B>(backend: &B)
where
    B: SharedLocks<Lease: std::fmt::Debug>,
{
    let ttl = Duration::from_secs(30);
    let mut turn = granted(backend.acquire_write("lock:w", request(ttl)).await);
    let writers = [(); 3].map(|()| request(ttl).patience(Patience::Polls));
    for writer in writers {
        let waiting = backend.acquire_write("lock:w", writer).await;
        assert!(matches!(waiting, Ok(Attempt::Busy { .. })), "{waiting:?}");
    }
    for (place, writer) in writers.into_iter().enumerate() {
        let released = backend.release("lock:w", &turn.lease).await;
        assert!(matches!(released, Ok(true)), "{released:?}");
        for later in &writers[place + 1..] {
            let jumping = backend.acquire_write("lock:w", *later).await;
            assert!(
                matches!(jumping, Ok(Attempt::Busy { .. })),
                "writer {place} came first and goes first: {jumping:?}"
            );
        }
        turn = granted(backend.acquire_write("lock:w", writer).await);
    }
}
