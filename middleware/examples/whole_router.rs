//! A whole router under one lock layer, the lock key from a header: the layer runs before
//! routing, so every route behind it is locked (keys from headers or the query; a path key
//! answers 500 there). `/healthz` is served outside it, so it needs no key.
//!
//! ```sh
//! cargo run -p tower-lock --example whole_router        # port 3000, or PORT=3001 before it
//! curl -X POST localhost:3000/debit -H 'x-account: 7'   # debited account 7
//! curl -X POST localhost:3000/debit                     # 400: the header x-account is missing
//! curl localhost:3000/healthz                           # ok: not locked
//! ```
//!
//! Its dependencies beyond tower-lock: `axum`, `tokio`, `tower` (for `ServiceBuilder`) and
//! `http`.

use axum::{Router, ServiceExt, body::Body, routing::get, routing::post};
use http::{Request, Response};
use tower::ServiceBuilder;
use tower_lock::{LockGuard, LockLayer, Locker, MemoryBackend, key::header};

async fn debit(lock: LockGuard) -> String {
    format!("debited account {}\n", lock.key())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let locked = Router::new().route("/debit", post(debit));
    let lock = LockLayer::new(Locker::new(MemoryBackend::new()), header("x-account"));
    let locked = ServiceBuilder::new()
        // The layer's responses carry its own body (the lock is held until it ends): axum's
        // server takes axum's.
        .map_response(|response: Response<_>| response.map(Body::new))
        .layer(lock)
        .service(locked);

    // Routes that must not be locked (health checks, metrics) go in front, the locked router
    // behind them as the fallback.
    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .fallback_service(locked);

    let port = std::env::var("PORT").unwrap_or_else(|_| "3000".into());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    println!(
        "POST http://{}/debit with x-account",
        listener.local_addr()?
    );
    axum::serve(
        listener,
        ServiceExt::<Request<Body>>::into_make_service(app),
    )
    .await?;
    Ok(())
}
