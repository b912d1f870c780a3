//! The service's routes, and the lock layers on those that take locks.

use std::sync::LazyLock;

use axum::Router;
use axum::http::request::Parts;
use axum::routing::{MethodRouter, delete, get, post, put};
use tower_lock::backend::{LockBackend, Semaphores, SharedLocks};
use tower_lock::key::{KeyError, KeyExtractor, KeyTemplate, many};
use tower_lock::{LockLayer, Locker};

use crate::locking::Locking;
use crate::options::LockSettings;
use crate::state::AppState;
use crate::{admin, bodies, dashboard, optimistic, problem, routes, telemetry, transfers};

/// A layer taking its locks with `locker`, answering rejections as the demo does.
fn lock_layer<B: LockBackend, K: KeyExtractor>(locker: &Locker<B>, key: K) -> LockLayer<B, K> {
    LockLayer::new(locker.clone(), key)
        .body_limit(bodies::BODY_LIMIT)
        .on_rejection(problem::lock_rejection)
}

/// A coupon's lock key, `coupon:{id}`, for a valid coupon id; any other id is refused as the
/// handlers refuse it.
fn coupon_key(parts: &Parts) -> Result<Option<String>, KeyError> {
    let Some(key) = COUPON_KEY.extract(parts)? else {
        return Ok(None);
    };
    let id = key.strip_prefix("coupon:").unwrap_or_default();
    if bodies::is_coupon_id(id) {
        Ok(Some(key))
    } else {
        Err(KeyError::invalid(bodies::COUPON_ID_RULE))
    }
}

static COUPON_KEY: LazyLock<KeyTemplate> =
    LazyLock::new(|| KeyTemplate::parse("coupon:{path id}").expect("a valid key template"));

/// The coupon routes' locks: a read-write lock on `coupon:{id}` (reading a coupon shares it,
/// resetting or claiming takes it alone), and a semaphore admitting `audit_permits` audits.
fn with_locks<B: SharedLocks + Semaphores>(
    locker: &Locker<B>,
    settings: LockSettings,
    routes: Routes,
) -> Routes {
    let (coupon, audit, transfer) = mutexes(locker);
    let audit = audit.semaphore(settings.audit_permits);
    locked(routes, (coupon.read_write(), audit, transfer))
}

/// The coupon routes' locks on a store with mutexes only (RedLock, …): a mutex on `coupon:{id}`
/// for reading a coupon too, and one on `audits`, so audits run one at a time.
fn with_mutexes<B: LockBackend>(locker: &Locker<B>, routes: Routes) -> Routes {
    locked(routes, mutexes(locker))
}

/// Mutex layers on `locker` for a coupon, the audits, and a transfer's coupons.
fn mutexes<B: LockBackend>(
    locker: &Locker<B>,
) -> (
    LockLayer<B, KeyOf>,
    LockLayer<B, KeyOf>,
    LockLayer<B, impl KeyExtractor + use<B>>,
) {
    let audits: KeyOf = |_| Ok(Some("audits".to_owned()));
    let coupon: KeyOf = coupon_key;
    (
        lock_layer(locker, coupon),
        lock_layer(locker, audits),
        lock_layer(locker, many(transfers::lock_keys)),
    )
}

/// A key extractor that is a plain function.
type KeyOf = fn(&Parts) -> Result<Option<String>, KeyError>;

/// `routes` under the coupon's, the audits' and a transfer's lock layers.
fn locked<B: LockBackend, T: KeyExtractor>(
    routes: Routes,
    (coupon, audit, transfer): (LockLayer<B, KeyOf>, LockLayer<B, KeyOf>, LockLayer<B, T>),
) -> Routes {
    Routes {
        coupon: routes.coupon.route_layer(coupon.clone()),
        claim: routes.claim.route_layer(coupon),
        audit: routes.audit.route_layer(audit),
        // The body names the coupons: read them into the request before the lock looks.
        transfer: routes
            .transfer
            .route_layer(transfer)
            .route_layer(axum::middleware::from_fn(transfers::name_coupons)),
    }
}

/// The routes that take locks.
struct Routes {
    coupon: MethodRouter<AppState>,
    claim: MethodRouter<AppState>,
    audit: MethodRouter<AppState>,
    transfer: MethodRouter<AppState>,
}

/// The service's routes.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use demo_coupon_service::{AppState, app};
/// use demo_coupon_service::LockSettings;
///
/// let state = AppState::embedded(Duration::from_millis(2), LockSettings::default(), true)?;
/// let router = app(state);
/// # Ok::<_, String>(())
/// ```
pub fn app(state: AppState) -> Router {
    let routes = if state.optimistic {
        Routes {
            coupon: put(routes::reset).get(routes::show),
            claim: post(optimistic::claim),
            audit: post(routes::audit),
            transfer: post(optimistic::transfer),
        }
    } else {
        Routes {
            coupon: put(routes::reset).get(routes::show),
            claim: post(routes::claim),
            audit: post(routes::audit),
            transfer: post(transfers::transfer),
        }
    };
    let routes = match &state.locking {
        Locking::Off => routes,
        Locking::EveryShape(locker) => with_locks(locker, state.lock, routes),
        Locking::MutexesOnly(locker) => with_mutexes(locker, routes),
    };
    let router = match state.admin_token {
        Some(_) => Router::new()
            .route("/admin/locks", get(admin::locks))
            .route("/admin/locks/{*key}", delete(admin::release)),
        None => Router::new(),
    };
    router
        .route("/coupons/{id}", routes.coupon)
        .route("/coupons/{id}/claim", routes.claim)
        .route("/coupons/{id}/audit", routes.audit)
        .route("/transfers", routes.transfer)
        .route("/healthz", get(routes::healthz))
        .route("/metrics", get(telemetry::metrics))
        .route("/", get(dashboard::page))
        .route("/favicon.ico", get(dashboard::icon))
        .route("/favicon.svg", get(dashboard::icon))
        .route("/dashboard/stats", get(dashboard::stats))
        .fallback(routes::no_such_route)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(axum::middleware::from_fn(telemetry::count_responses))
        .with_state(state)
}
