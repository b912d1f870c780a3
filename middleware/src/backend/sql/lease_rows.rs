//! Lease rows, the SQL stores' lock: the contract (`LockBackend`, `SharedLocks`, `Semaphores`)
//! implemented once, over what each store says in its own dialect (PostgreSQL's statements
//! and `NOTIFY`, MySQL's `INSERT … ON DUPLICATE KEY UPDATE` and its silent room).

use std::future::Future;
use std::time::Duration;

use super::acquire_detached;
use super::tickets::{QueueRows, release_through_queue};
use crate::backend::{Attempt, BackendError, Granted, Hold, LockRequest, TokenLease};
use crate::token::OwnerToken;

/// What a SQL store of lease rows sends, in its dialect; [`lease_rows_backend!`] makes it a
/// backend.
pub(in crate::backend) trait LeaseRows: QueueRows {
    /// One acquire of `hold` on `name`'s row: taken (with a fence when exclusive), or busy with
    /// how long until the lock may change.
    fn try_acquire(
        &self,
        name: &str,
        request: LockRequest,
        hold: Hold,
    ) -> impl Future<Output = Result<Attempt<Granted<TokenLease>>, BackendError>> + Send;

    /// Extends `lease` to `ttl` from now if it is still its owner's: whether it was.
    fn extend_lease(
        &self,
        name: &str,
        lease: &TokenLease,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// Gives back a reader's or permit holder's hold, waking who waits: whether `owner` held it.
    fn release_shared(
        &self,
        name: &str,
        owner: OwnerToken,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// Frees an exclusive hold of `owner` that nobody waits for in the row: whether it did (a
    /// row waited for, or another owner's, is left to the queue).
    fn release_unwaited(
        &self,
        name: &str,
        owner: OwnerToken,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// Undoes whatever an acquire by `request` may have left on `name`'s row.
    fn abandon_attempt(
        &self,
        name: &str,
        request: LockRequest,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
}

/// An acquire of `hold` in a task of its own (`sql::acquire_detached`): an `abandon` sent on
/// another pooled connection could otherwise reach the database before the acquire it undoes.
pub(in crate::backend) async fn acquire<B: LeaseRows>(
    backend: &B,
    name: &str,
    request: LockRequest,
    hold: Hold,
) -> Result<Attempt<Granted<TokenLease>>, BackendError> {
    let slots = backend.acquire_slots();
    acquire_detached(backend, slots, name, request, move |backend, name, request| async move {
        backend.try_acquire(&name, request, hold).await
    })
    .await
}

/// One owner-checked `UPDATE` while nobody waits; a lock that is waited for goes through the
/// queue (to this process's next waiter or the first ticket) — at once when this process has
/// waiters for it.
pub(in crate::backend) async fn release<B: LeaseRows>(
    backend: &B,
    name: &str,
    lease: &TokenLease,
) -> Result<bool, BackendError> {
    if !lease.hold().is_exclusive() {
        return backend.release_shared(name, lease.token()).await;
    }
    if !backend.waiting_room().has_waiters(name)
        && backend.release_unwaited(name, lease.token()).await?
    {
        return Ok(true);
    }
    release_through_queue(backend, name, lease.token()).await
}

/// Implements [`LockBackend`](crate::backend::LockBackend),
/// [`SharedLocks`](crate::backend::SharedLocks) and [`Semaphores`](crate::backend::Semaphores)
/// for `$backend`, a [`LeaseRows`] store; its metrics' `backend` label is `$kind`, its longest
/// lock name `$max_name_len` bytes.
macro_rules! lease_rows_backend {
    ($backend:ty, $kind:literal, $max_name_len:expr) => {
        impl $crate::backend::LockBackend for $backend {
            type Lease = $crate::backend::TokenLease;

            fn store_kind(&self) -> &'static str {
                $kind
            }

            async fn acquire(
                &self,
                name: &str,
                request: $crate::backend::LockRequest,
            ) -> Result<
                $crate::backend::Attempt<$crate::backend::Granted<Self::Lease>>,
                $crate::backend::BackendError,
            > {
                let hold = $crate::backend::Hold::Mutex;
                $crate::backend::sql::lease_rows::acquire(self, name, request, hold).await
            }

            async fn extend(
                &self,
                name: &str,
                lease: &Self::Lease,
                ttl: ::std::time::Duration,
            ) -> Result<bool, $crate::backend::BackendError> {
                $crate::backend::sql::lease_rows::LeaseRows::extend_lease(self, name, lease, ttl)
                    .await
            }

            async fn release(
                &self,
                name: &str,
                lease: &Self::Lease,
            ) -> Result<bool, $crate::backend::BackendError> {
                $crate::backend::sql::lease_rows::release(self, name, lease).await
            }

            async fn abandon(
                &self,
                name: &str,
                request: $crate::backend::LockRequest,
            ) -> Result<(), $crate::backend::BackendError> {
                $crate::backend::sql::lease_rows::LeaseRows::abandon_attempt(self, name, request)
                    .await
            }

            fn wait_queue(&self) -> Option<&dyn $crate::backend::WaitQueue<Self::Lease>> {
                Some(self)
            }

            fn max_name_len(&self) -> Option<usize> {
                Some($max_name_len)
            }
        }

        impl $crate::backend::SharedLocks for $backend {
            async fn acquire_read(
                &self,
                name: &str,
                request: $crate::backend::LockRequest,
            ) -> Result<
                $crate::backend::Attempt<$crate::backend::Granted<Self::Lease>>,
                $crate::backend::BackendError,
            > {
                let hold = $crate::backend::Hold::Read;
                $crate::backend::sql::lease_rows::acquire(self, name, request, hold).await
            }

            async fn acquire_write(
                &self,
                name: &str,
                request: $crate::backend::LockRequest,
            ) -> Result<
                $crate::backend::Attempt<$crate::backend::Granted<Self::Lease>>,
                $crate::backend::BackendError,
            > {
                let hold = $crate::backend::Hold::Write;
                $crate::backend::sql::lease_rows::acquire(self, name, request, hold).await
            }
        }

        impl $crate::backend::Semaphores for $backend {
            async fn acquire_permit(
                &self,
                name: &str,
                request: $crate::backend::LockRequest,
                permits: ::std::num::NonZeroU32,
            ) -> Result<
                $crate::backend::Attempt<$crate::backend::Granted<Self::Lease>>,
                $crate::backend::BackendError,
            > {
                let hold = $crate::backend::Hold::Permit { permits };
                $crate::backend::sql::lease_rows::acquire(self, name, request, hold).await
            }
        }
    };
}
pub(in crate::backend) use lease_rows_backend;
