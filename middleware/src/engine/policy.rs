//! What a caller does when its lock is busy or its lease is lost: pure logic.

use std::time::Duration;

/// What a caller does when somebody else holds its lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BusyPolicy {
    /// Answer busy at once.
    Reject,
    /// Wait until the lock is ours or `timeout` has passed, then answer busy.
    Wait {
        /// The longest a caller waits for its lock.
        timeout: Duration,
        /// How it waits.
        mode: WaitMode,
    },
}

impl Default for BusyPolicy {
    /// Waits up to 3 seconds, woken by release announcements.
    fn default() -> Self {
        Self::Wait {
            timeout: Duration::from_secs(3),
            mode: WaitMode::Notified,
        }
    }
}

impl BusyPolicy {
    /// The wait timeout; zero when rejecting.
    pub(crate) fn timeout(self) -> Duration {
        match self {
            Self::Reject => Duration::ZERO,
            Self::Wait { timeout, .. } => timeout,
        }
    }

    /// How a busy lock is met, for traces: `reject`, `notified`, `fair` or `polling`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Wait { timeout, .. } if timeout.is_zero() => "reject",
            Self::Reject => "reject",
            Self::Wait {
                mode: WaitMode::Notified,
                ..
            } => "notified",
            Self::Wait {
                mode: WaitMode::Fair { .. },
                ..
            } => "fair",
            Self::Wait {
                mode: WaitMode::Polling,
                ..
            } => "polling",
        }
    }
}

/// How a waiting caller learns that its lock may be free.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum WaitMode {
    /// Sleep until the release is announced (or the holder's lease runs out). Waiters for one
    /// key in one process line up, and only the first contends in the store, holding a ticket
    /// in the key's queue there, so that processes take turns. Backends without a wait queue
    /// poll instead.
    #[default]
    Notified,
    /// Retry on a timer, with [`Backoff`]: the baseline, and the fallback while announcements
    /// cannot arrive.
    Polling,
    /// First come, first served across processes: each waiter holds an expiring ticket in the
    /// store's queue for the key, and a release wakes only the next ticket's holder.
    Fair {
        /// How long a ticket lives without being refreshed: how long a crashed waiter can hold
        /// up the queue.
        ticket_ttl: Duration,
    },
}

/// What happens to work whose lease is lost while it runs (a renewal found the lock taken, or
/// no renewal was confirmed before the lease's local deadline).
///
/// # Example
///
/// ```
/// use tower_lock::{LockLayer, Locker, MemoryBackend, OnLost, key::header};
///
/// // Let handlers that check `LockGuard::is_held` (or write with fences) finish.
/// let locker = Locker::builder(MemoryBackend::new())
///     .on_lost(OnLost::Continue)
///     .build()?;
/// let layer = LockLayer::new(locker, header("x-account"));
/// # Ok::<_, tower_lock::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnLost {
    /// Drop the work's future at its next await point: no step after the loss runs. The layer
    /// answers 503 (problem type `urn:tower-lock:lock-lost`), `Locker::with_lock` returns
    /// [`LockError::LeaseLost`](crate::LockError::LeaseLost).
    #[default]
    Abort,
    /// Let the work finish; it sees the loss on its [`LockGuard`](crate::LockGuard). The loss
    /// is logged.
    Continue,
}

/// Exponential backoff with full jitter between acquire attempts.
///
/// Before retry `n` (counting from 0) a waiter sleeps a uniformly random time in
/// `[0, min(max, initial × 2ⁿ))`, never longer than the holder's remaining lease (the lock is
/// free by then at the latest) nor past the wait deadline. Full jitter spreads waiters out, so
/// a release is not followed by a burst of simultaneous retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
}

impl Default for Backoff {
    /// From 10 ms up to 250 ms.
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(250),
        }
    }
}

impl Backoff {
    /// Backoff whose ceiling starts at `initial` and doubles up to `max`; `None` unless
    /// `0 < initial <= max`.
    pub(crate) fn new(initial: Duration, max: Duration) -> Option<Self> {
        (!initial.is_zero() && initial <= max).then_some(Self { initial, max })
    }

    /// The upper bound of the random sleep before retry `attempt` (counting from 0).
    pub(crate) fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1_u32.checked_shl(attempt).unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max)
    }

    /// How long to sleep before retry `attempt`, or `None` when the wait is over.
    ///
    /// `unit` is a uniform random number in `[0, 1)`; `holder_ttl` is the holder's remaining
    /// lease when known, `remaining` the time left until the wait deadline.
    pub(crate) fn next_delay(
        &self,
        attempt: u32,
        unit: f64,
        holder_ttl: Option<Duration>,
        remaining: Duration,
    ) -> Option<Duration> {
        if remaining.is_zero() {
            return None;
        }
        let jittered = self.ceiling(attempt).mul_f64(unit.clamp(0.0, 1.0));
        Some(
            jittered
                .min(holder_ttl.unwrap_or(Duration::MAX))
                .min(remaining),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn backoff() -> Backoff {
        Backoff::new(10 * MS, 250 * MS).unwrap()
    }

    #[test]
    fn the_ceiling_doubles_until_the_maximum() {
        let ceilings: Vec<_> = (0..7).map(|n| backoff().ceiling(n)).collect();
        assert_eq!(ceilings, [10, 20, 40, 80, 160, 250, 250].map(|ms| ms * MS));
    }

    #[test]
    fn the_ceiling_does_not_overflow_after_many_attempts() {
        assert_eq!(backoff().ceiling(u32::MAX), 250 * MS);
        let huge = Backoff::new(Duration::MAX / 2, Duration::MAX).unwrap();
        assert_eq!(huge.ceiling(40), Duration::MAX);
    }

    #[test]
    fn the_delay_is_jittered_between_zero_and_the_ceiling() {
        let long = Duration::from_secs(60);
        assert_eq!(
            backoff().next_delay(2, 0.0, None, long),
            Some(Duration::ZERO)
        );
        assert_eq!(backoff().next_delay(2, 0.5, None, long), Some(20 * MS));
        let near_one = backoff().next_delay(2, 0.999_999, None, long).unwrap();
        assert!(near_one < 40 * MS && near_one > 39 * MS, "{near_one:?}");
    }

    #[test]
    fn the_delay_never_outlasts_the_holders_lease() {
        let delay = backoff().next_delay(5, 0.99, Some(3 * MS), Duration::from_secs(1));
        assert_eq!(delay, Some(3 * MS));
    }

    #[test]
    fn the_delay_never_passes_the_deadline() {
        assert_eq!(backoff().next_delay(5, 0.99, None, 7 * MS), Some(7 * MS));
        assert_eq!(backoff().next_delay(0, 0.5, None, Duration::ZERO), None);
    }

    #[test]
    fn an_inverted_or_zero_backoff_is_refused() {
        assert_eq!(Backoff::new(MS * 2, MS), None);
        assert_eq!(Backoff::new(Duration::ZERO, MS), None);
    }

    #[test]
    fn the_default_policy_waits_three_seconds_for_an_announcement() {
        assert_eq!(
            BusyPolicy::default(),
            BusyPolicy::Wait {
                timeout: Duration::from_secs(3),
                mode: WaitMode::Notified,
            }
        );
    }
}
