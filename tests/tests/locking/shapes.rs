//! Read-write locks and semaphores against real Redis, with two backends standing in for two
//! replicas.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::{Method, Request, StatusCode};
use integration_tests::{RedisServer, granted, request, send};
use tower_lock::backend::{Attempt, LockBackend, Patience, SharedLocks};
use tower_lock::key::header;
use tower_lock::{Hold, LockGuard, LockLayer, Locker, LockerBuilder, RedisBackend};

const TTL: Duration = Duration::from_secs(10);
const TWO: std::num::NonZeroU32 = std::num::NonZeroU32::new(2).expect("two");

/// Who is inside, by hold, and the worst seen.
#[derive(Debug, Default)]
struct Inside {
    readers: AtomicUsize,
    writers: AtomicUsize,
    most_readers: AtomicUsize,
    most_holders: AtomicUsize,
    overlaps: AtomicUsize,
}

impl Inside {
    async fn visit(&self, hold: Hold, work: Duration) {
        let (mine, other) = if hold == Hold::Read {
            (&self.readers, &self.writers)
        } else {
            (&self.writers, &self.readers)
        };
        let now = mine.fetch_add(1, SeqCst) + 1;
        if hold == Hold::Read {
            self.most_readers.fetch_max(now, SeqCst);
        }
        self.most_holders.fetch_max(now, SeqCst);
        if other.load(SeqCst) > 0 || (hold == Hold::Write && now > 1) {
            self.overlaps.fetch_add(1, SeqCst);
        }
        tokio::time::sleep(work).await;
        mine.fetch_sub(1, SeqCst);
    }
}

async fn replica(
    redis: &RedisServer,
    inside: Arc<Inside>,
    configure: fn(
        LockLayer<RedisBackend, tower_lock::key::Header>,
    ) -> LockLayer<RedisBackend, tower_lock::key::Header>,
) -> Router {
    let backend = RedisBackend::connect(redis.url()).await.unwrap();
    let handler = move |axum::Extension(lock): axum::Extension<LockGuard>| {
        let inside = inside.clone();
        async move { inside.visit(lock.hold(), Duration::from_millis(50)).await }
    };
    Router::new()
        .route("/", get(handler.clone()).post(handler))
        .route_layer(configure(LockLayer::new(
            Locker::builder(backend)
                .wait(Duration::from_secs(30))
                .build()
                .unwrap(),
            header("x-key"),
        )))
}

