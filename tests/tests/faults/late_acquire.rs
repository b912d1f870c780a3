//! The fencing counter's `INCR` travels beside the acquire's `SET NX PX`, not in a
//! transaction: its token is only good if it was issued while the lock was held, which an
//! answer within the lease proves. A later answer is an error, never a token.

use std::time::Duration;

use integration_tests::RedisServer;
use integration_tests::request;
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use tower_lock::RedisBackend;
use tower_lock::backend::{Attempt, LockBackend};

async fn connection(redis: &RedisServer) -> MultiplexedConnection {
    redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Holds back every client's writes for `pause` from now.
async fn pause_writes(connection: &mut MultiplexedConnection, pause: Duration) {
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(pause.as_millis() as u64)
        .arg("WRITE")
        .query_async(connection)
        .await
        .unwrap();
}

#[tokio::test]
async fn an_acquire_answered_after_its_lease_ran_out_is_an_error_not_a_token() {
    let redis = RedisServer::start();
    let backend = RedisBackend::connect(redis.url()).await.unwrap();
    let mut admin = connection(&redis).await;

    pause_writes(&mut admin, Duration::from_millis(400)).await;
    let late = backend
        .acquire("lock:k", request(Duration::from_millis(100)))
        .await;

    let error = late.expect_err("answered 400 ms later, for a 100 ms lease");
    assert!(error.to_string().contains("too late"), "{error}");

    pause_writes(&mut admin, Duration::from_millis(400)).await;
    let in_time = backend
        .acquire("lock:other", request(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(
        matches!(in_time, Attempt::Acquired(ref grant) if grant.fence.is_some()),
        "the same delay within a 10 s lease still gives a token: {in_time:?}"
    );
}

#[tokio::test]
async fn without_that_rule_an_increment_after_the_lease_outranks_the_next_holder() {
    let redis = RedisServer::start();
    let backend = RedisBackend::connect(redis.url()).await.unwrap();
    let mut stale = connection(&redis).await;

    // The stale holder's SET lands, then its INCR waits longer than the lease.
    let taken: Option<String> = redis::cmd("SET")
        .arg(RedisBackend::lock_key("lock:k"))
        .arg("stale-token")
        .arg("NX")
        .arg("PX")
        .arg(50)
        .query_async(&mut stale)
        .await
        .unwrap();
    assert!(taken.is_some());
    tokio::time::sleep(Duration::from_millis(150)).await;
    let next_holder = match backend
        .acquire("lock:k", request(Duration::from_secs(10)))
        .await
        .unwrap()
    {
        Attempt::Acquired(grant) => integration_tests::fence_of(&grant),
        busy => panic!("the stale lease had run out, yet: {busy:?}"),
    };
    let counters: Vec<String> = stale.keys("tower-lock:fence:*").await.unwrap();
    assert_eq!(counters.len(), 1, "{counters:?}");
    let stale_fence: u64 = stale.incr(&counters[0], 1).await.unwrap();

    assert!(
        stale_fence > next_holder,
        "a token issued after the lease outranks the live holder's ({stale_fence} vs \
         {next_holder}): a store checking tokens would take the stale writes"
    );
}
