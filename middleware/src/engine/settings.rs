//! A locker's settings, the builder that checks them, and what it refuses.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use super::held::{HoldTimes, LeasePlan};
use super::line::{Lines, MAX_LOCAL_RUN};
use super::locker::{Locker, LockerInner};
use super::names::DEFAULT_MAX_KEY_LEN;
use super::observer::Observer;
use super::policy::{Backoff, BusyPolicy, OnLost, WaitMode};
use super::telemetry::Instruments;
use metrics::SharedString;

use crate::backend::LockBackend;
use crate::backend::holder_label::{self, MAX_LABEL_LEN};

/// The shortest lease (and fair-mode ticket) a locker accepts.
const MIN_TTL: Duration = Duration::from_millis(10);

/// The longest lease (and fair-mode ticket) a locker accepts: a crashed holder's lock stays
/// taken that long, while renewal keeps a lock for as long as its work runs.
const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// What a locker does: checked once, when it is built.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) prefix: String,
    pub(crate) max_key_len: usize,
    pub(crate) ttl: Duration,
    pub(crate) policy: BusyPolicy,
    pub(crate) backoff: Backoff,
    pub(crate) store_timeout: Duration,
    pub(crate) renew: bool,
    pub(crate) on_lost: OnLost,
    /// The `group` label of this locker's metrics, when chosen.
    pub(crate) metrics_group: Option<SharedString>,
    /// How many holds in a row a lock may be handed on among the locker's tasks before it is
    /// released in the store.
    pub(crate) max_local_run: u32,
    /// Who holds this locker's locks, for operators: stored with each grant.
    pub(crate) holder: &'static str,
    /// Who watches its holds (tests only attach one).
    pub(crate) observer: Observer,
}

/// Holds in a row handed on among a locker's tasks unless set otherwise.
const DEFAULT_MAX_LOCAL_RUN: u32 = 8;

/// The lease TTL unless set otherwise (or shorter, for a backend that vouches for less).
const DEFAULT_TTL: Duration = Duration::from_secs(10);

impl Settings {
    /// The defaults, with keys as long as `max_name_len` (the backend's limit) allows, at
    /// most [`DEFAULT_MAX_KEY_LEN`], and leases as long as `max_ttl` allows, at most 10 s.
    fn defaults(max_name_len: Option<usize>, max_ttl: Option<Duration>) -> Self {
        let prefix = "lock:".to_owned();
        let room = max_name_len.map_or(usize::MAX, |max| max.saturating_sub(prefix.len()));
        Self {
            prefix,
            max_key_len: DEFAULT_MAX_KEY_LEN.min(room),
            ttl: max_ttl.map_or(DEFAULT_TTL, |max| DEFAULT_TTL.min(max)),
            policy: BusyPolicy::default(),
            backoff: Backoff::default(),
            store_timeout: Duration::from_secs(1),
            renew: true,
            on_lost: OnLost::default(),
            metrics_group: None,
            max_local_run: DEFAULT_MAX_LOCAL_RUN,
            holder: holder_label::default_label(),
            observer: Observer::default(),
        }
    }

    pub(crate) fn lease_plan(&self) -> LeasePlan {
        LeasePlan {
            ttl: self.ttl,
            renew: self.renew,
            store_timeout: self.store_timeout,
        }
    }
}

