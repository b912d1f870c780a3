//! The conformance suite on PostgreSQL: every case in a schema of its own on the machine's
//! server, with two backends (own connection pools) standing in for two processes.

use std::time::Duration;

use integration_tests::{
    PostgresSchema, RaceMarks, a_stale_bar_is_lifted_at_the_writers_next_attempt, granted, request,
};
use tower_lock::Locker;
use tower_lock::backend::postgres::{AdvisoryBackend, PostgresBackend};
use tower_lock::backend::{Attempt, LockBackend};
use tower_lock::conformance::Store;
use tower_lock::testing::CountingBackend;

mod lease_rows {
    tower_lock::conformance_suite!(
        super::PostgresStore,
        leases,
        read_write,
        semaphore,
        shared_leases,
        wait_queue,
        inspect,
        listing,
        inspect_shapes
    );
}

mod advisory {
    tower_lock::conformance_suite!(super::AdvisoryStore);
}

/// A fresh schema whose lease table the backends share.
struct PostgresStore(PostgresSchema);

impl Store for PostgresStore {
    type Backend = PostgresBackend;

    async fn start() -> Self {
        Self(PostgresSchema::create().await)
    }

    async fn backend(&self) -> PostgresBackend {
        PostgresBackend::with_table(self.0.pool().await, &self.0.table("leases"))
            .await
            .expect("the lease table is created")
    }
}

/// Advisory locks in a namespace of their own (the fresh schema's name): no leases, no fences.
struct AdvisoryStore(PostgresSchema);

impl Store for AdvisoryStore {
    type Backend = AdvisoryBackend;

    async fn start() -> Self {
        Self(PostgresSchema::create().await)
    }

    async fn backend(&self) -> AdvisoryBackend {
        AdvisoryBackend::with_pool(self.0.pool().await, self.0.name())
    }

    fn fences(&self) -> bool {
        false
    }

    fn leases_expire(&self) -> bool {
        false
    }
}

/// Beyond the suite, which allows a backend not to know: PostgreSQL answers a busy acquire with
/// the holder's remaining lease, by the database's clock, in the same statement.
#[tokio::test]
async fn a_busy_answer_says_how_long_the_holder_has_left() {
    let store = PostgresStore::start().await;
    let (a, b) = (store.backend().await, store.backend().await);
    let ttl = Duration::from_secs(30);
    let held = granted(a.acquire("lock:k", request(ttl)).await);

    let Ok(Attempt::Busy { holder_ttl }) = b.acquire("lock:k", request(ttl)).await else {
        panic!("the lock is held");
    };

    let left = holder_ttl.expect("PostgreSQL knows the holder's expiry");
    assert!(left <= ttl && left > ttl / 2, "{left:?} of {ttl:?}");
    assert!(a.release("lock:k", &held.lease).await.unwrap());
}

/// Replicas that start together all create the lease table at once; every one connects.
#[tokio::test]
async fn replicas_starting_together_all_find_their_table() {
    let schema = PostgresSchema::create().await;
    let table = schema.table("leases");
    let mut pools = Vec::new();
    for _ in 0..8 {
        pools.push(schema.pool().await);
    }

    let connecting = pools
        .into_iter()
        .map(|pool| PostgresBackend::with_table(pool, &table));
    let backends = futures_util::future::join_all(connecting).await;

    for backend in backends {
        backend.expect("the table is there, whoever created it");
    }
}

