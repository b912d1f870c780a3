//! Scenario `soak` (Redis, or `--backend postgres`): a steady, moderate load for a long time
//! (`--soak-minutes`, default 30), sampled twice a minute — the process's resident memory,
//! its open sockets, and the objects the store keeps (Redis: its keys; PostgreSQL: the lease
//! table's rows) — to show whether anything grows once the load is warm.
//!
//! The load: 16 tasks, each locking one of 1 000 keys (a mutex, held 1 ms) and resting 20 ms,
//! and 4 tasks locking one hot key, waiting for it, holding it 1 ms: about 1 000 locks a second,
//! every key's lock taken again and again, with waiters queueing on the hot one.

use std::time::Duration;

use integration_tests::{PostgresSchema, RedisServer};
use sqlx::PgPool;
use tokio::time::{Instant, sleep};
use tower_lock::backend::LockBackend;
use tower_lock::backend::postgres::{DEFAULT_TABLE, PostgresBackend};
use tower_lock::{Locker, RedisBackend};

/// How often the figures are sampled.
const EVERY: Duration = Duration::from_secs(30);

/// One sample of the figures.
#[derive(Clone, Copy, Debug)]
struct Sample {
    minute: f64,
    locks: u64,
    rss_kib: u64,
    sockets: usize,
    store_objects: i64,
}

/// Runs the soak on the store `postgres` says, for `minutes`, printing a line per sample and
/// the growth from the end of the warm-up (the first sixth) to the end.
pub async fn run(postgres: bool, minutes: u64) {
    let length = Duration::from_secs(minutes * 60);
    if postgres {
        let schema = PostgresSchema::create().await;
        let backend = PostgresBackend::connect(&schema.url())
            .await
            .expect("PostgreSQL reachable");
        let (pool, table) = (schema.pool().await, schema.table(DEFAULT_TABLE));
        soak("PostgreSQL", backend, length, || lease_rows(&pool, &table)).await;
    } else {
        let redis = RedisServer::start();
        let backend = RedisBackend::connect(redis.url())
            .await
            .expect("Redis reachable");
        let mut connection = redis.client().get_multiplexed_async_connection().await;
        let connection = connection.as_mut().expect("Redis reachable");
        soak("Redis", backend, length, || {
            let mut connection = connection.clone();
            async move {
                redis::cmd("DBSIZE")
                    .query_async::<i64>(&mut connection)
                    .await
                    .unwrap_or(-1)
            }
        })
        .await;
    }
}

async fn lease_rows(pool: &PgPool, table: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(pool)
        .await
        .unwrap_or(-1)
}

async fn soak<B, F>(store: &str, backend: B, length: Duration, objects: impl Fn() -> F)
where
    B: LockBackend,
    F: Future<Output = i64>,
{
    let locker = Locker::builder(backend)
        .wait(Duration::from_secs(10))
        .build()
        .expect("valid settings");
    let locks = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let load = |hot: bool| {
        let (locker, locks) = (locker.clone(), std::sync::Arc::clone(&locks));
        tokio::spawn(async move {
            loop {
                let key = match hot {
                    true => "soak:hot".to_owned(),
                    false => format!("soak:{}", fastrand::u32(..1_000)),
                };
                let held = locker.with_lock(&key, |_| sleep(Duration::from_millis(1)));
                if held.await.is_ok() {
                    locks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                if !hot {
                    sleep(Duration::from_millis(20)).await;
                }
            }
        })
    };
    let tasks: Vec<_> = (0..16)
        .map(|_| load(false))
        .chain((0..4).map(|_| load(true)))
        .collect();

    println!("soak on {store} for {length:?}: minute, locks, RSS KiB, open sockets, store objects");
    let started = Instant::now();
    let mut samples = Vec::new();
    while started.elapsed() < length {
        sleep(EVERY.min(length)).await;
        let sample = Sample {
            minute: started.elapsed().as_secs_f64() / 60.0,
            locks: locks.load(std::sync::atomic::Ordering::Relaxed),
            rss_kib: resident_kib(),
            sockets: open_sockets(),
            store_objects: objects().await,
        };
        println!(
            "{:>6.1} {:>10} {:>8} {:>4} {:>8}",
            sample.minute, sample.locks, sample.rss_kib, sample.sockets, sample.store_objects
        );
        samples.push(sample);
    }
    tasks.iter().for_each(tokio::task::JoinHandle::abort);
    summarize(store, &samples);
}

/// The growth from the end of the warm-up (the first sixth of the samples) to the last one.
fn summarize(store: &str, samples: &[Sample]) {
    let (Some(warm), Some(last)) = (samples.get(samples.len() / 6), samples.last()) else {
        return;
    };
    let max_rss = samples[samples.len() / 6..]
        .iter()
        .map(|sample| sample.rss_kib)
        .max()
        .unwrap_or_default();
    let rate = (last.locks - warm.locks) as f64 / ((last.minute - warm.minute) * 60.0).max(1.0);
    println!(
        "{store}: {} locks in {:.0} min ({rate:.0}/s after the warm-up); from minute {:.1} to \
         {:.1}: RSS {} → {} KiB (peak {max_rss}), open sockets {} → {}, store objects {} → {}",
        last.locks,
        last.minute,
        warm.minute,
        last.minute,
        warm.rss_kib,
        last.rss_kib,
        warm.sockets,
        last.sockets,
        warm.store_objects,
        last.store_objects,
    );
}

/// The process's resident set (`VmRSS`), in KiB.
fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_default()
}

/// The process's open sockets: its connections to the store (and the sampler's).
fn open_sockets() -> usize {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    fds.flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count()
}
