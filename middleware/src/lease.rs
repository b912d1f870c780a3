//! The lease of a held lock: its local deadline, renewal while the handler runs, and the
//! signal that it was lost.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, sleep_until, timeout};

use crate::{LockBackend, LockGuard};

/// How a request's lease is kept: by the layer, per request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LeasePlan {
    pub(crate) ttl: Duration,
    pub(crate) renew: bool,
    pub(crate) store_timeout: Duration,
}

/// The lease as this process knows it. The store is the authority; this is the part of it
/// that can be known without asking: until when the lease is certainly still ours.
#[derive(Debug)]
pub(crate) struct Lease {
    state: watch::Sender<LeaseState>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LeaseState {
    /// Past this instant the lease may have expired in the store.
    deadline: Instant,
    status: Status,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Held,
    Lost,
    Released,
}

/// Why a lease was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LostBecause {
    /// A renewal found the key gone or owned by another token.
    Taken,
    /// The deadline passed without a confirmed renewal (store unreachable, process paused).
    Expired,
}

/// How much earlier than the store's expiry the local deadline falls: clocks drift, and the
/// expiry started counting when the store received the command, not when it was sent.
pub(crate) fn drift_margin(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

impl Lease {
    /// A lease whose acquire (or renewal) command was sent at `sent` with `ttl`.
    pub(crate) fn new(sent: Instant, ttl: Duration) -> Self {
        let (state, _) = watch::channel(LeaseState {
            deadline: deadline(sent, ttl),
            status: Status::Held,
        });
        Self { state }
    }

    pub(crate) fn is_held(&self) -> bool {
        let state = *self.state.borrow();
        state.status == Status::Held && Instant::now() < state.deadline
    }

    fn deadline(&self) -> Instant {
        self.state.borrow().deadline
    }

    fn renewed(&self, sent: Instant, ttl: Duration) {
        self.state.send_if_modified(|state| {
            let renewed = state.status == Status::Held;
            if renewed {
                state.deadline = deadline(sent, ttl);
            }
            renewed
        });
    }

    pub(crate) fn end(&self, lost: bool) {
        self.state.send_if_modified(|state| {
            let ends = state.status == Status::Held;
            if ends {
                state.status = if lost { Status::Lost } else { Status::Released };
            }
            ends
        });
    }

    /// Resolves once the lease is no longer held: lost, expired, or released.
    pub(crate) fn ended(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut state = self.state.subscribe();
        async move {
            loop {
                let LeaseState { deadline, status } = *state.borrow_and_update();
                if status != Status::Held {
                    return;
                }
                tokio::select! {
                    changed = state.changed() => if changed.is_err() { return },
                    () = sleep_until(deadline) => return,
                }
            }
        }
    }
}

fn deadline(sent: Instant, ttl: Duration) -> Instant {
    sent + ttl.saturating_sub(drift_margin(ttl))
}

/// Keeps `guard`'s lease while the request runs: renews it every TTL/3 (one owner-checked
/// extend per renewal) when `plan.renew`, and returns as soon as it is lost. Dropping this
/// future stops renewal at once; it owns no task and at most one timer at a time.
pub(crate) async fn keep<B: LockBackend>(
    backend: &B,
    guard: &LockGuard,
    plan: LeasePlan,
) -> LostBecause {
    let lease = guard.lease();
    let interval = plan.ttl / 3;
    let retry_after_failure = (interval / 3).max(Duration::from_millis(10));
    let mut next_renewal = Instant::now() + interval;
    loop {
        // Until the next renewal is due, one timer: the renewal's, or the deadline's when
        // there is no renewal before it.
        let deadline = lease.deadline();
        if !plan.renew || next_renewal >= deadline {
            sleep_until(deadline).await;
            lease.end(true);
            return LostBecause::Expired;
        }
        sleep_until(next_renewal).await;
        let sent = Instant::now();
        if sent >= deadline {
            // The process stalled past the deadline (a pause): too late to renew.
            lease.end(true);
            return LostBecause::Expired;
        }
        let extend = async {
            let mut all_ours = true;
            for name in guard.names() {
                all_ours &= backend
                    .extend_hold(name, guard.token(), plan.ttl, guard.hold())
                    .await?;
            }
            Ok::<_, crate::BackendError>(all_ours)
        };
        tokio::select! {
            biased;
            () = sleep_until(deadline) => {
                lease.end(true);
                return LostBecause::Expired;
            }
            outcome = timeout(plan.store_timeout, extend) => match outcome {
                Ok(Ok(true)) => {
                    lease.renewed(sent, plan.ttl);
                    next_renewal = sent + interval;
                }
                Ok(Ok(false)) => {
                    lease.end(true);
                    return LostBecause::Taken;
                }
                Ok(Err(error)) => {
                    tracing::warn!(lock = guard.name(), %error, "renewal failed; retrying");
                    next_renewal = Instant::now() + retry_after_failure;
                }
                Err(_) => {
                    tracing::warn!(lock = guard.name(), "renewal timed out; retrying");
                    next_renewal = Instant::now() + retry_after_failure;
                }
            },
        }
    }
}