/// Writers waiting for a read-write lock line up in their process and are woken by `NOTIFY`:
/// a release wakes the head of the line alone, so each handoff costs a couple of statements
/// instead of one per waiter (before writers lined up, every release woke all of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_one_waiting_writer_not_all() {
    const WRITERS: u64 = 12;
    let store = PostgresStore::start().await;
    let backend = CountingBackend::new(store.backend().await);
    let locker = Locker::builder(backend.clone())
        .wait(Duration::from_secs(30))
        .build()
        .unwrap();
    let holder = locker.write("k").await.expect("free");
    let writers: Vec<_> = (0..WRITERS)
        .map(|_| {
            let locker = locker.clone();
            tokio::spawn(async move { locker.write("k").await?.release().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = backend.counts().acquires;

    holder.release().await.unwrap();
    for writer in writers {
        writer.await.unwrap().unwrap();
    }

    let handoffs = backend.counts().acquires - before;
    assert!(
        handoffs <= 3 * WRITERS,
        "{handoffs} write attempts for {WRITERS} handoffs: releases woke every waiter"
    );
}

/// Beyond the suite, whose operator's cases read the locker's label: an advisory lock's holder
/// is the session PostgreSQL names (its application name and pid); the operator's release ends
/// that session, so the lock is free when it answers and the holder learns at its next renewal
/// that it lost it. The twin: before the release, the lock stays busy.
#[tokio::test]
async fn an_operator_sees_and_frees_an_advisory_lock_by_its_session() {
    let schema = PostgresSchema::create().await;
    let stuck = AdvisoryBackend::with_pool(schema.pool_as("stuck").await, schema.name());
    let stuck = Locker::builder(stuck)
        .ttl(Duration::from_millis(300))
        .build()
        .unwrap();
    let operator = AdvisoryBackend::with_pool(schema.pool().await, schema.name());
    let operator = Locker::builder(operator).reject().build().unwrap();
    let held = stuck.lock("coupon:1").await.expect("free");

    let state = operator.inspect("coupon:1").await.expect("inspected");
    let [holder] = &state.holders[..] else {
        panic!("one holder: {state:?}");
    };
    assert!(
        holder.label.starts_with("stuck ") && holder.label.contains("(pid "),
        "the holding session as PostgreSQL names it: {holder:?}"
    );
    assert_eq!((holder.fence, holder.lease_left), (None, None));
    assert!(
        operator.lock("coupon:1").await.is_err(),
        "busy before the release"
    );
    assert!(
        operator.held_keys("", None, 10).await.is_err(),
        "hashes cannot be listed"
    );

    let freed = operator.force_release("coupon:1").await.expect("released");
    assert_eq!(freed.len(), 1, "{freed:?}");
    let next = operator.lock("coupon:1").await;
    assert!(next.is_ok(), "free once its session ended: {next:?}");
    let told = tokio::time::timeout(Duration::from_secs(1), held.lost()).await;
    assert!(told.is_ok(), "the holder learns at its next renewal");
}

/// Beyond the suite: a waiting writer's intent that bars readers while another writer's came
/// before it loses its bar at the writer's next attempt, so the readers it barred come in (the
/// writer before it waits for their claims). The twin: until the writer asks again, the
/// readers stay barred.
#[tokio::test]
async fn a_writers_bar_behind_another_writers_intent_is_lifted_at_its_next_attempt() {
    let store = PostgresStore::start().await;
    let backend = store.backend().await;
    let ttl = Duration::from_secs(30);
    let held = granted(backend.acquire("lock:k", request(ttl)).await);
    assert!(backend.release("lock:k", &held.lease).await.unwrap());
    let marks = RaceMarks::new();
    let (us, ms) = (
        "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint",
        "(extract(epoch FROM clock_timestamp()) * 1000)::bigint",
    );
    let left_behind = format!(
        "UPDATE {} SET writers = jsonb_build_object(\
            $1::text, jsonb_build_array({us} - 2, {ms} + 60000, false), \
            $2::text, jsonb_build_array({us} - 1, {ms} + 60000, true)), \
         claims = jsonb_build_object($3::text, {ms} + 60000) \
         WHERE name = 'lock:k'",
        store.0.table("leases")
    );
    let query = sqlx::query(&left_behind)
        .bind(marks.first.to_string())
        .bind(marks.second.to_string())
        .bind(marks.reader.to_string());
    query
        .execute(&store.0.pool().await)
        .await
        .expect("the marks a race leaves");
    a_stale_bar_is_lifted_at_the_writers_next_attempt(&backend, marks).await;
}
