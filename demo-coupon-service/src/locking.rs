//! Where claims are locked: a locker on the store a URL names, by the lock shapes that store
//! has, its settings checked.

use std::time::Duration;

use tower_lock::backend::any::{AnyBackend, AnyMutexBackend, StoreUrlError};
use tower_lock::backend::{Holding, Inspect, LockBackend, LockState};
use tower_lock::{ConfigError, LockError, Locker};

use crate::options::LockSettings;
use crate::wiring::redacted;

/// How claims are locked: the locker the lock layers share.
#[derive(Clone, Debug)]
pub enum Locking {
    /// Not at all (`--no-lock`, `--optimistic`).
    Off,
    /// In a store with every lock shape: reading a coupon shares its lock, audits take
    /// permits.
    EveryShape(Locker<AnyBackend>),
    /// In a store with mutexes only (RedLock, advisory locks, `NOWAIT` rows): reading a coupon
    /// takes its lock alone, audits run one at a time.
    MutexesOnly(Locker<AnyMutexBackend>),
}

impl Locking {
    /// Locks in `backend` (the coupon store's own, or the embedded one) with `settings`.
    ///
    /// # Errors
    ///
    /// One line naming the lock setting the store refuses and what would work.
    pub fn every_shape(backend: AnyBackend, settings: &LockSettings) -> Result<Self, String> {
        Ok(Self::EveryShape(locker(backend, settings)?))
    }

    /// Locks in the store `url` names (`--lock-store`), with `settings`.
    ///
    /// # Errors
    ///
    /// One line naming what is wrong with the URL, the store that cannot be reached, or the
    /// lock setting the store refuses.
    pub async fn connect(url: &str, settings: &LockSettings) -> Result<Self, String> {
        let backend = (AnyMutexBackend::connect(url).await)
            .map_err(|error| unusable("--lock-store", url, &error))?;
        match AnyBackend::try_from(backend) {
            Ok(backend) => Self::every_shape(backend, settings),
            Err(mutexes) => Ok(Self::MutexesOnly(locker(mutexes, settings)?)),
        }
    }

    /// Where the locks are, for the dashboard: `off`, or the store's kind (`redis`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::EveryShape(locker) => locker.backend().store_kind(),
            Self::MutexesOnly(locker) => locker.backend().store_kind(),
        }
    }

    /// The lease TTL locks are taken with (`None` when off).
    pub fn ttl(&self) -> Option<Duration> {
        match self {
            Self::Off => None,
            Self::EveryShape(locker) => Some(locker.ttl()),
            Self::MutexesOnly(locker) => Some(locker.ttl()),
        }
    }
}

/// One held lock, as an operator sees it.
#[derive(Clone, Debug)]
pub struct LockView {
    /// Its key (`coupon:42`).
    pub key: String,
    /// Its holders and waiters.
    pub state: LockState,
}

/// One page of the held locks.
#[derive(Clone, Debug, Default)]
pub struct LocksPage {
    /// The locks, in the store's order.
    pub locks: Vec<LockView>,
    /// Where the next page starts; `None` after the last.
    pub next: Option<String>,
}

impl Locking {
    /// The locks held now under `prefix`, at most `limit`, from `after` on, each with its
    /// holders and waiters (none when locking is off).
    ///
    /// # Errors
    ///
    /// The lock store's failure.
    pub async fn locks_now(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<LocksPage, LockError> {
        match self {
            Self::Off => Ok(LocksPage::default()),
            Self::EveryShape(locker) => page(locker, prefix, after, limit).await,
            Self::MutexesOnly(locker) => page(locker, prefix, after, limit).await,
        }
    }

    /// Frees the lock on `key` whatever its holders; the holders it freed (none when locking
    /// is off).
    ///
    /// # Errors
    ///
    /// A key the locker refuses, or the lock store's failure.
    pub async fn force_release(&self, key: &str) -> Result<Vec<Holding>, LockError> {
        match self {
            Self::Off => Ok(Vec::new()),
            Self::EveryShape(locker) => locker.force_release(key).await,
            Self::MutexesOnly(locker) => locker.force_release(key).await,
        }
    }
}

/// One page of `locker`'s held locks, each inspected; a lock freed between the listing and
/// its inspection is left out.
async fn page<B: Inspect>(
    locker: &Locker<B>,
    prefix: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<LocksPage, LockError> {
    let listing = locker.held_keys(prefix, after, limit).await?;
    let mut locks = Vec::with_capacity(listing.names.len());
    for key in listing.names {
        let state = locker.inspect(&key).await?;
        if state.is_held() {
            locks.push(LockView { key, state });
        }
    }
    Ok(LocksPage {
        locks,
        next: listing.next,
    })
}

/// Why the store at `url`, given as `option`, cannot be used: one line without its password,
/// and for etcd in a demo built without it, how to build one with it.
pub(crate) fn unusable(option: &str, url: &str, error: &StoreUrlError) -> String {
    match error {
        StoreUrlError::NotBuilt {
            feature: "etcd", ..
        } => format!(
            "{option} {}: this demo was built without etcd support; run it with \
             `cargo run -p demo-coupon-service --features etcd` (etcd's client needs `protoc`: \
             apt-get install protobuf-compiler)",
            redacted(url)
        ),
        error => format!("{option}: {error}"),
    }
}

/// A locker on `backend` configured as `settings` say.
///
/// # Errors
///
/// One line naming the lock setting the store refuses and what would work.
fn locker<B: LockBackend>(backend: B, settings: &LockSettings) -> Result<Locker<B>, String> {
    let builder = Locker::builder(backend)
        .wait(settings.wait)
        .renew(settings.renew)
        .max_local_run(settings.local_run)
        .on_lost(settings.on_lost);
    let builder = match settings.holder {
        Some(holder) => builder.holder_label(holder),
        None => builder,
    };
    match settings.ttl {
        Some(ttl) => builder.ttl(ttl),
        None => builder,
    }
    .build()
    .map_err(refused)
}

/// `error`, a lock setting the store refuses, as one line naming the option and what would
/// work.
fn refused(error: ConfigError) -> String {
    match error {
        ConfigError::TtlTooShort(ttl) => format!(
            "--lock-ttl-ms {}: a lease needs at least 10 ms",
            ttl.as_millis()
        ),
        ConfigError::TtlTooLong(ttl) => format!(
            "--lock-ttl-ms {}: a lease can be at most 86400000 ms (24 h); renewal keeps a lock \
             while its claim runs",
            ttl.as_millis()
        ),
        ConfigError::TtlTooLongForBackend { ttl, max } => format!(
            "--lock-ttl-ms {}: the lock store vouches for leases of at most {} ms (two thirds \
             of the session it grants); use --lock-ttl-ms {} or less, leave it out to get that, \
             or ask etcd or ZooKeeper for a longer session (?session_ms= in the URL)",
            ttl.as_millis(),
            max.as_millis(),
            max.as_millis()
        ),
        ConfigError::LocalRunOutOfRange(holds) => format!(
            "--lock-local-run {holds}: a replica hands a lock on among its requests from 1 \
             (never) to 256 times in a row"
        ),
        error => format!("the lock settings were refused: {error}"),
    }
}
