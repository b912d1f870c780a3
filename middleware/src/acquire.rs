//! Taking a lock under the layer's policy: attempts, backoff, and store timeouts.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, sleep, timeout};

use crate::{Acquire, Backoff, BusyPolicy, LockBackend, OwnerToken};

/// How a request's lock was not taken.
#[derive(Debug)]
pub(crate) enum NotObtained {
    /// Somebody else held it until the policy gave up.
    Busy { holder_ttl: Option<Duration> },
    /// The store failed or did not answer within the store timeout.
    StoreUnavailable,
}

/// What an acquire needs besides the backend.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AcquirePlan {
    pub(crate) ttl: Duration,
    pub(crate) policy: BusyPolicy,
    pub(crate) backoff: Backoff,
    pub(crate) store_timeout: Duration,
}

/// Tries to take lock `name` for `token`, retrying while busy as the policy allows.
/// Returns the fencing token, and when the successful attempt was sent (the lease counts from
/// there).
pub(crate) async fn acquire<B: LockBackend>(
    backend: &Arc<B>,
    name: &str,
    token: OwnerToken,
    plan: AcquirePlan,
) -> Result<(u64, Instant), NotObtained> {
    let deadline = match plan.policy {
        BusyPolicy::Reject => None,
        BusyPolicy::Wait { timeout } => Some(Instant::now() + timeout),
    };
    let mut attempt = 0;
    loop {
        let sent = Instant::now();
        let holder_ttl =
            match timeout(plan.store_timeout, backend.acquire(name, token, plan.ttl)).await {
                Ok(Ok(Acquire::Acquired { fence })) => return Ok((fence, sent)),
                Ok(Ok(Acquire::Busy { holder_ttl })) => holder_ttl,
                Ok(Err(error)) => {
                    tracing::warn!(lock = name, %error, "acquire failed");
                    return Err(give_back(backend, name, token, plan.store_timeout));
                }
                Err(_) => {
                    tracing::warn!(lock = name, timeout = ?plan.store_timeout, "acquire timed out");
                    return Err(give_back(backend, name, token, plan.store_timeout));
                }
            };
        let delay = deadline.and_then(|deadline| {
            let remaining = deadline.saturating_duration_since(Instant::now());
            plan.backoff
                .next_delay(attempt, fastrand::f64(), holder_ttl, remaining)
        });
        let Some(delay) = delay else {
            return Err(NotObtained::Busy { holder_ttl });
        };
        sleep(delay).await;
        attempt = attempt.saturating_add(1);
    }
}

/// An attempt that failed or timed out may still have taken the lock in the store (the reply
/// was lost, not the command). Give it back in the background so it does not block the key
/// until its TTL; the compare-and-delete makes this harmless when we never held it.
fn give_back<B: LockBackend>(
    backend: &Arc<B>,
    name: &str,
    token: OwnerToken,
    store_timeout: Duration,
) -> NotObtained {
    let (backend, name) = (Arc::clone(backend), name.to_owned());
    tokio::spawn(async move {
        let outcome = timeout(store_timeout, backend.release(&name, token)).await;
        tracing::debug!(lock = name, ?outcome, "gave back a possibly taken lock");
    });
    NotObtained::StoreUnavailable
}
