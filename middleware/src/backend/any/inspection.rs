//! The operator's view through [`AnyBackend`] and [`AnyMutexBackend`]: each call goes to the
//! chosen store's own [`Inspect`].

use super::mutex_store::MutexStore;
use super::store::{Store, each_store};
use super::{AnyBackend, AnyMutexBackend};
use crate::backend::{BackendError, Holding, Inspect, Listing, LockState};

impl Inspect for AnyBackend {
    async fn inspect(&self, name: &str) -> Result<LockState, BackendError> {
        each_store!(self.store(), backend => Box::pin(backend.inspect(name)).await)
    }

    async fn held_names(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Listing, BackendError> {
        each_store!(
            self.store(),
            backend => Box::pin(backend.held_names(prefix, after, limit)).await
        )
    }

    async fn force_release(&self, name: &str) -> Result<Vec<Holding>, BackendError> {
        each_store!(self.store(), backend => Box::pin(backend.force_release(name)).await)
    }
}

/// `$body` with `$backend` bound to the chosen store's backend, for the stores whose holders
/// can be read; `$none` (with `$kind` bound to the backend) for `NOWAIT` rows.
macro_rules! each_inspected_store {
    ($store:expr, $backend:ident => $body:expr, $kind:ident => $none:expr) => {
        match $store {
            MutexStore::Any($backend) => $body,
            #[cfg(feature = "redis")]
            MutexStore::Redlock($backend) => $body,
            #[cfg(feature = "postgres")]
            MutexStore::Advisory($backend) => $body,
            #[cfg(feature = "mysql")]
            MutexStore::Nowait($kind) => $none,
        }
    };
}

/// MySQL's `NOWAIT` rows are locked by a session's open transaction, and MySQL tells which
/// session holds a row lock only while another waits for it: the operator's view is not
/// available there.
#[cfg(feature = "mysql")]
fn sessions_keep_no_record(kind: &str) -> BackendError {
    BackendError::new(format!(
        "the {kind} store's locks are row locks of open transactions, whose holders MySQL does \
         not tell: inspecting and releasing them is not supported; use its lease rows instead"
    ))
}

impl Inspect for AnyMutexBackend {
    async fn inspect(&self, name: &str) -> Result<LockState, BackendError> {
        each_inspected_store!(
            self.store(),
            backend => Box::pin(backend.inspect(name)).await,
            other => Err(sessions_keep_no_record(crate::backend::LockBackend::store_kind(other)))
        )
    }

    async fn held_names(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Listing, BackendError> {
        each_inspected_store!(
            self.store(),
            backend => Box::pin(backend.held_names(prefix, after, limit)).await,
            other => Err(sessions_keep_no_record(crate::backend::LockBackend::store_kind(other)))
        )
    }

    async fn force_release(&self, name: &str) -> Result<Vec<Holding>, BackendError> {
        each_inspected_store!(
            self.store(),
            backend => Box::pin(backend.force_release(name)).await,
            other => Err(sessions_keep_no_record(crate::backend::LockBackend::store_kind(other)))
        )
    }
}
