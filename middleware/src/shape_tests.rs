//! Read-write, semaphore and multi-key modes on the in-process backend.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::{get, post};
use http::{Method, Request, StatusCode};
use tower::ServiceExt;

use crate::key::{Header, header, many};
use crate::{
    Acquire, AcquireMany, Hold, LockBackend, LockGuard, LockLayer, MemoryBackend, OwnerToken,
};

const TTL: Duration = Duration::from_secs(10);

/// Counts who is inside, by hold.
#[derive(Debug, Default)]
struct Inside {
    readers: std::sync::atomic::AtomicUsize,
    writers: std::sync::atomic::AtomicUsize,
    most_readers: std::sync::atomic::AtomicUsize,
    overlaps: std::sync::atomic::AtomicUsize,
}

impl Inside {
    async fn visit(&self, hold: Hold, work: Duration) {
        use std::sync::atomic::Ordering::SeqCst;
        let (mine, other) = match hold {
            Hold::Read => (&self.readers, &self.writers),
            _ => (&self.writers, &self.readers),
        };
        let now = mine.fetch_add(1, SeqCst) + 1;
        if hold == Hold::Read {
            self.most_readers.fetch_max(now, SeqCst);
        }
        if other.load(SeqCst) > 0 || (hold != Hold::Read && now > 1) {
            self.overlaps.fetch_add(1, SeqCst);
        }
        tokio::time::sleep(work).await;
        mine.fetch_sub(1, SeqCst);
    }
}

fn app(layer: LockLayer<MemoryBackend, Header>, inside: Arc<Inside>, work: Duration) -> Router {
    let handler = move |axum::Extension(lock): axum::Extension<LockGuard>| {
        let inside = inside.clone();
        async move { inside.visit(lock.hold(), work).await }
    };
    Router::new()
        .route("/", get(handler.clone()).post(handler))
        .route_layer(layer)
}

fn send(app: &Router, method: Method) -> tokio::task::JoinHandle<StatusCode> {
    let request = Request::builder()
        .method(method)
        .uri("/")
        .header("x-key", "k")
        .body(Body::empty())
        .unwrap();
    let app = app.clone();
    tokio::spawn(async move { app.oneshot(request).await.unwrap().status() })
}

#[tokio::test(start_paused = true)]
async fn readers_share_the_key_and_writers_hold_it_alone() {
    let inside = Arc::new(Inside::default());
    let layer = LockLayer::new(MemoryBackend::new(), header("x-key"))
        .read_write()
        .wait(TTL);
    let app = app(layer, inside.clone(), Duration::from_millis(100));

    let requests: Vec<_> = (0..20)
        .map(|i| {
            send(
                &app,
                if i % 5 == 0 {
                    Method::POST
                } else {
                    Method::GET
                },
            )
        })
        .collect();
    for request in requests {
        assert_eq!(request.await.unwrap(), StatusCode::OK);
    }

    use std::sync::atomic::Ordering::SeqCst;
    assert!(inside.most_readers.load(SeqCst) > 1, "readers overlapped");
    assert_eq!(
        inside.overlaps.load(SeqCst),
        0,
        "no writer shared the key with anybody"
    );
}

#[tokio::test(start_paused = true)]
async fn a_waiting_writer_is_not_starved_by_a_stream_of_readers() {
    let inside = Arc::new(Inside::default());
    let layer = LockLayer::new(MemoryBackend::new(), header("x-key"))
        .read_write()
        .wait(Duration::from_secs(60));
    let app = app(layer, inside, Duration::from_millis(100));
    let mut readers = vec![send(&app, Method::GET)];
    tokio::time::sleep(Duration::from_millis(10)).await;
    let writer = send(&app, Method::POST);
    let started = tokio::time::Instant::now();
    // New readers keep arriving, each overlapping the last: without the writer's intent they
    // would hold the key forever.
    while !writer.is_finished() && started.elapsed() < Duration::from_secs(30) {
        readers.push(send(&app, Method::GET));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    assert_eq!(writer.await.unwrap(), StatusCode::OK);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the writer got in: {:?}",
        started.elapsed()
    );
    for reader in readers {
        assert_eq!(reader.await.unwrap(), StatusCode::OK);
    }
}

#[tokio::test(start_paused = true)]
async fn a_semaphore_admits_at_most_its_permits() {
    let store = MemoryBackend::new();
    let layer = LockLayer::new(store.clone(), header("x-key"))
        .semaphore(2)
        .reject()
        .busy_status(StatusCode::TOO_MANY_REQUESTS);
    let app = app(layer, Arc::default(), Duration::from_secs(1));
    let first = send(&app, Method::POST);
    let second = send(&app, Method::POST);
    tokio::time::sleep(Duration::from_millis(10)).await;

    let third = send(&app, Method::POST).await.unwrap();

    assert_eq!(third, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        (first.await.unwrap(), second.await.unwrap()),
        (StatusCode::OK, StatusCode::OK)
    );
    assert_eq!(
        send(&app, Method::POST).await.unwrap(),
        StatusCode::OK,
        "permits came back"
    );
}