/// A setting a locker refuses, with what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The lease TTL is shorter than 10 ms.
    #[error("a lease TTL needs at least 10 ms, got {0:?}")]
    TtlTooShort(Duration),
    /// The lease TTL is longer than a day.
    #[error(
        "a lease TTL can be at most 24 h (renewal keeps a lock while its work runs), got {0:?}"
    )]
    TtlTooLong(Duration),
    /// The lease TTL is longer than the backend can vouch for ([`LockBackend::max_ttl`]).
    #[error("the backend vouches for leases of at most {max:?}, got a TTL of {ttl:?}")]
    TtlTooLongForBackend {
        /// The TTL asked for.
        ttl: Duration,
        /// The backend's longest lease.
        max: Duration,
    },
    /// The prefix contains `{`, `}` or an ASCII control character.
    #[error("a lock prefix must not contain braces or control characters: {0:?}")]
    InvalidPrefix(String),
    /// The backoff's bounds are not `0 < initial <= max`.
    #[error("backoff needs 0 < initial <= max, got initial {initial:?} and max {max:?}")]
    InvalidBackoff {
        /// The first ceiling asked for.
        initial: Duration,
        /// The largest ceiling asked for.
        max: Duration,
    },
    /// The store timeout is zero: every call would fail.
    #[error("the store timeout must be longer than zero")]
    ZeroStoreTimeout,
    /// Fair mode was asked of a backend without a wait queue.
    #[error(
        "fair mode needs a backend with a wait queue (memory, Redis, the SQL lease rows and etcd have one)"
    )]
    FairWithoutQueue,
    /// Fair mode was combined with polling, which cannot keep a line's order.
    #[error("fair mode wakes the next waiter in line; it cannot be combined with polling")]
    FairPolling,
    /// Fair mode was asked of a locker that does not wait (`reject()` or a zero wait).
    #[error("fair mode orders waiters; it needs a wait timeout longer than zero")]
    FairWithoutWaiting,
    /// Fair mode's tickets would live shorter than 10 ms, or longer than a day.
    #[error("fair-mode tickets need to live from 10 ms to 24 h, got {0:?}")]
    TicketTtlOutOfRange(Duration),
    /// The longest local run is zero, or longer than 256 holds.
    #[error("a local run has from 1 to 256 holds (1 turns handing on off), got {0}")]
    LocalRunOutOfRange(u32),
    /// The holder label is empty, longer than 128 bytes, or has a control character.
    #[error("a holder label has 1 to {MAX_LABEL_LEN} bytes and no control characters, got {0:?}")]
    InvalidHolderLabel(String),
    /// The prefix and the longest key do not fit the backend's longest lock name.
    #[error(
        "the prefix ({prefix} bytes) and keys of up to {max_key_len} bytes do not fit the \
         backend's {backend_max} bytes per lock name"
    )]
    KeysTooLongForBackend {
        /// The prefix's length.
        prefix: usize,
        /// The longest key asked for.
        max_key_len: usize,
        /// The backend's longest name.
        backend_max: usize,
    },
}

/// Builds a [`Locker`]: set what differs from the defaults, then [`build`](Self::build), which
/// checks the settings together and against the backend.
///
/// Defaults: prefix `lock:`, lease TTL 10 s (or the backend's longest, if shorter) renewed every
/// TTL/3, work aborted if the lease is lost, wait up to 3 s for a busy lock (woken by release
/// announcements where the backend has a wait queue, else polling with backoff from 10 ms to
/// 250 ms), store calls slower than 1 s count as failed, keys up to 256 bytes (or what the
/// backend's names allow).
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use tower_lock::{Locker, MemoryBackend};
///
/// let locker = Locker::builder(MemoryBackend::new())
///     .prefix("jobs:")
///     .ttl(Duration::from_secs(30))
///     .wait(Duration::from_secs(10))
///     .build()?;
/// # Ok::<_, tower_lock::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct LockerBuilder<B> {
    backend: Arc<B>,
    held: Arc<AtomicUsize>,
    hold_times: Arc<HoldTimes>,
    settings: Settings,
    max_key_len: Option<usize>,
    backoff: (Duration, Duration),
    waiting: BusyChoices,
    holder_label: Option<String>,
}

/// The three independent answers to "the lock is busy": how long to wait, how to learn that
/// it may be free, and whether to queue fairly. Combined into a [`BusyPolicy`] when built.
#[derive(Clone, Copy, Debug)]
struct BusyChoices {
    timeout: Duration,
    polling: bool,
    fair: Option<Duration>,
}

