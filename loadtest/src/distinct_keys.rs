//! Scenario `distinct-keys`: tasks lock and unlock keys nobody else uses, as fast as they can.
//! What the lock costs each request, and how close it runs to Redis's own limit.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use redis::Script;
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;
use tower::util::BoxCloneSyncService;
use tower::{Layer, ServiceExt, service_fn};
use tower_lock::backend::any::AnyBackend;
use tower_lock::backend::{Attempt, LockBackend, LockRequest, OwnerToken};
use tower_lock::key::KeyError;
use tower_lock::{LockLayer, Locker, RedisBackend, ResponseBody};

use crate::cpu;
use crate::lease_settings::TTL;
use crate::report::percentile;

/// The fencing counter `raw-scripts` increments. tower-lock picks the counter of the lock's
/// hash slot; on one Redis node, which counter it is costs nothing.
pub const RAW_FENCE_COUNTER: &str = "tower-lock:fence:{0}";

/// The implementations compared, by their names in the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PairImpl {
    /// tower-lock's own acquire pipeline and release script, called directly: the ceiling
    /// of its design.
    RawScripts,
    /// `SET NX PX` and a compare-and-delete script, called directly.
    SeedMinimal,
    /// tower-lock's `RedisBackend` (fencing on, the default).
    TowerLock,
    /// tower-lock's `RedisBackend` with `fencing(false)`.
    TowerLockNofence,
    /// tower-lock's engine: `Locker::with_lock` around no work.
    TowerLockEngine,
    /// The same engine on the store chosen at run time: `AnyBackend::connect(url)`.
    TowerLockAnyEngine,
    /// tower-lock's `LockService` around a trivial inner service (no HTTP).
    TowerLockService,
    /// rslock's `lock` and `unlock`.
    Rslock,
}

impl PairImpl {
    pub const ALL: [PairImpl; 8] = [
        PairImpl::RawScripts,
        PairImpl::SeedMinimal,
        PairImpl::TowerLock,
        PairImpl::TowerLockNofence,
        PairImpl::TowerLockEngine,
        PairImpl::TowerLockAnyEngine,
        PairImpl::TowerLockService,
        PairImpl::Rslock,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PairImpl::RawScripts => "raw-scripts",
            PairImpl::SeedMinimal => "seed-minimal",
            PairImpl::TowerLock => "tower-lock",
            PairImpl::TowerLockNofence => "tower-lock-nofence",
            PairImpl::TowerLockEngine => "tower-lock-engine",
            PairImpl::TowerLockAnyEngine => "tower-lock-any-engine",
            PairImpl::TowerLockService => "tower-lock-service",
            PairImpl::Rslock => "rslock",
        }
    }
}

/// One line of the report.
#[derive(Debug, serde::Serialize)]
pub struct PairSummary {
    #[serde(rename = "impl")]
    pub which: &'static str,
    pub scenario: &'static str,
    pub concurrency: usize,
    pub pairs_per_s: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    /// lockbench's own CPU time per pair (every task, the runtime and the kernel's share of
    /// its sockets), in µs.
    pub client_cpu_us: f64,
    /// The Redis server's CPU time per pair, in µs.
    pub redis_cpu_us: f64,
}

/// The layer's service: empty requests, answered by a body that holds the lock until read.
type Service =
    BoxCloneSyncService<Request<Full<Bytes>>, Response<ResponseBody<String>>, Infallible>;

enum Pairs {
    Raw {
        connection: MultiplexedConnection,
        release: Arc<Script>,
    },
    Seed {
        connection: MultiplexedConnection,
        release: Arc<Script>,
    },
    Backend(RedisBackend),
    Engine(Locker<RedisBackend>),
    AnyEngine(Locker<AnyBackend>),
    Service(Service),
    Rslock(rslock::LockManager),
}

fn key_of(parts: &Parts) -> Result<Option<String>, KeyError> {
    Ok(parts
        .headers
        .get("x-key")
        .and_then(|key| key.to_str().ok())
        .map(str::to_owned))
}

impl Pairing for Pairs {
    async fn pair(&self, key: &str) {
        self.pair_once(key).await;
    }
}

