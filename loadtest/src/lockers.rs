//! The lock implementations lockbench compares, behind one interface: hold a key while a
//! piece of work runs, and count the Redis round trips it took.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::request::Parts;
use http::{Request, Response};
use redis::Script;
use redis::aio::MultiplexedConnection;
use tower::util::BoxCloneSyncService;
use tower::{Layer, ServiceExt, service_fn};
use tower_lock::backend::CountingBackend;
use tower_lock::key::KeyError;
use tower_lock::{LockLayer, OwnerToken, RedisBackend};

/// Lease TTL every implementation uses.
pub const TTL: Duration = Duration::from_secs(10);
/// How long a contender may wait before an implementation gives up (then it asks again).
const WAIT: Duration = Duration::from_secs(30);
/// The naive loop's fixed sleep between attempts, as in the seed articles.
const NAIVE_SLEEP: Duration = Duration::from_millis(100);

/// The implementations, by the names used on the command line and in JSON.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Impl {
    /// tower-lock's `LockService`, waiting woken by release announcements.
    TowerLockNotified,
    /// tower-lock's `LockService`, waiting by polling with backoff.
    TowerLockPolling,
    /// tower-lock's `LockService` in fair (FIFO) mode.
    TowerLockFair,
    /// SET NX PX, sleep 100 ms, retry; compare-and-delete release.
    SeedNaive,
    /// The rslock crate: `lock()` again whenever it gives up, `unlock()` after.
    Rslock,
}

impl Impl {
    pub const HOT_KEY: [Impl; 5] = [
        Impl::TowerLockNotified,
        Impl::TowerLockPolling,
        Impl::TowerLockFair,
        Impl::SeedNaive,
        Impl::Rslock,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Impl::TowerLockNotified => "tower-lock-notified",
            Impl::TowerLockPolling => "tower-lock-polling",
            Impl::TowerLockFair => "tower-lock-fair",
            Impl::SeedNaive => "seed-naive",
            Impl::Rslock => "rslock",
        }
    }

    /// Whether the client counts its own round trips (rslock's are read off the server).
    pub fn counts_round_trips(self) -> bool {
        self != Impl::Rslock
    }
}

/// The response body of the benchmark's inner service: the value the work produced.
pub struct Outcome<T>(Option<T>);

impl<T> From<String> for Outcome<T> {
    fn from(_: String) -> Self {
        Self(None)
    }
}

type LockedService<T> = BoxCloneSyncService<Request<Work<T>>, Response<Outcome<T>>, Infallible>;

/// The work to run under the lock, carried in the request.
pub struct Work<T>(std::pin::Pin<Box<dyn Future<Output = T> + Send>>);

/// One implementation, connected.
pub enum Locker<T> {
    TowerLock {
        service: LockedService<T>,
        /// Shares its counts with the backend inside the service: one call, one round trip.
        backend: CountingBackend<RedisBackend>,
    },
    SeedNaive {
        connection: MultiplexedConnection,
        release: Arc<Script>,
    },
    Rslock(rslock::LockManager),
}

/// The lock key travels in this header.
fn key_of(parts: &Parts) -> Result<Option<String>, KeyError> {
    Ok(parts
        .headers
        .get("x-key")
        .and_then(|key| key.to_str().ok())
        .map(str::to_owned))
}

impl<T: Send + 'static> Locker<T> {
    /// Connects `which` to the Redis at `url`.
    pub async fn connect(which: Impl, url: &str) -> Self {
        let layer = |backend: CountingBackend<RedisBackend>| {
            let layer = LockLayer::new(backend, key_of).ttl(TTL);
            match which {
                Impl::TowerLockNotified => layer.wait(WAIT),
                Impl::TowerLockPolling => layer.wait_polling(WAIT),
                _ => layer.wait(WAIT).fair(Duration::from_secs(3)),
            }
        };
        match which {
            Impl::TowerLockNotified | Impl::TowerLockPolling | Impl::TowerLockFair => {
                let backend = CountingBackend::new(
                    RedisBackend::connect(url).await.expect("Redis reachable"),
                );
                let inner = service_fn(|request: Request<Work<T>>| async move {
                    let output = request.into_body().0.await;
                    Ok::<_, Infallible>(Response::new(Outcome(Some(output))))
                });
                Locker::TowerLock {
                    service: BoxCloneSyncService::new(layer(backend.clone()).layer(inner)),
                    backend,
                }
            }
            Impl::SeedNaive => {
                let client = redis::Client::open(url).expect("a valid Redis URL");
                Locker::SeedNaive {
                    connection: client
                        .get_multiplexed_async_connection()
                        .await
                        .expect("Redis reachable"),
                    release: Arc::new(Script::new(
                        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
                    )),
                }
            }
            Impl::Rslock => Locker::Rslock(rslock::LockManager::new(vec![url])),
        }
    }

    /// Round trips of tower-lock's backend so far (the others count theirs in `with_lock`).
    pub fn backend_round_trips(&self) -> u64 {
        match self {
            Locker::TowerLock { backend, .. } => backend.counts().total(),
            Locker::SeedNaive { .. } | Locker::Rslock(_) => 0,
        }
    }

    /// Runs `work` while holding `key`, waiting as long as it takes. Round trips of the naive
    /// loop are added to `calls`.
    pub async fn with_lock(
        &self,
        key: &str,
        work: impl Future<Output = T> + Send + 'static,
        calls: &AtomicU64,
    ) -> T {
        match self {
            Locker::TowerLock { service, .. } => {
                let request = Request::builder()
                    .header("x-key", key)
                    .body(Work(Box::pin(work)))
                    .expect("a valid request");
                let Ok(response) = service.clone().oneshot(request).await;
                match response.into_body().0 {
                    Some(output) => output,
                    None => {
                        panic!("tower-lock gave up on {key}: busy for {WAIT:?}, or Redis failed")
                    }
                }
            }
            Locker::SeedNaive {
                connection,
                release,
            } => {
                let token = OwnerToken::new().to_string();
                let mut connection = connection.clone();
                loop {
                    calls.fetch_add(1, Ordering::Relaxed);
                    let taken: Option<String> = redis::cmd("SET")
                        .arg(key)
                        .arg(&token)
                        .arg("NX")
                        .arg("PX")
                        .arg(TTL.as_millis() as u64)
                        .query_async(&mut connection)
                        .await
                        .expect("Redis answers");
                    if taken.is_some() {
                        break;
                    }
                    tokio::time::sleep(NAIVE_SLEEP).await;
                }
                let output = work.await;
                calls.fetch_add(1, Ordering::Relaxed);
                let _: i64 = release
                    .key(key)
                    .arg(&token)
                    .invoke_async(&mut connection)
                    .await
                    .expect("Redis answers");
                output
            }
            Locker::Rslock(manager) => {
                let lock = loop {
                    if let Ok(lock) = manager.lock(key.as_bytes(), TTL).await {
                        break lock;
                    }
                };
                let output = work.await;
                manager.unlock(&lock).await;
                output
            }
        }
    }
}
