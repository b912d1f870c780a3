//! One route under a lock kept in the process: requests on the same coupon take turns, requests
//! on different coupons run at once. For one instance, or tests; `redis.rs` is the same across
//! replicas.
//!
//! ```sh
//! cargo run -p tower-lock --example memory                # port 3000, or PORT=3001 before it
//! curl -X POST localhost:3000/coupons/42/claim   # claimed coupon:42 under fence 256
//! ```

use std::time::Duration;

use axum::{Router, routing::post};
use tower_lock::{LockGuard, LockLayer, Locker, MemoryBackend, key::KeyTemplate};

async fn claim(lock: LockGuard) -> String {
    tokio::time::sleep(Duration::from_millis(100)).await; // read the stock, check, write it
    let fence = lock.fence().map_or(0, |fence| fence.get());
    format!("claimed {} under fence {fence}\n", lock.key())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let locker = Locker::builder(MemoryBackend::new())
        .wait(Duration::from_secs(3)) // a busy coupon: wait up to 3 s, then 409
        .build()?;
    let lock = LockLayer::new(locker, KeyTemplate::parse("coupon:{path id}")?);
    let app = Router::new()
        .route("/coupons/{id}/claim", post(claim))
        .route_layer(lock);

    let port = std::env::var("PORT").unwrap_or_else(|_| "3000".into());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    println!("POST http://{}/coupons/42/claim", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