impl Pairs {
    async fn connect(which: PairImpl, url: &str) -> Self {
        let client = redis::Client::open(url).expect("a valid Redis URL");
        let plain = || async {
            client
                .get_multiplexed_async_connection()
                .await
                .expect("Redis reachable")
        };
        match which {
            PairImpl::RawScripts => Pairs::Raw {
                connection: plain().await,
                release: Arc::new(Script::new(include_str!(
                    "../../middleware/src/backend/redis/lua/release.lua"
                ))),
            },
            PairImpl::SeedMinimal => Pairs::Seed {
                connection: plain().await,
                release: Arc::new(Script::new(
                    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
                )),
            },
            PairImpl::TowerLock => {
                Pairs::Backend(RedisBackend::connect(url).await.expect("Redis reachable"))
            }
            PairImpl::TowerLockNofence => Pairs::Backend(
                RedisBackend::connect(url)
                    .await
                    .expect("Redis reachable")
                    .fencing(false),
            ),
            PairImpl::TowerLockEngine => {
                let backend = RedisBackend::connect(url).await.expect("Redis reachable");
                Pairs::Engine(engine(backend))
            }
            PairImpl::TowerLockAnyEngine => {
                let backend = AnyBackend::connect(url).await.expect("Redis reachable");
                Pairs::AnyEngine(engine(backend))
            }
            PairImpl::TowerLockService => {
                let backend = RedisBackend::connect(url).await.expect("Redis reachable");
                let inner = service_fn(|_: Request<Full<Bytes>>| async {
                    Ok::<_, Infallible>(Response::new(String::new()))
                });
                let service = LockLayer::new(
                    Locker::builder(backend).ttl(TTL).reject().build().unwrap(),
                    key_of,
                )
                .layer(inner);
                Pairs::Service(BoxCloneSyncService::new(service))
            }
            PairImpl::Rslock => Pairs::Rslock(rslock::LockManager::new(vec![url])),
        }
    }

    /// Locks and unlocks `key` once.
    async fn pair_once(&self, key: &str) {
        match self {
            Pairs::Raw {
                connection,
                release,
            } => {
                let (mut connection, token) = (connection.clone(), OwnerToken::new().to_string());
                let lock = format!("{{{key}}}");
                let (taken, _fence): (Option<()>, u64) = redis::pipe()
                    .cmd("SET")
                    .arg(&lock)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(TTL.as_millis() as u64)
                    .cmd("INCR")
                    .arg(RAW_FENCE_COUNTER)
                    .query_async(&mut connection)
                    .await
                    .expect("Redis answers");
                assert!(taken.is_some(), "a distinct key is free");
                let _: i64 = release
                    .key(&lock)
                    .arg(&token)
                    .invoke_async(&mut connection)
                    .await
                    .expect("Redis answers");
            }
            Pairs::Seed {
                connection,
                release,
            } => {
                let (mut connection, token) = (connection.clone(), OwnerToken::new().to_string());
                let taken: Option<String> = redis::cmd("SET")
                    .arg(key)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(TTL.as_millis() as u64)
                    .query_async(&mut connection)
                    .await
                    .expect("Redis answers");
                assert!(taken.is_some(), "a distinct key is free");
                let _: i64 = release
                    .key(key)
                    .arg(&token)
                    .invoke_async(&mut connection)
                    .await
                    .expect("Redis answers");
            }
            Pairs::Backend(backend) => {
                let request = LockRequest::new(OwnerToken::new(), TTL);
                let answer = backend.acquire(key, request).await;
                let Ok(Attempt::Acquired(grant)) = answer else {
                    panic!("a distinct key is free: {answer:?}");
                };
                backend
                    .release(key, &grant.lease)
                    .await
                    .expect("Redis answers");
            }
            Pairs::Engine(locker) => engine_pair(locker, key).await,
            Pairs::AnyEngine(locker) => engine_pair(locker, key).await,
            Pairs::Service(service) => {
                let request = Request::builder()
                    .header("x-key", key)
                    .body(Full::default())
                    .expect("a valid request");
                let Ok(response) = service.clone().oneshot(request).await;
                assert!(response.status().is_success(), "a distinct key is free");
                // The lock is released as the body ends.
                let body = response.into_body().collect().await;
                body.expect("an in-memory body");
            }
            Pairs::Rslock(manager) => {
                let lock = manager
                    .lock(key.as_bytes(), TTL)
                    .await
                    .expect("a distinct key is free");
                manager.unlock(&lock).await;
            }
        }
    }
}

