//! An uncontended request costs exactly two Redis round trips: the acquire and the release,
//! nothing else — no subscription, no announcement.

use std::future::Future;

use futures_util::StreamExt;
use integration_tests::{RedisServer, post, send};
use tower_lock::key::KeyTemplate;
use tower_lock::{LockGuard, LockLayer, Locker, LockerBuilder, RedisBackend};

const REQUESTS: usize = 10;
const SENTINEL: &str = "end-of-test";

fn coupon_lock(backend: RedisBackend) -> LockLayer<RedisBackend, KeyTemplate> {
    coupon_lock_with(backend, |locker| locker)
}

/// The coupon lock, with a locker configured by `configure`.
fn coupon_lock_with(
    backend: RedisBackend,
    configure: fn(LockerBuilder<RedisBackend>) -> LockerBuilder<RedisBackend>,
) -> LockLayer<RedisBackend, KeyTemplate> {
    let locker = configure(Locker::builder(backend)).build().unwrap();
    LockLayer::new(locker, KeyTemplate::parse("coupon:{path id}").unwrap())
}

/// A claim route under `lock` that answers with its fencing token; one request has already
/// loaded the scripts into Redis's cache.
async fn claims(lock: LockLayer<RedisBackend, KeyTemplate>) -> axum::Router {
    let app = axum::Router::new()
        .route(
            "/coupons/{id}/claim",
            axum::routing::post(
                |axum::Extension(lock): axum::Extension<LockGuard>| async move {
                    lock.fence()
                        .map_or_else(|| "none".to_owned(), |fence| fence.to_string())
                },
            ),
        )
        .route_layer(lock);
    send(&app, post("/coupons/0/claim")).await;
    app
}

/// Runs `during` and returns its output with every command Redis ran meanwhile (MONITOR
/// lines; commands run inside scripts are marked `lua]`).
async fn monitored<T>(redis: &RedisServer, during: impl Future<Output = T>) -> (T, Vec<String>) {
    let mut monitor = redis
        .client()
        .get_async_monitor()
        .await
        .unwrap()
        .into_on_message::<String>();
    let output = during.await;
    let mut connection = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: String = redis::cmd("ECHO")
        .arg(SENTINEL)
        .query_async(&mut connection)
        .await
        .unwrap();
    let mut lines = Vec::new();
    while let Some(line) = monitor.next().await {
        if line.contains(SENTINEL) {
            break;
        }
        lines.push(line);
    }
    (output, lines)
}

/// Whether a MONITOR line is a command a client sent (not one a script ran).
fn sent_by_a_client(line: &str) -> bool {
    !line.contains(" lua]")
}

/// The names of the commands clients sent, in order.
fn client_commands(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|line| sent_by_a_client(line))
        .map(|line| command(line))
        .collect()
}

