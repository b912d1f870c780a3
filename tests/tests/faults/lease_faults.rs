//! Leases under faults, against real Redis: renewal keeps a slow handler's lock, a lost lock
//! is reported by its deadline and aborts the handler, nothing renews after release, and
//! nothing is left behind.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::routing::post;
use axum::{Extension, Router};
use http::StatusCode;
use integration_tests::{Gate, RedisServer, post as post_request, send};
use tokio::time::Instant;
use tower_lock::backend::LockBackend;
use tower_lock::key::{KeyTemplate, header};
use tower_lock::{LockGuard, LockLayer, Locker, LockerBuilder, OnLost, RedisBackend};

/// The leases here: renewed every third, a second leaves a loaded machine's round trip (324 ms
/// at the worst seen) and a renewal's (667 ms of room) well inside them.
const TTL: Duration = Duration::from_secs(1);

/// The coupon lock on `redis`, its locker configured by `configure`.
async fn coupon_lock(
    redis: &RedisServer,
    configure: impl FnOnce(LockerBuilder<RedisBackend>) -> LockerBuilder<RedisBackend>,
) -> LockLayer<RedisBackend, KeyTemplate> {
    let locker = configure(Locker::builder(backend(redis).await)).build();
    LockLayer::new(locker.expect("valid settings"), coupon_key())
}

fn coupon_key() -> KeyTemplate {
    KeyTemplate::parse("coupon:{path id}").unwrap()
}

async fn backend(redis: &RedisServer) -> RedisBackend {
    RedisBackend::connect(redis.url()).await.unwrap()
}

/// A claim route whose handler works for `work`.
fn slow_route(work: Duration) -> Router {
    Router::new().route(
        "/coupons/{id}/claim",
        post(move || async move { tokio::time::sleep(work).await }),
    )
}

/// A claim's handler that works for three TTLs: when it began, and whether it still works.
#[derive(Default)]
struct Claim {
    began: std::sync::OnceLock<Instant>,
    working: AtomicBool,
}

impl Claim {
    /// The claim route, its handler recording its work here.
    fn route(self: &Arc<Self>) -> Router {
        let claim = Arc::clone(self);
        Router::new().route(
            "/coupons/{id}/claim",
            post(move || async move {
                claim.working.store(true, Ordering::SeqCst);
                claim.began.set(Instant::now()).ok();
                tokio::time::sleep(TTL * 3).await;
                claim.working.store(false, Ordering::SeqCst);
            }),
        )
    }
}