/// Locks and unlocks a key once: what the distinct-keys scenario repeats.
pub trait Pairing: Send + Sync + 'static {
    fn pair(&self, key: &str) -> impl Future<Output = ()> + Send;
}

/// Runs `concurrency` tasks pairing with `pairs` on fresh keys for `duration`: every pair's
/// latency in µs.
pub async fn timed_pairs<P: Pairing>(
    pairs: Arc<P>,
    concurrency: usize,
    duration: Duration,
) -> Vec<u64> {
    let run_id = fastrand::u64(..);
    let start = Instant::now() + Duration::from_millis(100);
    let end = start + duration;
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let pairs = Arc::clone(&pairs);
            tokio::spawn(async move {
                tokio::time::sleep_until(start).await;
                let mut latencies = Vec::new();
                let mut n = 0_u64;
                while Instant::now() < end {
                    let key = format!("dk:{run_id:x}:{task}:{n}");
                    let began = Instant::now();
                    pairs.pair(&key).await;
                    latencies.push(u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX));
                    n += 1;
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("a pairing task finished"));
    }
    latencies
}

/// A locker on `backend` that rejects a busy lock: what the `*-engine` pairs run.
pub fn engine<B: LockBackend>(backend: B) -> Locker<B> {
    Locker::builder(backend)
        .ttl(TTL)
        .reject()
        .build()
        .expect("valid settings")
}

/// Locks and unlocks `key` through `locker`.
pub async fn engine_pair<B: LockBackend>(locker: &Locker<B>, key: &str) {
    let locked = locker.with_lock(key, |_| async {}).await;
    locked.expect("a distinct key is free");
}

/// Locks and unlocks `key` with `backend`'s own calls.
pub async fn backend_pair<B: LockBackend>(backend: &B, key: &str) {
    let request = LockRequest::new(OwnerToken::new(), TTL);
    let Ok(Attempt::Acquired(grant)) = backend.acquire(key, request).await else {
        panic!("a distinct key is free");
    };
    backend
        .release(key, &grant.lease)
        .await
        .expect("the store answers");
}

/// Runs `concurrency` tasks pairing with `pairs` (implementation `which`) on fresh keys for
/// `duration`, counting the CPU time lockbench spent (the store's is not measured); `pairs`
/// are dropped before it answers, so that a run's connections and sessions end with it.
pub async fn client_timed<P: Pairing>(
    which: &'static str,
    pairs: P,
    concurrency: usize,
    duration: Duration,
) -> PairSummary {
    let pairs = Arc::new(pairs);
    let client_before = cpu::own();
    let latencies = timed_pairs(Arc::clone(&pairs), concurrency, duration).await;
    let client_cpu = cpu::own() - client_before;
    drop(pairs);
    PairSummary::of(which, concurrency, duration, latencies, client_cpu, None)
}

/// Runs `concurrency` tasks pairing on fresh keys for `duration`.
pub async fn run(
    which: PairImpl,
    url: &str,
    concurrency: usize,
    duration: Duration,
) -> PairSummary {
    let pairs = Arc::new(Pairs::connect(which, url).await);
    let (client_before, redis_before) = (cpu::own(), cpu::redis(url).await);
    let latencies = timed_pairs(Arc::clone(&pairs), concurrency, duration).await;
    let (client_cpu, redis_cpu) = (
        cpu::own() - client_before,
        cpu::redis(url).await - redis_before,
    );
    PairSummary::of(
        which.name(),
        concurrency,
        duration,
        latencies,
        client_cpu,
        Some(redis_cpu),
    )
}

