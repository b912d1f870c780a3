//! A background job that must not run twice at once, whatever the number of replicas: three
//! workers (three replicas, here three tasks) try the nightly export every 200 ms; whoever gets
//! the lock runs it, the others skip their turn at once instead of queueing.
//!
//! ```sh
//! cargo run -p tower-lock --example background_job
//! ```
//!
//! With `RedisBackend` (or any shared store) in place of `MemoryBackend`, the workers are
//! processes on different machines.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tower_lock::{LockError, Locker, MemoryBackend};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let locker = Locker::builder(MemoryBackend::new())
        .ttl(Duration::from_secs(30)) // renewed every 10 s while the export runs
        .reject() // busy: skip this turn, another worker is exporting
        .build()?;
    let running = Arc::new(AtomicU32::new(0));

    let workers = (1..=3).map(|worker| {
        let (locker, running) = (locker.clone(), running.clone());
        tokio::spawn(async move {
            for _ in 0..5 {
                let export = locker.with_lock("job:nightly-export", |lock| {
                    let running = running.clone();
                    async move {
                        let at_once = running.fetch_add(1, Ordering::SeqCst) + 1;
                        assert_eq!(at_once, 1, "two exports at once");
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        running.fetch_sub(1, Ordering::SeqCst);
                        lock.fence().map_or(0, |fence| fence.get())
                    }
                });
                match export.await {
                    Ok(fence) => println!("worker {worker}: exported under fence {fence}"),
                    Err(LockError::Busy { .. }) => println!("worker {worker}: another exports"),
                    Err(error) => println!("worker {worker}: {error}"),
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    });
    for worker in workers.collect::<Vec<_>>() {
        worker.await?;
    }
    Ok(())
}
