//! [`Ask`]: what a lock is asked for as.
//!
//! Shapes are capabilities of the backend's type ([`SharedLocks`], [`Semaphores`]): an [`Ask`]
//! for one can only be made where the backend is known to have it, and it records the
//! backend's method then, so that code generic over any [`LockBackend`] (the acquire loop, the
//! layer) can call it later without the bound.

use std::num::NonZeroU32;

use futures_util::future::BoxFuture;

use super::{
    Attempt, BackendError, Granted, Hold, LockBackend, LockRequest, Semaphores, SharedLocks,
};

/// What one attempt answers.
type AttemptResult<L> = Result<Attempt<Granted<L>>, BackendError>;

type Shaped<B> = for<'a> fn(
    &'a B,
    &'a str,
    LockRequest,
) -> BoxFuture<'a, AttemptResult<<B as LockBackend>::Lease>>;

type PermitOf<B> = for<'a> fn(
    &'a B,
    &'a str,
    LockRequest,
    NonZeroU32,
) -> BoxFuture<'a, AttemptResult<<B as LockBackend>::Lease>>;

/// What a lock is asked for as: a mutex, a read or write hold, or a permit — checked against
/// the backend when it is made, so that it can only ask for what the backend keeps.
///
/// [`Locker::lock`](crate::Locker::lock) and its siblings make it for you; an adapter that
/// chooses per message (the HTTP layer reads with GET and writes with the rest) makes one of
/// each and hands the chosen one to [`Locker::acquire`](crate::Locker::acquire).
///
/// # Example
///
/// ```
/// use tower_lock::{Ask, Hold, MemoryBackend};
///
/// // Read-write holds compile only for a backend that keeps read-write locks.
/// let (read, write) = (Ask::<MemoryBackend>::read(), Ask::<MemoryBackend>::write());
/// assert_eq!((read.hold(), write.hold()), (Hold::Read, Hold::Write));
/// ```
pub struct Ask<B: LockBackend> {
    method: Method<B>,
}

/// The backend's method an [`Ask`] calls.
enum Method<B: LockBackend> {
    /// [`LockBackend::acquire`].
    Mutex,
    /// [`SharedLocks::acquire_read`].
    Read(Shaped<B>),
    /// [`SharedLocks::acquire_write`].
    Write(Shaped<B>),
    /// [`Semaphores::acquire_permit`].
    Permit(PermitOf<B>, NonZeroU32),
}

impl<B: LockBackend> Clone for Ask<B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: LockBackend> Copy for Ask<B> {}

impl<B: LockBackend> Clone for Method<B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: LockBackend> Copy for Method<B> {}

impl<B: LockBackend> std::fmt::Debug for Ask<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.hold(), f)
    }
}

impl<B: LockBackend> Ask<B> {
    /// The key alone: every backend keeps mutexes. Several keys are always taken this way.
    pub fn mutex() -> Self {
        Self {
            method: Method::Mutex,
        }
    }

    /// The hold this asks for.
    pub fn hold(&self) -> Hold {
        match self.method {
            Method::Mutex => Hold::Mutex,
            Method::Read(_) => Hold::Read,
            Method::Write(_) => Hold::Write,
            Method::Permit(_, permits) => Hold::Permit { permits },
        }
    }

    /// Asks `backend` for lock `name` once.
    pub(crate) async fn attempt(
        &self,
        backend: &B,
        name: &str,
        request: LockRequest,
    ) -> AttemptResult<B::Lease> {
        match self.method {
            Method::Mutex => backend.acquire(name, request).await,
            Method::Read(acquire) | Method::Write(acquire) => acquire(backend, name, request).await,
            Method::Permit(acquire, permits) => acquire(backend, name, request, permits).await,
        }
    }
}

impl<B: SharedLocks> Ask<B> {
    /// A read hold: shared with other readers, excluded by a writer.
    pub fn read() -> Self {
        Self {
            method: Method::Read(read::<B>),
        }
    }

    /// The write hold: alone, readers included.
    pub fn write() -> Self {
        Self {
            method: Method::Write(write::<B>),
        }
    }
}

impl<B: Semaphores> Ask<B> {
    /// One of `permits` permits.
    pub fn permit(permits: NonZeroU32) -> Self {
        Self {
            method: Method::Permit(permit::<B>, permits),
        }
    }
}

fn read<'a, B: SharedLocks>(
    backend: &'a B,
    name: &'a str,
    request: LockRequest,
) -> BoxFuture<'a, AttemptResult<B::Lease>> {
    Box::pin(backend.acquire_read(name, request))
}

fn write<'a, B: SharedLocks>(
    backend: &'a B,
    name: &'a str,
    request: LockRequest,
) -> BoxFuture<'a, AttemptResult<B::Lease>> {
    Box::pin(backend.acquire_write(name, request))
}

fn permit<'a, B: Semaphores>(
    backend: &'a B,
    name: &'a str,
    request: LockRequest,
    permits: NonZeroU32,
) -> BoxFuture<'a, AttemptResult<B::Lease>> {
    Box::pin(backend.acquire_permit(name, request, permits))
}