impl PairSummary {
    /// A run of `which` at `concurrency` for `duration`: its pairs' latencies (µs), and the
    /// CPU time they cost lockbench and, when it ran on one, Redis.
    pub fn of(
        which: &'static str,
        concurrency: usize,
        duration: Duration,
        mut latencies: Vec<u64>,
        client_cpu: Duration,
        redis_cpu: Option<Duration>,
    ) -> Self {
        let pairs_done = latencies.len().max(1) as f64;
        let per_pair = |cpu: Duration| cpu.as_secs_f64() * 1e6 / pairs_done;
        latencies.sort_unstable();
        PairSummary {
            which,
            scenario: "distinct-keys",
            concurrency,
            pairs_per_s: latencies.len() as f64 / duration.as_secs_f64(),
            p50_us: percentile(&latencies, 0.50),
            p99_us: percentile(&latencies, 0.99),
            client_cpu_us: per_pair(client_cpu),
            redis_cpu_us: redis_cpu.map_or(f64::NAN, per_pair),
        }
    }
}

/// The run with the median throughput, with the median CPU times per pair of all runs.
pub fn median(mut runs: Vec<PairSummary>) -> PairSummary {
    let middle = runs.len() / 2;
    let mut median_of = |field: fn(&PairSummary) -> f64| {
        runs.sort_by(|a, b| field(a).total_cmp(&field(b)));
        field(&runs[middle])
    };
    let client_cpu_us = median_of(|run| run.client_cpu_us);
    let redis_cpu_us = median_of(|run| run.redis_cpu_us);
    runs.sort_by(|a, b| a.pairs_per_s.total_cmp(&b.pairs_per_s));
    PairSummary {
        client_cpu_us,
        redis_cpu_us,
        ..runs.swap_remove(middle)
    }
}

/// Each implementation's throughput over `baseline`'s in the same round: (impl, median,
/// lowest, highest) for every implementation but the baseline, or nothing when it did not run.
/// The two ran back to back, so a round's ratio is spared most of the host's drift between
/// rounds, which moves the medians of the table by ±10 % and more.
pub fn ratios_to(
    rounds: &[Vec<PairSummary>],
    baseline: &str,
) -> Vec<(&'static str, f64, f64, f64)> {
    let Some(base) = rounds
        .iter()
        .find(|runs| runs.first().is_some_and(|run| run.which == baseline))
    else {
        return Vec::new();
    };
    rounds
        .iter()
        .filter(|runs| runs.first().is_some_and(|run| run.which != baseline))
        .map(|runs| {
            let mut ratios: Vec<f64> = runs
                .iter()
                .zip(base)
                .map(|(run, baseline)| run.pairs_per_s / baseline.pairs_per_s)
                .collect();
            ratios.sort_by(f64::total_cmp);
            let (lowest, highest) = (ratios[0], ratios[ratios.len() - 1]);
            (runs[0].which, ratios[ratios.len() / 2], lowest, highest)
        })
        .collect()
}

/// Prints the distinct-keys table, with each row's ratio to `raw` at the same C and the CPU
/// time a pair costs lockbench and Redis (`-` where it ran on no Redis).
pub fn print_table(rows: &[PairSummary], raw: &str) {
    println!(
        "{:<20} {:>4} {:>11} {:>8} {:>8} {:>10} {:>11} {:>10}",
        "impl", "C", "pairs/s", "p50 µs", "p99 µs", "vs raw", "client µs", "redis µs"
    );
    for row in rows {
        let raw = rows
            .iter()
            .find(|other| other.which == raw && other.concurrency == row.concurrency)
            .map(|raw| format!("{:.2}", row.pairs_per_s / raw.pairs_per_s))
            .unwrap_or_default();
        let redis_cpu = if row.redis_cpu_us.is_nan() {
            "-".to_owned()
        } else {
            format!("{:.1}", row.redis_cpu_us)
        };
        println!(
            "{:<20} {:>4} {:>11.0} {:>8} {:>8} {:>10} {:>11.1} {:>10}",
            row.which,
            row.concurrency,
            row.pairs_per_s,
            row.p50_us,
            row.p99_us,
            raw,
            row.client_cpu_us,
            redis_cpu
        );
    }
}
