//! What an unfinished acquire leaves to the background: an attempt whose answer never came, a
//! writer's intent or a reader's claim, a ticket in the store's queue. Each is a guard armed
//! while the acquire runs and disarmed when it ends well; dropped armed, it cleans up in the
//! background.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use crate::backend::{BackendError, LockBackend, LockRequest};
use crate::background;
use crate::engine::names::LockNames;
use crate::token::OwnerToken;

/// Abandons `request` on `names` (see [`LockBackend::abandon`]) when dropped armed: an attempt
/// whose answer was lost (an error, a timeout, or the acquire dropped mid-flight) may have
/// taken the lock, a writer that stopped waiting leaves an intent that bars others, a reader
/// a claim that bars writers.
pub(super) struct Abandon<'a, B: LockBackend> {
    backend: &'a Arc<B>,
    names: &'a LockNames,
    request: LockRequest,
    store_timeout: Duration,
    armed: bool,
}

impl<'a, B: LockBackend> Abandon<'a, B> {
    pub(super) fn new(
        backend: &'a Arc<B>,
        names: &'a LockNames,
        request: LockRequest,
        store_timeout: Duration,
    ) -> Self {
        Self {
            backend,
            names,
            request,
            store_timeout,
            armed: true,
        }
    }

    /// Nothing to undo.
    pub(super) fn disarm(mut self) {
        self.armed = false;
    }

    /// Abandons now, before the caller answers (a reader sent right after a writer gave up
    /// must not find its intent, nor a writer a reader's claim) — until `answer_by`, the
    /// latest the caller is answered (its deadline and one store call), and in the background
    /// from then on.
    pub(super) async fn before(mut self, answer_by: Instant) {
        let abandoned = tokio::time::timeout_at(
            answer_by,
            abandon_each(&**self.backend, self.names, self.request),
        )
        .await;
        let Ok(abandoned) = abandoned else {
            return;
        };
        self.armed = false;
        if let Err(error) = abandoned {
            tracing::warn!(locks = self.names.joined_keys(), %error, "abandon failed");
        }
    }
}

impl<B: LockBackend> Drop for Abandon<'_, B> {
    /// Abandons in the background: at once, and again one store timeout later. The attempt's
    /// request may still be on its way and reach the store after the first abandonment (sent on
    /// another connection of a pool, another stream of etcd's); taken then, the lock would be
    /// nobody's until its lease ran out — for as long as a session lives, on a session store.
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (backend, names, request) =
            (Arc::clone(self.backend), self.names.clone(), self.request);
        let limit = self.store_timeout;
        background::spawn("abandon an attempt", async move {
            abandon_within(&*backend, &names, request, limit).await;
            tokio::time::sleep(limit).await;
            abandon_within(&*backend, &names, request, limit).await;
        });
    }
}

/// [`abandon_each`] within `limit`; a failure is logged.
async fn abandon_within<B: LockBackend>(
    backend: &B,
    names: &LockNames,
    request: LockRequest,
    limit: Duration,
) {
    let abandoned = tokio::time::timeout(limit, abandon_each(backend, names, request)).await;
    match abandoned.unwrap_or_else(|_| Err(BackendError::timed_out(limit))) {
        Ok(()) => tracing::debug!(locks = names.joined_keys(), "attempt abandoned"),
        Err(error) => tracing::warn!(locks = names.joined_keys(), %error, "abandon failed"),
    }
}

/// Abandons `request` on each of `names` at once, each on its own: one that fails or does not
/// answer holds up none of the others (a session store would otherwise keep the others' keys
/// for as long as the session lives). The first failure, if any.
async fn abandon_each<B: LockBackend>(
    backend: &B,
    names: &LockNames,
    request: LockRequest,
) -> Result<(), BackendError> {
    if mutant!("abandon-one-by-one") {
        for name in names.iter() {
            backend.abandon(name, request).await?;
        }
        return Ok(());
    }
    let abandoned = names.iter().map(|name| backend.abandon(name, request));
    join_all(abandoned).await.into_iter().collect()
}

/// A ticket in the store's queue: withdrawn in the background when the waiter gives up or is
/// dropped, so that it does not hold up the line until it expires (and a lock handed to it
/// meanwhile is passed on).
pub(super) struct QueuePlace<'a, B: LockBackend> {
    backend: &'a Arc<B>,
    name: &'a str,
    token: OwnerToken,
    store_timeout: Duration,
    used: bool,
}

impl<'a, B: LockBackend> QueuePlace<'a, B> {
    pub(super) fn new(
        backend: &'a Arc<B>,
        name: &'a str,
        token: OwnerToken,
        store_timeout: Duration,
    ) -> Self {
        Self {
            backend,
            name,
            token,
            store_timeout,
            used: false,
        }
    }

    /// The ticket was turned into the lock; nothing to withdraw.
    pub(super) fn used(mut self) {
        self.used = true;
    }
}

impl<B: LockBackend> Drop for QueuePlace<'_, B> {
    fn drop(&mut self) {
        if self.used {
            return;
        }
        let (backend, name, token) = (Arc::clone(self.backend), self.name.to_owned(), self.token);
        background::store_call(
            "withdraw a ticket",
            name.clone(),
            self.store_timeout,
            async move {
                match backend.wait_queue() {
                    Some(queue) => queue.leave_queue(&name, token).await,
                    None => Ok(()),
                }
            },
        );
    }
}
