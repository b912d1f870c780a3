//! [`LockGuards`]: every lock a request holds when several layers lock it.

use crate::engine::LockGuard;

/// Every lock the request holds, outermost layer first: what a handler behind nested
/// [`LockLayer`](crate::LockLayer)s reads to reach an outer layer's lock.
///
/// Each layer that takes a lock for a request puts its [`LockGuard`] in the request's
/// extensions — so a handler's `LockGuard` is the innermost one — and adds it to this list.
/// A layer whose lock an outer layer already holds adds nothing: the request holds that lock
/// once. Handlers take it as `Extension<LockGuards>` or, with the `axum` feature, as an
/// extractor of its own.
///
/// # Example
///
/// ```
/// use axum::{Router, body::Body, routing::post};
/// use http::Request;
/// use http_body_util::BodyExt;
/// use tower::ServiceExt;
/// use tower_lock::{LockGuards, LockLayer, Locker, MemoryBackend, key::KeyTemplate};
///
/// async fn claim(locks: LockGuards) -> String {
///     let keys: Vec<&str> = locks.iter().map(|lock| lock.key()).collect();
///     let tenant_fence = locks.get("tenant:acme").and_then(|lock| lock.fence());
///     format!("{keys:?} {:?}", tenant_fence.map(|fence| fence.get()))
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = MemoryBackend::new();
/// let coupon = KeyTemplate::parse("coupon:{path id}").unwrap();
/// let tenant = KeyTemplate::parse("tenant:{header x-tenant}").unwrap();
/// let app = Router::new()
///     .route("/coupons/{id}/claim", post(claim))
///     .route_layer(LockLayer::new(Locker::new(store.clone()), coupon))
///     .layer(LockLayer::new(Locker::new(store), tenant));
///
/// let request = Request::post("/coupons/42/claim")
///     .header("x-tenant", "acme")
///     .body(Body::empty())
///     .unwrap();
/// let body = app.oneshot(request).await.unwrap().into_body().collect().await.unwrap();
/// assert_eq!(body.to_bytes(), r#"["tenant:acme", "coupon:42"] Some(256)"#);
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct LockGuards {
    outermost_first: Vec<LockGuard>,
}

impl LockGuards {
    /// The guards, outermost layer first.
    pub fn iter(&self) -> impl Iterator<Item = &LockGuard> {
        self.outermost_first.iter()
    }

    /// The guard holding `key`, one of its [`keys`](LockGuard::keys).
    pub fn get(&self, key: &str) -> Option<&LockGuard> {
        self.iter()
            .find(|guard| guard.keys().any(|held| held == key))
    }

    /// How many locks the request holds.
    pub fn len(&self) -> usize {
        self.outermost_first.len()
    }

    /// Whether the request holds no lock.
    pub fn is_empty(&self) -> bool {
        self.outermost_first.is_empty()
    }

    /// These guards and `inner`, unless it is one of them (a layer that passed through).
    pub(crate) fn with_inner(mut self, inner: &LockGuard) -> Self {
        if !self.iter().any(|guard| guard.is_same_lock(inner)) {
            self.outermost_first.push(inner.clone());
        }
        self
    }
}

impl<'a> IntoIterator for &'a LockGuards {
    type Item = &'a LockGuard;
    type IntoIter = std::slice::Iter<'a, LockGuard>;

    fn into_iter(self) -> Self::IntoIter {
        self.outermost_first.iter()
    }
}