fn send_as(app: &Router, method: Method) -> tokio::task::JoinHandle<StatusCode> {
    let request = Request::builder()
        .method(method)
        .uri("/")
        .header("x-key", "k")
        .body(Body::empty())
        .unwrap();
    let app = app.clone();
    tokio::spawn(async move { send(&app, request).await.status })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_overlap_and_writers_never_share_the_key() {
    let redis = RedisServer::start();
    let inside = Arc::new(Inside::default());
    let replicas = [
        replica(&redis, inside.clone(), LockLayer::read_write).await,
        replica(&redis, inside.clone(), LockLayer::read_write).await,
    ];

    let readers: Vec<_> = (0..20)
        .map(|i| send_as(&replicas[i % 2], Method::GET))
        .collect();
    let writers: Vec<_> = (0..6)
        .map(|i| send_as(&replicas[i % 2], Method::POST))
        .collect();
    for request in readers.into_iter().chain(writers) {
        assert_eq!(request.await.unwrap(), StatusCode::OK);
    }

    assert!(inside.most_readers.load(SeqCst) > 1, "readers overlapped");
    assert_eq!(
        inside.overlaps.load(SeqCst),
        0,
        "a writer never shared the key"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_behind_a_stream_of_readers_gets_in() {
    let redis = RedisServer::start();
    let inside = Arc::new(Inside::default());
    let app = replica(&redis, inside.clone(), LockLayer::read_write).await;
    let mut readers = vec![send_as(&app, Method::GET)];
    tokio::time::sleep(Duration::from_millis(10)).await;
    let writer = send_as(&app, Method::POST);
    let started = Instant::now();

    while !writer.is_finished() && started.elapsed() < Duration::from_secs(20) {
        readers.push(send_as(&app, Method::GET));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    assert_eq!(writer.await.unwrap(), StatusCode::OK);
    // Starved by the readers, the writer would wait until they stop coming (20 s); barring new
    // readers, it waits for the ones inside, each holding for milliseconds.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the writer got in: {:?}",
        started.elapsed()
    );
    for reader in readers {
        assert_eq!(reader.await.unwrap(), StatusCode::OK);
    }
    assert_eq!(inside.overlaps.load(SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_across_two_replicas_admits_exactly_its_permits() {
    let redis = RedisServer::start();
    let inside = Arc::new(Inside::default());
    let replicas = [
        replica(&redis, inside.clone(), |layer| layer.semaphore(TWO)).await,
        replica(&redis, inside.clone(), |layer| layer.semaphore(TWO)).await,
    ];

    let requests: Vec<_> = (0..30)
        .map(|i| send_as(&replicas[i % 2], Method::POST))
        .collect();
    for request in requests {
        assert_eq!(request.await.unwrap(), StatusCode::OK);
    }

    assert_eq!(
        inside.most_holders.load(SeqCst),
        2,
        "at most 2 at once, and 2 reached"
    );
}

#[tokio::test]
async fn without_fencing_a_writer_gets_no_token_and_no_counter_is_made() {
    let redis = RedisServer::start();
    let store = RedisBackend::connect(redis.url())
        .await
        .unwrap()
        .fencing(false);

    let written = granted(store.acquire_write("lock:w", request(TTL)).await);

    assert_eq!(written.fence, None);
    let mut connection = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let counters: Vec<String> = redis::cmd("KEYS")
        .arg("tower-lock:fence:*")
        .query_async(&mut connection)
        .await
        .unwrap();
    assert!(counters.is_empty(), "no fencing counter: {counters:?}");
}

/// The store's view of lock `w`: its key's value and remaining lease, and the waiting writers'
/// intents (token → `<arrival µs> <expiry ms>`, `!` appended to one that bars readers).
async fn lock_w(redis: &RedisServer) -> (Option<String>, i64, HashMap<String, String>) {
    let mut connection = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::pipe()
        .get("{lock:w}")
        .pttl("{lock:w}")
        .hgetall("{lock:w}:writers")
        .query_async(&mut connection)
        .await
        .unwrap()
}

#[tokio::test]
async fn readers_hold_the_lock_key_so_a_plain_set_nx_fails_until_the_last_one_leaves() {
    let redis = RedisServer::start();
    let store = RedisBackend::connect(redis.url()).await.unwrap();
    let read = |ttl| store.acquire_read("lock:w", request(ttl));
    let long = granted(read(Duration::from_secs(20)).await);
    let short = granted(read(Duration::from_secs(5)).await);

    let (value, pttl, _) = lock_w(&redis).await;
    assert_eq!(value.as_deref(), Some("readers"));
    assert!(
        pttl > 15_000,
        "the key lives as long as the longest read: {pttl}"
    );
    let mutex = store.acquire("lock:w", request(TTL)).await;
    assert!(
        matches!(mutex.unwrap(), Attempt::Busy { .. }),
        "a plain SET NX fails"
    );

    store.release("lock:w", &long.lease).await.unwrap();
    let (_, pttl, _) = lock_w(&redis).await;
    assert!(pttl <= 5_000, "now as long as the remaining read: {pttl}");
    store.release("lock:w", &short.lease).await.unwrap();
    let (value, ..) = lock_w(&redis).await;
    assert_eq!(value, None, "the last reader takes the key with it");
    granted(store.acquire_write("lock:w", request(TTL)).await);
}

#[tokio::test]
async fn a_writer_that_waited_withdraws_its_intent_when_it_gets_in() {
    let redis = RedisServer::start();
    let store = RedisBackend::connect(redis.url()).await.unwrap();
    let reader = granted(store.acquire_read("lock:w", request(TTL)).await);
    let writer = request(TTL).patience(Patience::Polls);

    let waited = store.acquire_write("lock:w", writer).await.unwrap();
    let (_, _, writers) = lock_w(&redis).await;
    assert!(matches!(waited, Attempt::Busy { .. }), "{waited:?}");
    let intent = writers.get(&writer.token.to_string());
    assert!(
        writers.len() == 1 && intent.is_some_and(|intent| intent.ends_with('!')),
        "its place in line, barring new readers (`!`: readers alone keep the writer out): \
         {writers:?}"
    );
    store.release("lock:w", &reader.lease).await.unwrap();

    granted(store.acquire_write("lock:w", writer).await);

    let (value, _, writers) = lock_w(&redis).await;
    assert!(
        writers.is_empty(),
        "readers are no longer barred once the writer is in: {writers:?}"
    );
    assert_eq!(
        value.as_deref().and_then(|value| value.get(..33)),
        Some(format!("{}*", writer.token).as_str()),
        "its release is announced to the readers it held back"
    );
}

/// A coupon route under a read-write lock on `coupon:{id}` configured by `configure`: GET reads,
/// POST writes, and both handlers wait at `gate` (reporting their method) until let out.
async fn gated_coupon(
    redis: &RedisServer,
    configure: impl FnOnce(LockerBuilder<RedisBackend>) -> LockerBuilder<RedisBackend>,
    gate: integration_tests::Gate,
) -> Router {
    let backend = RedisBackend::connect(redis.url()).await.unwrap();
    let key = tower_lock::key::KeyTemplate::parse("coupon:{path id}").unwrap();
    let handler = move |method: Method| {
        let gate = gate.clone();
        async move { gate.pass(method.to_string()).await }
    };
    Router::new()
        .route("/coupons/{id}", get(handler.clone()).post(handler))
        .route_layer(
            LockLayer::new(configure(Locker::builder(backend)).build().unwrap(), key).read_write(),
        )
}

fn coupon(app: &Router, method: Method) -> tokio::task::JoinHandle<StatusCode> {
    let request = Request::builder()
        .method(method)
        .uri("/coupons/r")
        .body(Body::empty())
        .unwrap();
    let app = app.clone();
    tokio::spawn(async move { send(&app, request).await.status })
}

/// A claim holds `coupon:r`; a second claim, made through a layer configured by `second`, is
/// refused; the first finishes. What three reads in a row answer right after.
async fn reads_after_a_refused_writer(
    second: fn(LockerBuilder<RedisBackend>) -> LockerBuilder<RedisBackend>,
) -> Vec<StatusCode> {
    let redis = RedisServer::start();
    let (gate, mut control) = integration_tests::Gate::new();
    let holding = gated_coupon(&redis, LockerBuilder::reject, gate.clone()).await;
    let refused = gated_coupon(&redis, second, gate.clone()).await;
    let readers = gated_coupon(&redis, LockerBuilder::reject, gate).await;
    let holder = coupon(&holding, Method::POST);
    assert_eq!(control.entered().await, "POST");

    assert_eq!(
        coupon(&refused, Method::POST).await.unwrap(),
        StatusCode::CONFLICT
    );
    control.let_out(1);
    assert_eq!(holder.await.unwrap(), StatusCode::OK);

    control.let_out(3);
    let mut reads = Vec::new();
    for _ in 0..3 {
        reads.push(coupon(&readers, Method::GET).await.unwrap());
    }
    reads
}

#[tokio::test]
async fn a_rejected_writer_leaves_nothing_that_keeps_readers_out() {
    let reads = reads_after_a_refused_writer(LockerBuilder::reject).await;

    assert_eq!(
        reads,
        [StatusCode::OK; 3],
        "no intent of the rejected writer bars them"
    );
}

#[tokio::test]
async fn a_writer_that_gave_up_waiting_leaves_nothing_that_keeps_readers_out() {
    let reads =
        reads_after_a_refused_writer(|locker| locker.wait(Duration::from_millis(300))).await;

    assert_eq!(
        reads,
        [StatusCode::OK; 3],
        "the writer withdrew its intent when it gave up"
    );
}

#[tokio::test]
async fn a_writer_still_waiting_keeps_new_readers_out() {
    let redis = RedisServer::start();
    let (gate, mut control) = integration_tests::Gate::new();
    let waiting = gated_coupon(
        &redis,
        |layer| layer.wait(Duration::from_secs(10)),
        gate.clone(),
    )
    .await;
    let rejecting = gated_coupon(&redis, |layer| layer.reject(), gate).await;
    let reader = coupon(&rejecting, Method::GET);
    assert_eq!(control.entered().await, "GET");
    let writer = coupon(&waiting, Method::POST);
    tokio::time::sleep(Duration::from_millis(200)).await;

    let barred = coupon(&rejecting, Method::GET).await.unwrap();

    assert_eq!(
        barred,
        StatusCode::CONFLICT,
        "the twin: a waiting writer's intent bars readers"
    );
    control.let_out(2);
    assert_eq!(reader.await.unwrap(), StatusCode::OK);
    assert_eq!(writer.await.unwrap(), StatusCode::OK);
}