/// The command name of a MONITOR line (`... [0 127.0.0.1:1234] "SET" "key" ...`).
fn command(line: &str) -> String {
    line.split("] \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_default()
        .to_uppercase()
}

#[tokio::test]
async fn an_uncontended_request_costs_one_pipeline_and_one_script() {
    let redis = RedisServer::start();
    let app = claims(coupon_lock(
        RedisBackend::connect(redis.url()).await.unwrap(),
    ))
    .await;

    let ((), lines) = monitored(&redis, async {
        for i in 1..=REQUESTS {
            assert_eq!(
                send(&app, post(&format!("/coupons/{i}/claim")))
                    .await
                    .status,
                200
            );
        }
    })
    .await;

    let sent_by_clients: Vec<_> = lines.iter().filter(|line| sent_by_a_client(line)).collect();
    let commands = client_commands(&lines);
    let one_request = ["SET", "INCR", "EVALSHA"];
    assert_eq!(
        commands,
        one_request.repeat(REQUESTS),
        "per request: the acquire (SET NX PX and the fencing counter's INCR, pipelined in one \
         round trip), then the release script: {sent_by_clients:#?}"
    );
    for (i, request) in sent_by_clients.chunks(one_request.len()).enumerate() {
        let lock = format!("\"{{lock:coupon:{}}}\"", i + 1);
        assert!(request[0].contains(&lock) && request[0].contains("\"NX\" \"PX\""));
        assert!(request[1].contains("\"tower-lock:fence:{"), "{request:#?}");
        assert!(
            request[2].contains(&format!("\"1\" {lock}")),
            "nobody waits: the release names the lock key alone: {request:#?}"
        );
    }
    let announcements = lines
        .iter()
        .filter(|line| command(line) == "PUBLISH")
        .count();
    assert_eq!(
        announcements, 0,
        "nobody waited, so no release was announced"
    );
}

#[tokio::test]
async fn without_fencing_an_uncontended_request_sends_a_plain_set_and_one_script() {
    let redis = RedisServer::start();
    let backend = RedisBackend::connect(redis.url())
        .await
        .unwrap()
        .fencing(false);
    let app = claims(coupon_lock(backend)).await;

    let (reply, sent) = monitored(&redis, send(&app, post("/coupons/1/claim"))).await;

    assert_eq!(reply.body, "none", "no fencing token");
    assert_eq!(
        sent.len(),
        2 + 2,
        "SET, then EVALSHA of release.lua running GET and DEL: {sent:#?}"
    );
    assert!(sent[0].contains("\"SET\" \"{lock:coupon:1}\""), "{sent:#?}");
    assert!(
        sent.iter()
            .filter(|line| line.contains("tower-lock:fence"))
            .all(|line| command(line) == "EVALSHA"),
        "no fencing counter touched (the release script is only told its name, for handing \
         the lock to a queued waiter): {sent:#?}"
    );
}

#[tokio::test]
async fn an_uncontended_write_lock_costs_one_pipeline_and_one_script_and_subscribes_to_nothing() {
    let redis = RedisServer::start();
    let backend = RedisBackend::connect(redis.url()).await.unwrap();
    let app = claims(coupon_lock(backend).read_write()).await;

    let ((), lines) = monitored(&redis, async {
        for i in 1..=REQUESTS {
            let reply = send(&app, post(&format!("/coupons/{i}/claim"))).await;
            assert_eq!(reply.status, 200);
        }
    })
    .await;

    let commands = client_commands(&lines);
    assert_eq!(
        commands,
        ["SET", "INCR", "HLEN", "ZCARD", "EVALSHA"].repeat(REQUESTS),
        "per request: the write acquire (SET NX PX, the fencing counter, a look at waiting \
         writers and readers' claims, pipelined: no script), then the release; a \
         request that finds the lock free does not enter the waiting room, so nothing \
         subscribes: {lines:#?}"
    );
}

#[tokio::test]
async fn a_waiting_writer_asks_with_one_script_not_a_failing_transaction_first() {
    use std::time::Duration;
    use tower_lock::backend::{LockBackend, SharedLocks};
    let redis = RedisServer::start();
    let backend = RedisBackend::connect(redis.url()).await.unwrap();
    let app = claims(coupon_lock(backend.clone()).read_write()).await;
    let ttl = Duration::from_secs(10);
    let reader = integration_tests::granted(
        backend
            .acquire_read("lock:coupon:7", integration_tests::request(ttl))
            .await,
    );
    let writer = tokio::spawn(async move { send(&app, post("/coupons/7/claim")).await.status });
    let mut connection = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let started = std::time::Instant::now();
    while !redis::cmd("EXISTS")
        .arg("{lock:coupon:7}:writers")
        .query_async::<bool>(&mut connection)
        .await
        .unwrap()
    {
        assert!(
            started.elapsed() < ttl,
            "the writer never queued its intent"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Once subscribed, the writer asks once more and then sleeps until a release is announced
    // (or 500 ms pass): let that happen before watching.
    while redis::cmd("PUBSUB")
        .arg(&["NUMSUB", "{lock:coupon:7}:free"])
        .query_async::<(String, i64)>(&mut connection)
        .await
        .unwrap()
        .1
        == 0
    {
        assert!(started.elapsed() < ttl, "the writer never subscribed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;

    let (status, lines) = monitored(&redis, async {
        backend
            .release("lock:coupon:7", &reader.lease)
            .await
            .unwrap();
        writer.await.unwrap()
    })
    .await;

    assert_eq!(status, 200);
    let commands = client_commands(&lines);
    assert_eq!(
        commands,
        ["EVALSHA", "EVALSHA", "EVALSHA", "EVALSHA"],
        "the reader's release, then the woken writer's one script (no MULTI that fails \
         first), then its release: with no waiter left in this process, first with the lock \
         key alone, which finds the lock marked as waited for (the writer waited), then with \
         the keys of its line: {lines:#?}"
    );
}

/// Lock `coupon:7` is held by a request inside its handler; a second request, made by a layer
/// configured with `second`, finds it busy and answers `second_status` (it gives up, or
/// waits); then the holder finishes. The commands Redis ran from the second request on.
async fn holder_release_after(
    second: fn(LockerBuilder<RedisBackend>) -> LockerBuilder<RedisBackend>,
    second_status: u16,
) -> Vec<String> {
    use integration_tests::Gate;
    let redis = RedisServer::start();
    let backend = RedisBackend::connect(redis.url()).await.unwrap();
    let (gate, mut control) = Gate::new();
    let holder = axum::Router::new()
        .route(
            "/coupons/{id}/claim",
            axum::routing::post(move || async move { gate.pass("holder".into()).await }),
        )
        .route_layer(coupon_lock(backend.clone()));
    let other = claims(coupon_lock_with(backend, second)).await;
    let holding = tokio::spawn(async move { send(&holder, post("/coupons/7/claim")).await.status });
    control.entered().await;

    let (status, lines) = monitored(&redis, async {
        let asking =
            tokio::spawn(async move { send(&other, post("/coupons/7/claim")).await.status });
        if second_status == 409 {
            assert_eq!(asking.await.unwrap(), 409, "the lock is held");
            control.let_out(1);
            holding.await.unwrap()
        } else {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            control.let_out(1);
            assert_eq!(holding.await.unwrap(), 200);
            asking.await.unwrap()
        }
    })
    .await;

    assert_eq!(status, 200);
    lines
}

#[tokio::test]
async fn a_rejected_request_costs_the_holders_release_nothing() {
    let lines = holder_release_after(LockerBuilder::reject, 409).await;

    assert_eq!(
        client_commands(&lines),
        ["SET", "INCR", "PTTL", "EVALSHA"],
        "the rejected acquire (SET NX PX and INCR, then a plain PTTL for Retry-After: the lock \
         is not marked as waited for), then the holder's release, with the lock key alone: \
         {lines:#?}"
    );
    assert!(
        !lines.iter().any(|line| command(line) == "PUBLISH"),
        "{lines:#?}"
    );
}

#[tokio::test]
async fn a_polling_waiter_costs_the_holders_release_nothing() {
    let poll = |locker: LockerBuilder<RedisBackend>| {
        locker.wait_polling(std::time::Duration::from_secs(5))
    };
    let lines = holder_release_after(poll, 200).await;

    let releases = lines
        .iter()
        .filter(|line| {
            sent_by_a_client(line)
                && line.contains("\"EVALSHA\"")
                && line.contains("\"1\" \"{lock:coupon:7}\"")
        })
        .count();
    assert!(releases >= 1, "{lines:#?}");
    assert!(
        !lines.iter().any(|line| command(line) == "PUBLISH"),
        "nobody listens, so no release is announced: {lines:#?}"
    );
}

#[tokio::test]
async fn a_listening_waiter_has_the_holders_release_announced() {
    let wait = |locker: LockerBuilder<RedisBackend>| locker.wait(std::time::Duration::from_secs(5));
    let lines = holder_release_after(wait, 200).await;

    assert!(
        lines.iter().any(|line| command(line) == "PUBLISH"),
        "the twin: a waiter that listens marks the lock, and the release announces it: \
         {lines:#?}"
    );
}
