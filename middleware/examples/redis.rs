//! One route under a lock kept in Redis, shared by every replica of the service: start it twice
//! (the second on another port) and claims of one coupon take turns across both.
//!
//! ```sh
//! cargo run -p tower-lock --example redis                                   # redis://127.0.0.1:6379, port 3000
//! REDIS_URL=redis://127.0.0.1:6379 PORT=3001 cargo run -p tower-lock --example redis
//! curl -X POST localhost:3000/coupons/42/claim   # claimed coupon:42 under fence …
//! ```

use std::time::Duration;

use axum::{Router, routing::post};
use tower_lock::{LockGuard, LockLayer, Locker, RedisBackend, key::KeyTemplate};

async fn claim(lock: LockGuard) -> String {
    tokio::time::sleep(Duration::from_millis(100)).await; // read the stock, check, write it
    // The fence grows with every grant: a store that keeps the highest it has seen refuses a
    // holder that lost its lease and writes late.
    let fence = lock.fence().map_or(0, |fence| fence.get());
    format!("claimed {} under fence {fence}\n", lock.key())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let port = std::env::var("PORT").unwrap_or_else(|_| "3000".into());
    let backend = RedisBackend::connect(url.as_str()).await?;
    let locker = Locker::builder(backend)
        .ttl(Duration::from_secs(10)) // renewed every TTL/3 while the handler runs
        .wait(Duration::from_secs(3)) // woken by the release's announcement; 409 after 3 s
        .build()?;
    let lock = LockLayer::new(locker, KeyTemplate::parse("coupon:{path id}")?);
    let app = Router::new()
        .route("/coupons/{id}/claim", post(claim))
        .route_layer(lock);

    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    println!("POST http://{}/coupons/42/claim", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
