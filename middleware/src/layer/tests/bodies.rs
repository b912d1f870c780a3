//! Bodies and the lock: the request body is read before locking (a slow upload holds no lock),
//! the response body is sent under it (the lock ends with the body).

use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::stream::{self, Stream, StreamExt};
use http_body::Body as _;
use tokio::sync::mpsc;

use super::*;

/// A stream of the chunks sent on the returned sender; it ends when the sender is dropped.
fn chunks() -> (
    mpsc::Sender<&'static str>,
    impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
) {
    let (sender, receiver) = mpsc::channel(1);
    let stream = stream::unfold(receiver, |mut receiver| async move {
        let chunk: &'static str = receiver.recv().await?;
        Some((Ok(Bytes::from_static(chunk.as_bytes())), receiver))
    });
    (sender, stream)
}

/// Lets the other tasks of this single-threaded runtime run until they wait.
async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

/// A claim route under `layer` that answers with the length of the body it read.
fn upload_app(layer: LockLayer<MemoryBackend, KeyTemplate>) -> Router {
    Router::new()
        .route(
            "/coupons/{id}/claim",
            post(|body: String| async move { body.len().to_string() }),
        )
        .route_layer(layer)
}

fn streamed_claim(id: &str) -> (mpsc::Sender<&'static str>, Request<Body>) {
    let (sender, body) = chunks();
    let request = Request::post(format!("/coupons/{id}/claim"))
        .body(Body::from_stream(body))
        .unwrap();
    (sender, request)
}

#[tokio::test]
async fn a_slow_upload_holds_no_lock_while_it_is_sent() {
    let store = MemoryBackend::new();
    let app = upload_app(LockLayer::new(Locker::new(store.clone()), coupon_key()));
    let (upload, request) = streamed_claim("7");
    let claiming = tokio::spawn(async move { send(&app, request).await });

    upload.send("first half, ").await.unwrap();
    settle().await;
    assert!(is_free(&store, "lock:coupon:7").await, "locked mid-upload");

    upload.send("second half").await.unwrap();
    drop(upload);
    let reply = claiming.await.unwrap();
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "23"));
}

#[tokio::test]
async fn with_streamed_request_bodies_the_upload_is_read_under_the_lock() {
    let store = MemoryBackend::new();
    let app =
        upload_app(LockLayer::new(Locker::new(store.clone()), coupon_key()).stream_request_body());
    let (upload, request) = streamed_claim("7");
    let claiming = tokio::spawn(async move { send(&app, request).await });

    upload.send("first half, ").await.unwrap();
    settle().await;
    assert!(
        !is_free(&store, "lock:coupon:7").await,
        "the handler reads under the lock"
    );

    drop(upload);
    assert_eq!(claiming.await.unwrap().status, StatusCode::OK);
    assert!(is_free(&store, "lock:coupon:7").await);
}

#[tokio::test]
async fn a_body_over_the_limit_is_answered_413_and_never_locks_or_runs() {
    let store = MemoryBackend::new();
    let app = upload_app(LockLayer::new(Locker::new(store.clone()), coupon_key()).body_limit(8));
    let (upload, request) = streamed_claim("7");
    let claiming = tokio::spawn(async move { send(&app, request).await });
    upload.send("12345").await.unwrap();
    upload.send("6789").await.unwrap();

    let reply = claiming.await.unwrap();

    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(reply.body.contains("larger than 8 bytes"), "{}", reply.body);
    assert!(is_free(&store, "lock:coupon:7").await);
}

/// A route on `/` under `layer` whose handler answers with a body streamed from the returned
/// sender.
fn streaming_app(layer: LockLayer<MemoryBackend, Header>) -> (mpsc::Sender<&'static str>, Router) {
    let (sender, body) = chunks();
    let body = Arc::new(std::sync::Mutex::new(Some(body)));
    let handler = move || {
        let body = body.lock().unwrap().take().expect("one request");
        async move { Body::from_stream(body) }
    };
    let app = Router::new().route("/", post(handler)).route_layer(layer);
    (sender, app)
}

#[tokio::test]
async fn the_lock_is_held_until_a_streamed_response_ends() {
    let store = MemoryBackend::new();
    let (stream, app) = streaming_app(LockLayer::new(Locker::new(store.clone()), header("x-key")));
    let response = app.oneshot(keyed(Method::POST, "a", 0)).await.unwrap();
    let mut body = response.into_body();

    assert!(
        !is_free(&store, "lock:a").await,
        "held once the handler returned"
    );
    stream.send("first").await.unwrap();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, "first");
    assert!(
        !is_free(&store, "lock:a").await,
        "held while the body streams"
    );

    drop(stream);
    assert!(body.frame().await.is_none());
    assert!(
        is_free(&store, "lock:a").await,
        "released as the body ended"
    );
}