impl BusyChoices {
    fn of(policy: BusyPolicy) -> Self {
        let (polling, fair) = match policy {
            BusyPolicy::Wait {
                mode: WaitMode::Polling,
                ..
            } => (true, None),
            BusyPolicy::Wait {
                mode: WaitMode::Fair { ticket_ttl },
                ..
            } => (false, Some(ticket_ttl)),
            _ => (false, None),
        };
        Self {
            timeout: policy.timeout(),
            polling,
            fair,
        }
    }

    fn policy(self) -> Result<BusyPolicy, ConfigError> {
        let mode = match (self.fair, self.polling) {
            (Some(_), true) => return Err(ConfigError::FairPolling),
            (Some(_), false) if self.timeout.is_zero() => {
                return Err(ConfigError::FairWithoutWaiting);
            }
            (Some(ticket_ttl), false) if !(MIN_TTL..=MAX_TTL).contains(&ticket_ttl) => {
                return Err(ConfigError::TicketTtlOutOfRange(ticket_ttl));
            }
            (Some(ticket_ttl), false) => WaitMode::Fair { ticket_ttl },
            (None, true) => WaitMode::Polling,
            (None, false) => WaitMode::Notified,
        };
        Ok(if self.timeout.is_zero() {
            BusyPolicy::Reject
        } else {
            BusyPolicy::Wait {
                timeout: self.timeout,
                mode,
            }
        })
    }
}

impl<B: LockBackend> LockerBuilder<B> {
    pub(crate) fn new(backend: Arc<B>) -> Self {
        let settings = Settings::defaults(backend.max_name_len(), backend.max_ttl());
        Self {
            backend,
            held: Arc::default(),
            hold_times: Arc::default(),
            backoff: (
                settings.backoff.ceiling(0),
                settings.backoff.ceiling(u32::MAX),
            ),
            waiting: BusyChoices::of(settings.policy),
            settings,
            max_key_len: None,
            holder_label: None,
        }
    }

    /// A locker built from the defaults, which are valid by construction.
    pub(crate) fn defaults(backend: B) -> Locker<B> {
        Self::new(Arc::new(backend)).finish()
    }

    fn finish(self) -> Locker<B> {
        let group = self.settings.metrics_group.clone();
        Locker::from_inner(LockerInner {
            instruments: Instruments::new(self.backend.store_kind(), group),
            // Fair mode keeps the store's order: its writers line up, but nothing is handed on.
            lines: Lines::new(match self.settings.policy {
                BusyPolicy::Wait {
                    mode: WaitMode::Fair { .. },
                    ..
                } => 1,
                _ => self.settings.max_local_run,
            }),
            settings: self.settings,
            backend: self.backend,
            held: self.held,
            hold_times: self.hold_times,
        })
    }

