//! How an attempt asks the backend for a lock of one shape.
//!
//! Shapes are capabilities of the backend's type ([`SharedLocks`], [`Semaphores`]): an [`Ask`]
//! for one can only be made where the backend is known to have it, and it records the
//! backend's method then, so that code generic over any [`LockBackend`] (the acquire loop, the
//! layer) can call it later without the bound.

use std::num::NonZeroU32;

use futures_util::future::BoxFuture;

use crate::backend::{
    Attempt, BackendError, Granted, Hold, LockBackend, LockRequest, Semaphores, SharedLocks,
};

/// What one attempt answers.
pub(crate) type AttemptResult<L> = Result<Attempt<Granted<L>>, BackendError>;

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

/// How an attempt asks for its lock.
pub(crate) enum Ask<B: LockBackend> {
    /// A mutex: [`LockBackend::acquire`].
    Mutex,
    /// A read hold: [`SharedLocks::acquire_read`].
    Read(Shaped<B>),
    /// A write hold: [`SharedLocks::acquire_write`].
    Write(Shaped<B>),
    /// A permit: [`Semaphores::acquire_permit`].
    Permit(PermitOf<B>, NonZeroU32),
}

impl<B: LockBackend> Clone for Ask<B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: LockBackend> Copy for Ask<B> {}

impl<B: LockBackend> std::fmt::Debug for Ask<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.hold(), f)
    }
}

impl<B: LockBackend> Ask<B> {
    /// The hold this asks for.
    pub(crate) fn hold(&self) -> Hold {
        match self {
            Ask::Mutex => Hold::Mutex,
            Ask::Read(_) => Hold::Read,
            Ask::Write(_) => Hold::Write,
            Ask::Permit(_, permits) => Hold::Permit { permits: *permits },
        }
    }

    /// Asks `backend` for lock `name` once.
    pub(crate) async fn attempt(
        &self,
        backend: &B,
        name: &str,
        request: LockRequest,
    ) -> AttemptResult<B::Lease> {
        match *self {
            Ask::Mutex => backend.acquire(name, request).await,
            Ask::Read(acquire) | Ask::Write(acquire) => acquire(backend, name, request).await,
            Ask::Permit(acquire, permits) => acquire(backend, name, request, permits).await,
        }
    }
}

impl<B: SharedLocks> Ask<B> {
    /// A read hold.
    pub(crate) fn read() -> Self {
        Ask::Read(read::<B>)
    }

    /// A write hold.
    pub(crate) fn write() -> Self {
        Ask::Write(write::<B>)
    }
}

impl<B: Semaphores> Ask<B> {
    /// One of `permits` permits.
    pub(crate) fn permit(permits: NonZeroU32) -> Self {
        Ask::Permit(permit::<B>, permits)
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