#[tokio::test]
async fn a_response_body_dropped_mid_stream_releases_the_lock() {
    let store = MemoryBackend::new();
    let (_stream, app) = streaming_app(LockLayer::new(Locker::new(store.clone()), header("x-key")));
    let response = app.oneshot(keyed(Method::POST, "a", 0)).await.unwrap();
    assert!(!is_free(&store, "lock:a").await);

    drop(response);
    settle().await;

    assert!(is_free(&store, "lock:a").await);
}

#[tokio::test(start_paused = true)]
async fn a_streamed_response_outliving_its_lease_is_cut_off() {
    let store = MemoryBackend::new();
    let ttl = Duration::from_millis(300);
    let layer = LockLayer::new(
        Locker::builder(store.clone())
            .ttl(ttl)
            .renew(false)
            .build()
            .unwrap(),
        header("x-key"),
    );
    let (_stream, app) = streaming_app(layer);
    let response = app.oneshot(keyed(Method::POST, "a", 0)).await.unwrap();

    let ended = response.into_body().frame().await;

    assert!(matches!(ended, Some(Err(_))), "the body ends with an error");
    settle().await;
    assert!(is_free(&store, "lock:a").await);
}

#[tokio::test]
async fn a_renewing_lock_streams_past_its_ttl() {
    let store = MemoryBackend::new();
    let (stream, app) = streaming_app(LockLayer::new(Locker::new(store.clone()), header("x-key")));
    let response = app.oneshot(keyed(Method::POST, "a", 0)).await.unwrap();
    let mut body = response.into_body();
    tokio::time::pause();
    let reading = tokio::spawn(async move { body.frame().await.map(|frame| frame.is_ok()) });

    tokio::time::sleep(Duration::from_secs(25)).await;
    stream.send("late").await.unwrap();

    assert_eq!(reading.await.unwrap(), Some(true), "renewed while waiting");
}

#[tokio::test]
async fn any_inner_body_type_is_accepted() {
    let store = MemoryBackend::new();
    let boxed = service_fn(|_: Request<Body>| async {
        let body = http_body_util::Full::new(Bytes::from_static(b"boxed"))
            .map_err(|never| match never {})
            .boxed_unsync();
        Ok::<_, Infallible>(http::Response::new(body))
    });
    let service = ServiceBuilder::new()
        .layer(LockLayer::new(Locker::new(store.clone()), header("x-key")))
        .service(boxed);

    let response = service.oneshot(keyed(Method::POST, "a", 0)).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();

    assert_eq!(body, "boxed");
    assert!(is_free(&store, "lock:a").await);
}

#[tokio::test]
async fn a_whole_response_comes_back_with_its_lock_released_and_its_body_ready() {
    let store = MemoryBackend::new();
    let app = hold_app(LockLayer::new(Locker::new(store.clone()), header("x-key")));

    let response = app.oneshot(keyed(Method::POST, "a", 0)).await.unwrap();

    assert!(
        is_free(&store, "lock:a").await,
        "released before the response was returned, as with no body at all"
    );
    let mut body = response.into_body();
    let first = body.frame().now_or_never();
    assert!(
        matches!(first, Some(Some(Ok(_)))),
        "the server writes head and body at once, never waiting for a release in between"
    );
    assert!(body.is_end_stream());
}

#[tokio::test]
async fn a_large_body_that_is_all_ready_streams_under_the_lock_instead_of_being_buffered() {
    let store = MemoryBackend::new();
    let chunk = Bytes::from(vec![b'x'; 1024]);
    let endless_enough = move || {
        let chunks = stream::repeat(Ok::<_, Infallible>(chunk.clone())).take(1024);
        async move { Body::from_stream(chunks) }
    };
    let app = Router::new()
        .route("/", post(endless_enough))
        .route_layer(LockLayer::new(Locker::new(store.clone()), header("x-key")));

    let response = app.oneshot(keyed(Method::POST, "a", 0)).await.unwrap();

    assert!(
        !is_free(&store, "lock:a").await,
        "1 MiB is more than is read ahead: the rest streams under the lock"
    );
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body.len(), 1024 * 1024);
    assert!(is_free(&store, "lock:a").await);
}