#[tokio::test(start_paused = true)]
async fn a_crashed_readers_lease_blocks_a_writer_only_until_it_expires() {
    let store = MemoryBackend::new();
    let reader = store
        .acquire_hold("k", OwnerToken::new(), TTL, Hold::Read)
        .await
        .unwrap();
    assert_eq!(reader, Acquire::Acquired { fence: 0 });
    let writer = OwnerToken::new();

    let before = store
        .acquire_hold("k", writer, TTL, Hold::Write)
        .await
        .unwrap();
    tokio::time::sleep(TTL).await;
    let after = store
        .acquire_hold("k", writer, TTL, Hold::Write)
        .await
        .unwrap();

    assert!(matches!(before, Acquire::Busy { .. }), "{before:?}");
    assert!(matches!(after, Acquire::Acquired { fence: 1 }), "{after:?}");
}

#[tokio::test(start_paused = true)]
async fn a_crashed_permit_holder_frees_its_permit_after_its_ttl() {
    let store = MemoryBackend::new();
    let one = Hold::Permit { permits: 1 };
    store
        .acquire_hold("k", OwnerToken::new(), TTL, one)
        .await
        .unwrap();

    let before = store
        .acquire_hold("k", OwnerToken::new(), TTL, one)
        .await
        .unwrap();
    tokio::time::sleep(TTL).await;
    let after = store
        .acquire_hold("k", OwnerToken::new(), TTL, one)
        .await
        .unwrap();

    assert_eq!(
        before,
        Acquire::Busy {
            holder_ttl: Some(TTL)
        }
    );
    assert_eq!(after, Acquire::Acquired { fence: 0 });
}

#[tokio::test]
async fn a_permit_is_renewed_and_released_by_its_owner_only() {
    let store = MemoryBackend::new();
    let (mine, other) = (OwnerToken::new(), OwnerToken::new());
    let two = Hold::Permit { permits: 2 };
    store.acquire_hold("k", mine, TTL, two).await.unwrap();

    assert!(!store.extend_hold("k", other, TTL, two).await.unwrap());
    assert!(store.extend_hold("k", mine, TTL, two).await.unwrap());
    assert!(!store.release_hold("k", other, two).await.unwrap());
    assert!(store.release_hold("k", mine, two).await.unwrap());
}

#[tokio::test]
async fn the_guard_says_which_hold_it_has() {
    let layer = LockLayer::new(MemoryBackend::new(), header("x-key")).read_write();
    let app = Router::new()
        .route(
            "/",
            get(
                |axum::Extension(lock): axum::Extension<LockGuard>| async move {
                    format!("{:?}", lock.hold())
                },
            )
            .post(
                |axum::Extension(lock): axum::Extension<LockGuard>| async move {
                    format!("{:?}", lock.hold())
                },
            ),
        )
        .route_layer(layer);
    let body = |method: Method| {
        let app = app.clone();
        async move {
            let request = Request::builder()
                .method(method)
                .uri("/")
                .header("x-key", "k")
                .body(Body::empty())
                .unwrap();
            let response = app.oneshot(request).await.unwrap();
            String::from_utf8(
                http_body_util::BodyExt::collect(response.into_body())
                    .await
                    .unwrap()
                    .to_bytes()
                    .to_vec(),
            )
            .unwrap()
        }
    };

    assert_eq!(body(Method::GET).await, "Read");
    assert_eq!(body(Method::POST).await, "Write");
}

#[tokio::test]
async fn the_mutex_stays_the_default() {
    let app = Router::new()
        .route(
            "/",
            post(
                |axum::Extension(lock): axum::Extension<LockGuard>| async move {
                    format!("{:?}", lock.hold())
                },
            ),
        )
        .route_layer(LockLayer::new(MemoryBackend::new(), header("x-key")));
    let request = Request::post("/")
        .header("x-key", "k")
        .body(Body::empty())
        .unwrap();
    let response = app.oneshot(request).await.unwrap();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(body, "Exclusive");
}

/// Forwards the mutex calls only, so the trait's default `acquire_many` is used.
#[derive(Clone, Debug, Default)]
struct MutexOnly(MemoryBackend);

impl LockBackend for MutexOnly {
    async fn acquire(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
    ) -> Result<Acquire, crate::BackendError> {
        self.0.acquire(key, token, ttl).await
    }

    async fn extend(
        &self,
        key: &str,
        token: OwnerToken,
        ttl: Duration,
    ) -> Result<bool, crate::BackendError> {
        self.0.extend(key, token, ttl).await
    }

