//! What a request does when its lock is busy, and which shape of lock it takes: pure logic.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use http::request::Parts;

use crate::Hold;

/// What a request does when another request holds its lock.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use tower_lock::{LockLayer, MemoryBackend, key::header};
///
/// // Answer 409 at once instead of waiting the default 3 s.
/// let layer = LockLayer::new(MemoryBackend::new(), header("x-account")).reject();
/// // Or wait up to 500 ms, retrying with backoff between 5 ms and 100 ms.
/// let layer = LockLayer::new(MemoryBackend::new(), header("x-account"))
///     .wait(Duration::from_millis(500))
///     .backoff(Duration::from_millis(5), Duration::from_millis(100));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BusyPolicy {
    /// Answer "busy" (409 by default) at once.
    Reject,
    /// Wait until the lock is ours or `timeout` has passed, then answer busy.
    Wait {
        /// The longest a request waits for its lock.
        timeout: Duration,
        /// How it waits.
        mode: WaitMode,
    },
}

impl Default for BusyPolicy {
    /// Waits up to 3 seconds, woken by release notifications.
    fn default() -> Self {
        Self::Wait {
            timeout: Duration::from_secs(3),
            mode: WaitMode::Notified,
        }
    }
}

/// How a waiting request learns that its lock may be free.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WaitMode {
    /// Sleep until the release is announced (or the holder's lease runs out). Waiters for one
    /// key in one process line up, and only the first contends in the store, holding a ticket
    /// in the key's queue there, so that processes take turns. Backends without announcements
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

/// The shape of lock a layer takes for each request.
///
/// # Example
///
/// ```
/// use tower_lock::{LockLayer, MemoryBackend, key::path};
///
/// // GET, HEAD and OPTIONS share the lock; other methods take it alone.
/// let documents = LockLayer::new(MemoryBackend::new(), path("id")).read_write();
/// // At most 2 reports per tenant run at once, across all replicas.
/// let reports = LockLayer::new(MemoryBackend::new(), path("tenant")).semaphore(2);
/// ```
#[derive(Clone, Default)]
pub enum LockMode {
    /// One request at a time per key.
    #[default]
    Mutex,
    /// Readers share the key, a writer holds it alone; `is_read` decides per request. Once a
    /// writer waits, new readers queue behind it.
    ReadWrite {
        /// Whether a request only reads.
        is_read: Arc<dyn Fn(&Parts) -> bool + Send + Sync>,
    },
    /// At most `permits` requests per key at once; each permit has its own lease.
    Semaphore {
        /// How many requests may hold the key at once.
        permits: u32,
    },
}

impl LockMode {
    /// Reads are the safe methods: GET, HEAD and OPTIONS.
    pub fn read_write() -> Self {
        Self::ReadWrite {
            is_read: Arc::new(|parts: &Parts| {
                matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS)
            }),
        }
    }

    /// The hold a request takes.
    pub fn hold_for(&self, parts: &Parts) -> Hold {
        match self {
            Self::Mutex => Hold::Exclusive,
            Self::ReadWrite { is_read } if is_read(parts) => Hold::Read,
            Self::ReadWrite { .. } => Hold::Write,
            Self::Semaphore { permits } => Hold::Permit { permits: *permits },
        }
    }
}

impl fmt::Debug for LockMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Mutex => f.write_str("Mutex"),
            Self::ReadWrite { .. } => f.write_str("ReadWrite"),
            Self::Semaphore { permits } => write!(f, "Semaphore({permits})"),
        }
    }
}

/// What happens to a request whose lease is lost while its handler runs (a renewal found the
/// lock taken, or no renewal was confirmed before the lease's local deadline).
///
/// # Example
///
/// ```
/// use tower_lock::{LockLayer, MemoryBackend, OnLost, key::header};
///
/// // Let handlers that check `LockGuard::is_held` (or write with fences) finish.
/// let layer = LockLayer::new(MemoryBackend::new(), header("x-account")).on_lost(OnLost::Continue);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnLost {
    /// Drop the handler's future at its next await point and answer 503 (problem type
    /// `urn:tower-lock:lock-lost`): no step after the loss runs.
    #[default]
    Abort,
    /// Let the handler finish; it sees the loss on its [`LockGuard`](crate::LockGuard). The
    /// loss is logged.
    Continue,
}

/// Exponential backoff with full jitter between acquire attempts.
///
/// Before retry `n` (counting from 0) a waiter sleeps a uniformly random time in
/// `[0, min(max, initial × 2ⁿ))`, never longer than the holder's remaining lease (the lock is
/// free by then at the latest) nor past the wait deadline. Full jitter spreads waiters out, so
/// a release is not followed by a burst of simultaneous retries.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use tower_lock::Backoff;
///
/// let backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(250));
/// assert_eq!(backoff.ceiling(0), Duration::from_millis(10));
/// assert_eq!(backoff.ceiling(3), Duration::from_millis(80));
/// assert_eq!(backoff.ceiling(30), Duration::from_millis(250));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
}

impl Default for Backoff {
    /// From 10 ms up to 250 ms.
    fn default() -> Self {
        Self::new(Duration::from_millis(10), Duration::from_millis(250))
    }
}

impl Backoff {
    /// Backoff whose ceiling starts at `initial` and doubles up to `max`.
    ///
    /// # Panics
    ///
    /// When `initial` is zero or larger than `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        assert!(
            !initial.is_zero() && initial <= max,
            "backoff needs 0 < initial <= max, got initial {initial:?} and max {max:?}"
        );
        Self { initial, max }
    }

    /// The upper bound of the random sleep before retry `attempt` (counting from 0).
    pub fn ceiling(&self, attempt: u32) -> Duration {
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
        Backoff::new(10 * MS, 250 * MS)
    }

    #[test]
    fn the_ceiling_doubles_until_the_maximum() {
        let ceilings: Vec<_> = (0..7).map(|n| backoff().ceiling(n)).collect();
        assert_eq!(ceilings, [10, 20, 40, 80, 160, 250, 250].map(|ms| ms * MS));
    }

    #[test]
    fn the_ceiling_does_not_overflow_after_many_attempts() {
        assert_eq!(backoff().ceiling(u32::MAX), 250 * MS);
        let huge = Backoff::new(Duration::MAX / 2, Duration::MAX);
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
    #[should_panic(expected = "0 < initial <= max")]
    fn an_inverted_backoff_is_refused() {
        Backoff::new(MS * 2, MS);
    }

    fn parts(method: Method) -> Parts {
        http::Request::builder()
            .method(method)
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    #[test]
    fn read_write_mode_reads_with_safe_methods_and_writes_with_the_others() {
        let mode = LockMode::read_write();
        for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
            assert_eq!(mode.hold_for(&parts(method)), Hold::Read);
        }
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert_eq!(mode.hold_for(&parts(method)), Hold::Write);
        }
    }

    #[test]
    fn the_mutex_and_the_semaphore_hold_the_same_way_for_every_request() {
        assert_eq!(
            LockMode::Mutex.hold_for(&parts(Method::GET)),
            Hold::Exclusive
        );
        let semaphore = LockMode::Semaphore { permits: 3 };
        assert_eq!(
            semaphore.hold_for(&parts(Method::POST)),
            Hold::Permit { permits: 3 }
        );
    }

    #[test]
    fn the_default_policy_waits_three_seconds() {
        assert_eq!(
            BusyPolicy::default(),
            BusyPolicy::Wait {
                timeout: Duration::from_secs(3),
                mode: WaitMode::Notified,
            }
        );
    }
}
