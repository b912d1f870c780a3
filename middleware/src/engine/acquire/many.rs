//! Several names at once: all or none, retried with backoff while busy (a set is not announced
//! free as a whole).

use std::sync::Arc;

use tokio::time::{Instant, sleep};

use super::cleanup::Abandon;
use super::{NotObtained, Obtained};
use crate::backend::{Attempt, BackendError, LockBackend, LockRequest, Patience};
use crate::engine::names::LockNames;
use crate::engine::policy::BusyPolicy;
use crate::engine::settings::Settings;
use crate::engine::telemetry::{StoreOp, Tally};
use crate::token::OwnerToken;

/// Takes every lock in `names` for `token`, exclusively, all or none, retrying while busy as
/// the policy allows. Grants come in the order of `names`.
pub(super) async fn acquire_all<B: LockBackend>(
    backend: &Arc<B>,
    names: &LockNames,
    token: OwnerToken,
    settings: &Settings,
    tally: &Tally,
) -> Result<Obtained<B::Lease>, NotObtained> {
    let deadline = match settings.policy {
        BusyPolicy::Wait { timeout, .. } if !timeout.is_zero() => {
            Some(super::deadline_after(timeout))
        }
        _ => None,
    };
    let patience = deadline.map_or(Patience::Once, |_| Patience::Polls);
    let request = LockRequest::new(token, settings.ttl)
        .patience(patience)
        .holder(settings.holder);
    let list: Vec<&str> = names.iter().collect();
    let store_timeout = settings.store_timeout;
    let mut attempt: u32 = 0;
    loop {
        let sent = tally.attempted();
        // Armed until the answer is in: a lost answer may have taken some of the locks.
        let abandon = Abandon::new(backend, names, request, store_timeout);
        let acquire_many = backend.acquire_many(&list, request);
        let answer = (tally.meters())
            .store_call(StoreOp::Acquire, store_timeout, acquire_many)
            .await;
        let holder_ttl = match answer {
            Ok(Ok(Attempt::Acquired(grants))) if grants.len() == list.len() => {
                abandon.disarm();
                return Ok(Obtained { grants, sent });
            }
            Ok(Ok(Attempt::Acquired(grants))) => {
                let error = format!("{} grants for {} names", grants.len(), list.len());
                return Err(failed(names, BackendError::new(error)));
            }
            Ok(Ok(Attempt::Busy { holder_ttl })) => {
                abandon.disarm();
                tally.busy();
                holder_ttl
            }
            Ok(Err(error)) => return Err(failed(names, error)),
            Err(_) => return Err(failed(names, BackendError::timed_out(store_timeout))),
        };
        let delay = deadline.and_then(|deadline| {
            let remaining = deadline.saturating_duration_since(Instant::now());
            settings
                .backoff
                .next_delay(attempt, fastrand::f64(), holder_ttl, remaining)
        });
        let Some(delay) = delay else {
            return Err(NotObtained::Busy { holder_ttl });
        };
        sleep(delay).await;
        attempt = attempt.saturating_add(1);
    }
}

fn failed(names: &LockNames, error: BackendError) -> NotObtained {
    tracing::warn!(locks = names.joined_keys(), %error, "acquire failed");
    NotObtained::Store(error)
}
