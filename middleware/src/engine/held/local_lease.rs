//! The lease of a held lock as this process knows it: its local deadline, its renewal, and the
//! signal that it was lost.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

use crate::backend::{LockBackend, lease_deadline};
use crate::engine::held::ReleaseDuty;
use crate::engine::telemetry::{Meters, Outcome, Renewal, StoreOp};

/// Why a lease was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseLost {
    /// A renewal found the lease gone from the store: an operator freed the lock (where the
    /// store records who did — memory, Redis — the holder then logs "an operator released the
    /// lock" with the operator's label), or the store lost it (a restart, a failover) and it
    /// may be somebody else's now.
    #[error("a renewal found the lease gone from the store")]
    Taken,
    /// The local deadline passed without a confirmed renewal: the store did not answer, the
    /// process was paused, or renewal is off.
    #[error("the lease ran out without a confirmed renewal")]
    Expired,
}

/// How a lease is kept while its lock is held.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LeasePlan {
    pub(crate) ttl: Duration,
    pub(crate) renew: bool,
    pub(crate) store_timeout: Duration,
}

/// The lease as this process knows it. The store is the authority; this is the part of it
/// that can be known without asking: until when the lease is certainly still held.
#[derive(Debug)]
pub(crate) struct LocalLease {
    state: watch::Sender<LeaseState>,
    /// The meters of its lock.
    meters: Meters,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LeaseState {
    /// When the last confirmed acquire or renewal was sent.
    renewed_at: Instant,
    /// Past this instant the lease may have expired in the store.
    deadline: Instant,
    status: Status,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Held,
    Lost(LeaseLost),
    Released,
}

impl LocalLease {
    /// A lease whose acquire (or renewal) command was sent at `sent` with `ttl`, of a lock
    /// reported with `meters`.
    pub(crate) fn new(sent: Instant, ttl: Duration, meters: Meters) -> Self {
        Self::continued(sent, lease_deadline(sent, ttl), meters)
    }

    /// A lease last renewed by a command sent at `renewed_at`, held until `deadline`: one
    /// handed on from another holder in this process, whose renewal it continues.
    pub(crate) fn continued(renewed_at: Instant, deadline: Instant, meters: Meters) -> Self {
        let (state, _) = watch::channel(LeaseState {
            renewed_at,
            deadline,
            status: Status::Held,
        });
        Self { state, meters }
    }

    /// When its last confirmed acquire or renewal was sent, and until when it is held.
    pub(crate) fn timing(&self) -> (Instant, Instant) {
        let state = *self.state.borrow();
        (state.renewed_at, state.deadline)
    }

    pub(crate) fn meters(&self) -> &Meters {
        &self.meters
    }

    /// Held, and its local deadline not passed.
    pub(crate) fn is_held(&self) -> bool {
        let state = *self.state.borrow();
        state.status == Status::Held && Instant::now() < state.deadline
    }

    fn deadline(&self) -> Instant {
        self.state.borrow().deadline
    }

    fn renewed_at(&self) -> Instant {
        self.state.borrow().renewed_at
    }

    /// A renewal sent at `sent` with `ttl` was confirmed.
    fn renewed(&self, sent: Instant, ttl: Duration) {
        self.state.send_if_modified(|state| {
            let renewed = state.status == Status::Held;
            if renewed {
                state.renewed_at = sent;
                state.deadline = lease_deadline(sent, ttl);
            }
            renewed
        });
    }

    /// The lease is lost, `because` (counted the first time).
    pub(crate) fn lose(&self, because: LeaseLost) -> LeaseLost {
        if self.end(Status::Lost(because)) {
            self.meters.count(Outcome::LeaseLost);
        }
        because
    }

    /// The lock is being given back by its holder.
    pub(crate) fn release(&self) {
        self.end(Status::Released);
    }

    /// Ends the lease as `status`: whether it was held until now.
    fn end(&self, status: Status) -> bool {
        self.state.send_if_modified(|state| {
            let ends = state.status == Status::Held;
            if ends {
                state.status = status;
            }
            ends
        })
    }

    /// Resolves when the lease is lost: taken, or its deadline passed while held. After a
    /// release by its holder it never resolves.
    pub(crate) fn lost(&self) -> impl Future<Output = LeaseLost> + Send + 'static {
        let mut state = self.state.subscribe();
        async move {
            loop {
                let LeaseState {
                    deadline, status, ..
                } = *state.borrow_and_update();
                match status {
                    Status::Lost(because) => return because,
                    Status::Released => std::future::pending().await,
                    Status::Held => {}
                }
                tokio::select! {
                    biased;
                    changed = state.changed() => if changed.is_err() {
                        // Nobody can renew or release it any more: only the deadline is left.
                        sleep_until(deadline).await;
                        return LeaseLost::Expired;
                    },
                    () = sleep_until(deadline) => return LeaseLost::Expired,
                }
            }
        }
    }
}

/// Keeps the lease of `leases`' lock while it is held: renews it every TTL/3 after its last
/// confirmed renewal (every name of the lock at once) when the locker renews, and returns as
/// soon as it is lost — and, when a renewal finds the lease gone, asks the store in the
/// background whether an operator freed it, to log who did. Dropping this future stops renewal at once; it owns no task and at most
/// one timer at a time. Started again later (the work ended, its output is still being
/// delivered), it goes on from the last renewal.
pub(crate) async fn keep<B: LockBackend>(leases: &ReleaseDuty<B>) -> LeaseLost {
    let (guard, plan) = (leases.guard(), leases.locker().settings.lease_plan());
    let (lease, name) = (guard.lease(), guard.name());
    let meters = lease.meters();
    let interval = plan.ttl / 3;
    let retry_after_failure = (interval / 3).max(Duration::from_millis(10));
    let mut next_renewal = lease.renewed_at() + interval;
    loop {
        // Until the next renewal is due, one timer: the renewal's, or the deadline's when
        // there is no renewal before it.
        let deadline = lease.deadline();
        if !plan.renew || next_renewal >= deadline {
            sleep_until(deadline).await;
            return lease.lose(LeaseLost::Expired);
        }
        sleep_until(next_renewal).await;
        let sent = Instant::now();
        if sent >= deadline {
            // The process stalled past the deadline (a pause): too late to renew.
            return lease.lose(LeaseLost::Expired);
        }
        tokio::select! {
            biased;
            () = sleep_until(deadline) => return lease.lose(LeaseLost::Expired),
            outcome = meters.store_call(StoreOp::Extend, plan.store_timeout, leases.extend()) => match outcome {
                Ok(Ok(true)) => {
                    meters.renewal(Renewal::Ok);
                    lease.renewed(sent, plan.ttl);
                    next_renewal = sent + interval;
                }
                Ok(Ok(false)) => {
                    meters.renewal(Renewal::Refused);
                    leases.tell_who_released();
                    return lease.lose(LeaseLost::Taken);
                }
                Ok(Err(error)) => {
                    meters.renewal(Renewal::Failed);
                    tracing::warn!(lock = name, %error, "renewal failed; retrying");
                    next_renewal = Instant::now() + retry_after_failure;
                }
                Err(_) => {
                    meters.renewal(Renewal::Failed);
                    tracing::warn!(lock = name, timeout = ?plan.store_timeout, "renewal timed out; retrying");
                    next_renewal = Instant::now() + retry_after_failure;
                }
            },
        }
    }
}