    /// Prepended to every key to name the lock in the store (default `lock:`). It must not
    /// contain `{`, `}` or control characters.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.settings.prefix = prefix.into();
        self
    }

    /// The longest key accepted, in bytes, the prefix not counted (default 256, or less when
    /// the backend limits names). Longer keys are refused ([`KeyError::TooLong`]).
    ///
    /// [`KeyError::TooLong`]: crate::key::KeyError::TooLong
    pub fn max_key_len(mut self, max: usize) -> Self {
        self.max_key_len = Some(max);
        self
    }

    /// How long a lease lasts unless renewed (default 10 s; from 10 ms to 24 h): how long a
    /// crashed, paused or partitioned holder blocks the key. While a lock is held it is renewed
    /// every TTL/3; without renewal, choose it longer than the slowest work.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.settings.ttl = ttl;
        self
    }

    /// Whether leases are renewed every TTL/3 while a lock is held (default `true`). Without
    /// renewal a lease simply ends after the TTL, and slower work loses its lock.
    pub fn renew(mut self, renew: bool) -> Self {
        self.settings.renew = renew;
        self
    }

    /// What happens to work whose lease is lost (default [`OnLost::Abort`]).
    pub fn on_lost(mut self, on_lost: OnLost) -> Self {
        self.settings.on_lost = on_lost;
        self
    }

    /// The `group` label of this locker's metrics (see [`telemetry`](crate::telemetry)):
    /// a bounded name for the locks it takes — `payments`, `nightly-report`. Unset, locks taken
    /// through the HTTP layer with axum are grouped by their route's pattern, others as
    /// `default`. Never make it per key: every value is a series of its own.
    ///
    /// ```
    /// use tower_lock::{Locker, MemoryBackend};
    ///
    /// let locker = Locker::builder(MemoryBackend::new())
    ///     .metrics_group("invoices")
    ///     .build()
    ///     .unwrap();
    /// # drop(locker);
    /// ```
    pub fn metrics_group(mut self, group: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        self.settings.metrics_group = Some(SharedString::from(group.into()));
        self
    }

    /// Answer busy at once when the lock is held: the same as a zero [`wait`](Self::wait).
    pub fn reject(self) -> Self {
        self.wait(Duration::ZERO)
    }

    /// How long to wait for a held lock (default 3 s) before answering busy; zero rejects at
    /// once. How the waiter learns that the lock may be free is set apart: woken when its
    /// release is announced (the default; backends without a wait queue poll), by polling
    /// ([`wait_polling`](Self::wait_polling)), or in a fair line ([`fair`](Self::fair)).
    /// Every caller is answered within `timeout` and one [store
    /// timeout](Self::store_timeout) (an attempt sent just before the wait ends).
    pub fn wait(mut self, timeout: Duration) -> Self {
        self.waiting.timeout = timeout;
        self
    }

    /// Wait up to `timeout` for a held lock by retrying on a timer with the
    /// [`backoff`](Self::backoff): no announcements needed. Cannot be combined with
    /// [`fair`](Self::fair).
    pub fn wait_polling(mut self, timeout: Duration) -> Self {
        self.waiting.timeout = timeout;
        self.waiting.polling = true;
        self
    }

    /// Serve waiters first come, first served across all processes, however long they wait
    /// ([`wait`](Self::wait); a fair locker must wait). A waiter's ticket expires after
    /// `ticket_ttl` (from 10 ms to 24 h; 3 s is a good start) unless refreshed, so a crashed waiter
    /// holds up the line at most that long. Needs a backend with a wait queue.
    ///
    /// When `ticket_ttl` is a little over 1.5 × the lease TTL (the ticket is renewed every third
    /// of its TTL, so it always outlives a lease), a release hands the lock straight to the
    /// next waiter: nobody can take it in between, and the waiter, woken, asks for it and is
    /// given it with a fresh lease.
    ///
    /// Fairness orders the waiters of one key held as a mutex. Waiters in notified mode queue
    /// in the same line (one ticket per process), but a first attempt and polling waiters do
    /// not: for strict order, make every locker of the same keys fair. Shared holds (read,
    /// write, permits) and several keys at once wait as in notified mode.
    pub fn fair(mut self, ticket_ttl: Duration) -> Self {
        self.waiting.fair = Some(ticket_ttl);
        self
    }

    /// The bounds of the exponential backoff with full jitter between polling attempts
    /// (default 10 ms to 250 ms): before retry `n` a waiter sleeps a random time below
    /// `min(max, initial × 2ⁿ)`, never past the holder's lease or the wait deadline.
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.backoff = (initial, max);
        self
    }

    /// How many holds in a row a lock may pass among this locker's tasks before it is released
    /// in the store (default 8; from 1 to 256; 1 turns it off). A task releasing a mutex or
    /// write lock while another task of this locker waits for it hands the lock straight to
    /// that task — no store round trip; after `holds` holds in a row, the lock goes back to
    /// the store, so that other processes' waiters get their turn (they wait at most that many
    /// holds more). The lease and its renewal carry over; every hold gets a fence of its own,
    /// larger than the one before it and smaller than any later holder's
    /// ([`fencing`](crate::fencing)). Readers share likewise: the readers of a key waiting for
    /// one store answer all come in with the one hold it grants (1 turns that off too). Fair
    /// mode keeps the store's strict order instead.
    pub fn max_local_run(mut self, holds: u32) -> Self {
        self.settings.max_local_run = holds;
        self
    }

    /// How long one store call may take before it counts as failed (default 1 s).
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.settings.store_timeout = timeout;
        self
    }

    /// Records this locker's holds in `recording` rather than in the process's history: one
    /// simulated process among several in one OS process
    /// ([`testing::history`](crate::testing::history)).
    #[cfg(any(test, feature = "test-util"))]
    pub fn recorded_in(mut self, recording: &crate::testing::history::Recording) -> Self {
        self.settings.observer = recording.observer();
        self
    }

    /// Who holds this locker's locks, as operators read it in the store
    /// ([`Locker::inspect`]): stored with each grant, readable from any process. Default: the
    /// host name and process id (`web-7f9c:4711`). At most 128 bytes, no control characters.
    pub fn holder_label(mut self, label: &str) -> Self {
        self.holder_label = Some(label.to_owned());
        self
    }

    /// Checks the settings together and against the backend, and builds the locker.
    pub fn build(mut self) -> Result<Locker<B>, ConfigError> {
        let settings = &mut self.settings;
        if settings.ttl < MIN_TTL {
            return Err(ConfigError::TtlTooShort(settings.ttl));
        }
        if settings.ttl > MAX_TTL {
            return Err(ConfigError::TtlTooLong(settings.ttl));
        }
        if let Some(max) = self.backend.max_ttl()
            && settings.ttl > max
        {
            let ttl = settings.ttl;
            return Err(ConfigError::TtlTooLongForBackend { ttl, max });
        }
        if settings.prefix.contains(['{', '}'])
            || settings.prefix.bytes().any(|b| b.is_ascii_control())
        {
            return Err(ConfigError::InvalidPrefix(settings.prefix.clone()));
        }
        let (initial, max) = self.backoff;
        settings.backoff =
            Backoff::new(initial, max).ok_or(ConfigError::InvalidBackoff { initial, max })?;
        if settings.store_timeout.is_zero() {
            return Err(ConfigError::ZeroStoreTimeout);
        }
        if !(1..=MAX_LOCAL_RUN).contains(&settings.max_local_run) {
            return Err(ConfigError::LocalRunOutOfRange(settings.max_local_run));
        }
        if let Some(label) = &self.holder_label {
            if !holder_label::is_valid(label) {
                return Err(ConfigError::InvalidHolderLabel(label.clone()));
            }
            settings.holder = holder_label::interned(label);
        }
        settings.policy = self.waiting.policy()?;
        if self.waiting.fair.is_some() && self.backend.wait_queue().is_none() {
            return Err(ConfigError::FairWithoutQueue);
        }
        settings.max_key_len = self.max_key_len.unwrap_or(DEFAULT_MAX_KEY_LEN);
        if let Some(backend_max) = self.backend.max_name_len() {
            let fits = settings.prefix.len() + settings.max_key_len <= backend_max;
            match self.max_key_len {
                Some(max_key_len) if !fits => {
                    return Err(ConfigError::KeysTooLongForBackend {
                        prefix: settings.prefix.len(),
                        max_key_len,
                        backend_max,
                    });
                }
                None => {
                    let room = backend_max.saturating_sub(settings.prefix.len());
                    settings.max_key_len = settings.max_key_len.min(room);
                }
                Some(_) => {}
            }
        }
        Ok(self.finish())
    }
}