/// While the claim is in flight, probes the key with rejecting requests every TTL/6 once its
/// handler began. Returns the probes answered while the handler still worked — so while the
/// claim's request held its lock, or should have — each with how long after the handler
/// began it was answered; and the claim's status.
async fn probe_while_holding(
    holder_app: Router,
    claim: &Claim,
    prober: Router,
) -> (Vec<(Duration, StatusCode)>, StatusCode) {
    let holder = tokio::spawn(async move {
        send(&holder_app, post_request("/coupons/7/claim"))
            .await
            .status
    });
    let asked = Instant::now();
    while claim.began.get().is_none() {
        assert!(
            asked.elapsed() < Duration::from_secs(30),
            "the claim's handler never began"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let began = *claim.began.get().expect("the handler began");
    let mut probes = Vec::new();
    while !holder.is_finished() {
        let status = send(&prober, post_request("/coupons/7/claim")).await.status;
        if claim.working.load(Ordering::SeqCst) {
            probes.push((began.elapsed(), status));
        }
        tokio::time::sleep(TTL / 6).await;
    }
    (probes, holder.await.unwrap())
}

#[tokio::test]
async fn a_handler_running_three_ttls_keeps_its_lock_by_renewal() {
    let redis = RedisServer::start();
    let claim = Arc::new(Claim::default());
    let holder = claim
        .route()
        .route_layer(coupon_lock(&redis, |locker| locker.ttl(TTL)).await);
    let prober =
        slow_route(Duration::ZERO).route_layer(coupon_lock(&redis, |locker| locker.reject()).await);

    let (probes, holder) = probe_while_holding(holder, &claim, prober).await;

    assert_eq!(holder, StatusCode::OK);
    assert!(
        probes
            .iter()
            .all(|(_, status)| *status == StatusCode::CONFLICT),
        "{probes:?}"
    );
    // The handler works for three TTLs: a probe comes back in the two after the first lease
    // unless the prober stalls for all of them.
    assert!(
        probes.iter().any(|(at, _)| *at > TTL),
        "probed past the first lease: {probes:?}"
    );
}

#[tokio::test]
async fn without_renewal_a_second_request_gets_in_after_the_ttl() {
    let redis = RedisServer::start();
    let layer = coupon_lock(&redis, |locker| {
        locker.ttl(TTL).renew(false).on_lost(OnLost::Continue)
    })
    .await;
    let claim = Arc::new(Claim::default());
    let holder = claim.route().route_layer(layer);
    let prober =
        slow_route(Duration::ZERO).route_layer(coupon_lock(&redis, |locker| locker.reject()).await);

    let (probes, _) = probe_while_holding(holder, &claim, prober).await;

    // The store's lease began before the handler did, at most a round trip: within half a TTL
    // of the handler's start it still holds, and the first probe comes back then.
    let early = |(at, _): &&(Duration, StatusCode)| *at < TTL / 2;
    assert!(
        probes.iter().filter(early).count() > 0
            && (probes.iter().filter(early)).all(|(_, status)| *status == StatusCode::CONFLICT),
        "refused while the lease lasted: {probes:?}"
    );
    assert!(
        probes.iter().any(|(_, status)| *status == StatusCode::OK),
        "the expired lock let a probe in: {probes:?}"
    );
}

#[tokio::test]
async fn a_killed_redis_makes_the_lease_lost_by_its_deadline_and_aborts_the_handler() {
    let mut redis = RedisServer::start();
    let (gate, mut control) = Gate::new();
    let later_step_ran = Arc::new(AtomicBool::new(false));
    let (guard_tx, guard_rx) = tokio::sync::oneshot::channel::<LockGuard>();
    let guard_tx = Arc::new(std::sync::Mutex::new(Some(guard_tx)));
    let app = Router::new()
        .route(
            "/coupons/{id}/claim",
            post({
                let later_step_ran = later_step_ran.clone();
                move |Extension(lock): Extension<LockGuard>| async move {
                    if let Some(tx) = guard_tx.lock().unwrap().take() {
                        tx.send(lock).ok();
                    }
                    gate.pass("holder".into()).await;
                    later_step_ran.store(true, Ordering::SeqCst);
                }
            }),
        )
        .route_layer(coupon_lock(&redis, |locker| locker.ttl(TTL)).await);
    let request = tokio::spawn({
        let app = app.clone();
        async move { send(&app, post_request("/coupons/7/claim")).await }
    });
    control.entered().await;
    let guard = guard_rx.await.unwrap();
    let entered = Instant::now();
    assert!(guard.is_held());

    redis.kill();
    tokio::time::sleep_until(entered + TTL).await;

    assert!(
        !guard.is_held(),
        "lost by its deadline (acquire + TTL - drift)"
    );
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() resolved");
    let reply = request.await.unwrap();
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        reply.body.contains("urn:tower-lock:lock-lost"),
        "{}",
        reply.body
    );
    control.let_out(1);
    tokio::time::sleep(TTL).await;
    assert!(
        !later_step_ran.load(Ordering::SeqCst),
        "the aborted handler's later steps never ran"
    );
}

async fn evalsha_calls(redis: &RedisServer) -> u64 {
    let mut connection = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut connection)
        .await
        .unwrap();
    stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

#[tokio::test]
async fn nothing_is_renewed_after_release_or_cancellation() {
    let redis = RedisServer::start();
    let app = slow_route(TTL * 2).route_layer(coupon_lock(&redis, |locker| locker.ttl(TTL)).await);
    let before = evalsha_calls(&redis).await;

    assert_eq!(
        send(&app, post_request("/coupons/7/claim")).await.status,
        StatusCode::OK
    );
    let cancelled = tokio::spawn({
        let app = app.clone();
        async move { send(&app, post_request("/coupons/8/claim")).await }
    });
    tokio::time::sleep(TTL).await;
    cancelled.abort();
    let _ = cancelled.await;
    tokio::time::sleep(TTL / 3).await;
    let after_requests = evalsha_calls(&redis).await;
    tokio::time::sleep(TTL * 4).await;
    let idle = evalsha_calls(&redis).await;

    assert!(
        after_requests - before >= 2 + 2 + 3,
        "two acquires, two releases and renewals while they ran: {}",
        after_requests - before
    );
    assert_eq!(
        idle, after_requests,
        "no command once the locks were released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_requests_over_ten_thousand_keys_leave_nothing_behind() {
    const REQUESTS: usize = 100_000;
    const KEYS: usize = 10_000;
    const WORKERS: usize = 64;
    let redis = RedisServer::start();
    let backend = backend(&redis).await;
    let layer = LockLayer::new(
        Locker::builder(backend.clone()).ttl(TTL).build().unwrap(),
        header("x-key"),
    );
    let slow = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route(
            "/",
            post({
                let slow = slow.clone();
                move || async move {
                    // One request in two hundred outlives a renewal interval (TTL/3).
                    if slow.fetch_add(1, Ordering::Relaxed).is_multiple_of(200) {
                        tokio::time::sleep(TTL / 2).await;
                    }
                }
            }),
        )
        .route_layer(layer.clone());
    let runtime = tokio::runtime::Handle::current().metrics();
    let tasks_before = runtime.num_alive_tasks();

    let workers: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let app = app.clone();
            tokio::spawn(async move {
                for i in (worker..REQUESTS).step_by(WORKERS) {
                    let request = http::Request::post("/")
                        .header("x-key", format!("k{}", i % KEYS))
                        .body(axum::body::Body::empty())
                        .unwrap();
                    assert_eq!(send(&app, request).await.status, StatusCode::OK);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    // Waiters' lines for a lock linger 2 s after their last member left.
    tokio::time::sleep(Duration::from_millis(2500)).await;

    assert_eq!(layer.locker().held_locks(), 0);
    assert_eq!(
        backend.wait_queue().unwrap().room().waiting_names(),
        0,
        "no waiting line left"
    );
    // At most as many as before: a task of the backend's set-up that was still alive then
    // (connecting, subscribing) may have ended since, which is no leak.
    let tasks_after = runtime.num_alive_tasks();
    assert!(
        tasks_after <= tasks_before,
        "no task left running: {tasks_after} alive, {tasks_before} before"
    );
    let mut connection = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut connection)
        .await
        .unwrap();
    let locks: Vec<_> = keys
        .iter()
        .filter(|key| !key.starts_with("tower-lock:fence:{"))
        .collect();
    assert!(locks.is_empty(), "no lock key left: {locks:?}");
    assert!(
        keys.len() <= 16384,
        "at most one fencing counter per hash slot, not one per lock: {}",
        keys.len()
    );
}