    async fn release(&self, key: &str, token: OwnerToken) -> Result<bool, crate::BackendError> {
        self.0.release(key, token).await
    }
}

async fn all_or_none<B: LockBackend>(store: &B) {
    let (holder, other) = (OwnerToken::new(), OwnerToken::new());
    store.acquire("b", holder, TTL).await.unwrap();
    let keys = ["a".to_owned(), "b".to_owned(), "c".to_owned()];

    let busy = store.acquire_many(&keys, other, TTL).await.unwrap();
    assert!(matches!(busy, AcquireMany::Busy { .. }), "{busy:?}");
    for free in ["a", "c"] {
        let token = OwnerToken::new();
        assert!(
            matches!(
                store.acquire(free, token, TTL).await.unwrap(),
                Acquire::Acquired { .. }
            ),
            "{free} was given back"
        );
        store.release(free, token).await.unwrap();
    }

    store.release("b", holder).await.unwrap();
    let taken = store.acquire_many(&keys, other, TTL).await.unwrap();
    let AcquireMany::Acquired { fences } = taken else {
        panic!("{taken:?}")
    };
    assert_eq!(fences.len(), 3, "one fence per key");
    assert!(
        fences.iter().all(|&fence| fence >= 2),
        "each key's own counter moved on: {fences:?}"
    );
}

#[tokio::test]
async fn several_keys_are_taken_all_or_none_atomically() {
    all_or_none(&MemoryBackend::new()).await;
}

#[tokio::test]
async fn several_keys_are_taken_all_or_none_one_by_one_by_default() {
    all_or_none(&MutexOnly::default()).await;
}

#[tokio::test(start_paused = true)]
async fn transfers_over_overlapping_keys_exclude_each_other_without_deadlock() {
    let inside = Arc::new(Inside::default());
    let both_ways = many(|parts: &http::request::Parts| {
        let pair: Vec<String> = parts.headers["x-pair"]
            .to_str()
            .unwrap()
            .split(',')
            .map(str::to_owned)
            .collect();
        Ok(pair)
    });
    let app = {
        let inside = inside.clone();
        Router::new()
            .route(
                "/",
                post(move |axum::Extension(lock): axum::Extension<LockGuard>| {
                    let inside = inside.clone();
                    async move {
                        assert_eq!(lock.keys().collect::<Vec<_>>(), ["a", "b"]);
                        assert!(lock.fence_of("a").is_some() && lock.fence_of("b").is_some());
                        inside.visit(Hold::Write, Duration::from_millis(10)).await
                    }
                }),
            )
            .route_layer(
                LockLayer::new(MemoryBackend::new(), both_ways)
                    .prefix("")
                    .wait(Duration::from_secs(60)),
            )
    };
    let requests: Vec<_> = (0..20)
        .map(|i| {
            let pair = if i % 2 == 0 { "a,b" } else { "b,a" };
            let request = Request::post("/")
                .header("x-pair", pair)
                .body(Body::empty())
                .unwrap();
            let app = app.clone();
            tokio::spawn(async move { app.oneshot(request).await.unwrap().status() })
        })
        .collect();

    for request in requests {
        assert_eq!(request.await.unwrap(), StatusCode::OK);
    }
    assert_eq!(inside.overlaps.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_permit_outliving_its_ttl_is_renewed_and_keeps_the_others_out() {
    let ttl = Duration::from_millis(300);
    let layer = LockLayer::new(MemoryBackend::new(), header("x-key"))
        .semaphore(1)
        .ttl(ttl)
        .reject();
    let app = app(layer, Arc::default(), ttl * 3);
    let holder = send(&app, Method::POST);
    tokio::time::sleep(ttl / 2).await;

    for _ in 0..5 {
        assert_eq!(
            send(&app, Method::POST).await.unwrap(),
            StatusCode::CONFLICT
        );
        tokio::time::sleep(ttl / 2).await;
    }

    assert_eq!(holder.await.unwrap(), StatusCode::OK, "renewed, not lost");
}

#[tokio::test]
async fn several_keys_are_held_exclusively_and_released_even_in_read_write_mode() {
    let store = MemoryBackend::new();
    let both = many(|_: &http::request::Parts| Ok(vec!["b".to_owned(), "a".to_owned()]));
    let app = Router::new()
        .route(
            "/",
            get(
                |axum::Extension(lock): axum::Extension<LockGuard>| async move {
                    format!("{:?}", lock.hold())
                },
            ),
        )
        .route_layer(LockLayer::new(store.clone(), both).read_write());
    let request = Request::get("/").body(Body::empty()).unwrap();

    let response = app.oneshot(request).await.unwrap();

    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(body, "Exclusive");
    assert_eq!(store.held_locks(), 0, "both keys were released");
}
