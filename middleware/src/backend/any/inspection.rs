//! The operator's view through [`AnyBackend`] and [`AnyMutexBackend`]: each call goes to the
//! chosen store's own [`Inspect`].

use super::mutex_store::{MutexStore, each_mutex_store};
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

    async fn force_release(&self, name: &str, by: &str) -> Result<Vec<Holding>, BackendError> {
        each_store!(self.store(), backend => Box::pin(backend.force_release(name, by)).await)
    }
}

impl Inspect for AnyMutexBackend {
    async fn inspect(&self, name: &str) -> Result<LockState, BackendError> {
        each_mutex_store!(self.store(), backend => Box::pin(backend.inspect(name)).await)
    }

    async fn held_names(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Listing, BackendError> {
        each_mutex_store!(
            self.store(),
            backend => Box::pin(backend.held_names(prefix, after, limit)).await
        )
    }

    async fn force_release(&self, name: &str, by: &str) -> Result<Vec<Holding>, BackendError> {
        each_mutex_store!(self.store(), backend => Box::pin(backend.force_release(name, by)).await)
    }
}
