//! The stores the options name, connected: coupons in `--store` (or in this process), locks
//! beside them or in `--lock-store`, both through tower-lock's URL API.

use tower_lock::MemoryBackend;
use tower_lock::backend::any::AnyBackend;

use crate::locking::{Locking, unusable};
use crate::options::{LockSettings, Options};
use crate::state::AppState;
use crate::store::{CouponStore, Dialect, MemoryStore, RedisConnection, RedisStore, SqlStore};

/// Why `--optimistic` was refused.
const OPTIMISTIC_NEEDS_SQL: &str =
    "--optimistic needs a SQL store: --store postgres://… or --store mysql://…";

impl AppState {
    /// The state `options` ask for, connecting to the stores they name.
    ///
    /// # Errors
    ///
    /// One line naming the option, and the store and why it cannot be used.
    pub async fn from_options(options: &Options) -> Result<Self, String> {
        let work = options.work()?;
        let settings = LockSettings::from(options);
        let sql = match options.store_url() {
            Some(url) => Dialect::of_url(url)?.is_some(),
            None => false,
        };
        if options.optimistic && !sql {
            return Err(OPTIMISTIC_NEEDS_SQL.to_owned());
        }
        let unlocked = options.no_lock || options.optimistic;
        // With a lock store of its own, the coupon store takes no locks.
        let locks_beside = !unlocked && options.lock_store.is_none();
        let (store, beside) = match options.store_url() {
            Some(url) => coupon_store(url, locks_beside).await?,
            None => (
                CouponStore::Memory(MemoryStore::default()),
                Some(AnyBackend::from(MemoryBackend::new())),
            ),
        };
        let locking = match (&options.lock_store, beside) {
            (Some(url), _) if !unlocked => Locking::connect(url, &settings).await?,
            (None, Some(backend)) if !unlocked => Locking::every_shape(backend, &settings)?,
            _ => Locking::Off,
        };
        Ok(Self {
            store,
            locking,
            work,
            lock: settings,
            optimistic: options.optimistic,
            metrics: None,
            admin_token: options.admin_token()?,
        })
    }
}

/// Coupons in the store at `url`, and (`locks_beside`) that store as a lock backend. In Redis,
/// the coupons share the lock backend's connection: the claim's own commands and its lock's
/// travel together.
///
/// # Errors
///
/// One line naming the store and why it cannot be used.
async fn coupon_store(
    url: &str,
    locks_beside: bool,
) -> Result<(CouponStore, Option<AnyBackend>), String> {
    match Dialect::of_url(url)? {
        Some(dialect) => {
            let store = SqlStore::connect(url, dialect).await.map_err(|error| {
                let name = dialect.name();
                format!("cannot connect to {name} at {}: {error}", redacted(url))
            })?;
            let backend = match locks_beside {
                true => Some(store_backend(url).await?),
                false => None,
            };
            Ok((CouponStore::Sql(store), backend))
        }
        None => {
            let backend = store_backend(url).await?;
            // `memory://`: the store of this process, as without `--store`.
            if backend.downcast_ref::<MemoryBackend>().is_some() {
                let store = CouponStore::Memory(MemoryStore::default());
                return Ok((store, locks_beside.then_some(backend)));
            }
            let connection = RedisConnection::of(&backend)
                .ok_or_else(|| format!("--store {}: not a Redis store", redacted(url)))?;
            let store = CouponStore::Redis(RedisStore::new(connection));
            Ok((store, locks_beside.then_some(backend)))
        }
    }
}

/// The lock backend on the coupon store at `url`.
async fn store_backend(url: &str) -> Result<AnyBackend, String> {
    (AnyBackend::connect(url).await).map_err(|error| unusable("--store", url, &error))
}

/// `url` without its password, for logs.
pub fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}://***{}", &url[..scheme_end], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted_from_urls() {
        assert_eq!(
            redacted("redis://:secret@host:6379/0"),
            "redis://***@host:6379/0"
        );
        assert_eq!(redacted("redis://user:p@ss@host"), "redis://***@host");
        assert_eq!(redacted("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }
}
