//! The conformance suite on MariaDB: every case in a database of its own on the machine's
//! server, with two backends (own connection pools) standing in for two processes.

use std::time::Duration;

use integration_tests::{
    MysqlDatabase, RaceMarks, a_stale_bar_is_lifted_at_the_writers_next_attempt, granted, request,
};
use tower_lock::Locker;
use tower_lock::backend::mysql::{MysqlBackend, NowaitBackend};
use tower_lock::backend::{Attempt, LockBackend};
use tower_lock::conformance::Store;

mod lease_rows {
    tower_lock::conformance_suite!(
        super::MysqlStore,
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

mod nowait {
    tower_lock::conformance_suite!(super::NowaitStore, inspect, listing);
}

/// A fresh database whose lease table the backends share.
struct MysqlStore(MysqlDatabase);

impl Store for MysqlStore {
    type Backend = MysqlBackend;

    async fn start() -> Self {
        Self(MysqlDatabase::create().await)
    }

    async fn backend(&self) -> MysqlBackend {
        MysqlBackend::with_table(self.0.pool().await, &self.0.table("leases"))
            .await
            .expect("the lease table is created")
    }
}

/// Rows locked `FOR UPDATE NOWAIT` in a fresh database: no leases, no fences.
struct NowaitStore(MysqlDatabase);

impl Store for NowaitStore {
    type Backend = NowaitBackend;

    async fn start() -> Self {
        Self(MysqlDatabase::create().await)
    }

    async fn backend(&self) -> NowaitBackend {
        NowaitBackend::with_table(self.0.pool_of(8).await, &self.0.table("rows"))
            .await
            .expect("the row table is created")
    }

    fn fences(&self) -> bool {
        false
    }

    fn leases_expire(&self) -> bool {
        false
    }

    fn holders_seen_from_grant(&self) -> bool {
        false
    }
}

/// A `NOWAIT` holder writes its record at its first renewal, not on the lock path: a hold
/// younger than that is not seen (the mode's stated limit); past it, it is seen with the time
/// held since its grant.
#[tokio::test]
async fn a_nowait_holder_is_seen_from_its_first_renewal_with_its_grant_time() {
    let store = NowaitStore::start().await;
    let ttl = Duration::from_secs(3);
    let worker = Locker::builder(store.backend().await)
        .holder_label("worker")
        .ttl(ttl)
        .build()
        .expect("settings");
    let operator = Locker::new(store.backend().await);
    let held = worker.lock("coupon:42").await.expect("taken");

    let young = operator.inspect("coupon:42").await.expect("inspected");
    assert!(
        !young.is_held(),
        "no record before the first renewal: {young:?}"
    );

    tokio::time::sleep(ttl / 3 + Duration::from_millis(500)).await;
    let state = operator.inspect("coupon:42").await.expect("inspected");
    let [holder] = &state.holders[..] else {
        panic!("one holder: {state:?}");
    };
    assert_eq!(holder.label, "worker");
    assert!(
        holder.held_for >= ttl / 3,
        "held since its grant: {holder:?}"
    );
    held.release().await.expect("released");
}

/// A `NOWAIT` holder whose record the server refuses (a row table made by an older build,
/// without the record's columns) keeps its lock: the refusal is one failed renewal, and the
/// renewals after it ping as before.
#[tokio::test]
async fn a_refused_nowait_record_costs_the_holder_nothing() {
    let database = MysqlDatabase::create().await;
    let (pool, table) = (database.pool().await, database.table("rows"));
    let old = format!("CREATE TABLE {table} (name VARBINARY(512) NOT NULL PRIMARY KEY)");
    sqlx::query(&old)
        .execute(&pool)
        .await
        .expect("an old table");
    let backend = NowaitBackend::with_table(pool, &table)
        .await
        .expect("the old table is kept");
    let ttl = Duration::from_millis(300);
    let worker = Locker::builder(backend).ttl(ttl).build().expect("settings");

    let held = worker.lock("coupon:42").await.expect("taken");
    tokio::time::sleep(ttl * 2).await;
    assert!(
        held.is_held(),
        "past the refused record and two more renewals"
    );
    held.release().await.expect("released");
}

/// Beyond the suite, which allows a backend not to know: a busy acquire says how long the
/// holder has left, by the server's clock.
#[tokio::test]
async fn a_busy_answer_says_how_long_the_holder_has_left() {
    let store = MysqlStore::start().await;
    let (a, b) = (store.backend().await, store.backend().await);
    let ttl = Duration::from_secs(30);
    let held = granted(a.acquire("lock:k", request(ttl)).await);

    let Ok(Attempt::Busy { holder_ttl }) = b.acquire("lock:k", request(ttl)).await else {
        panic!("the lock is held");
    };

    let left = holder_ttl.expect("the server knows the holder's expiry");
    assert!(left <= ttl && left > ttl / 2, "{left:?} of {ttl:?}");
    assert!(a.release("lock:k", &held.lease).await.unwrap());
}

/// Replicas that start together all create the lease table at once; every one connects.
#[tokio::test]
async fn replicas_starting_together_all_find_their_table() {
    let database = MysqlDatabase::create().await;
    let table = database.table("leases");
    let mut pools = Vec::new();
    for _ in 0..8 {
        pools.push(database.pool().await);
    }

    let connecting = pools
        .into_iter()
        .map(|pool| MysqlBackend::with_table(pool, &table));
    let backends = futures_util::future::join_all(connecting).await;

    for backend in backends {
        backend.expect("the table is there, whoever created it");
    }
}

/// Beyond the suite: a waiting writer's intent that bars readers while another writer's came
/// before it — its arrival, taken when that writer's statement began, before it waited for
/// the row — loses its bar at the writer's next attempt, so the readers it barred come in (the
/// writer before it waits for their claims: a deadlock, else, until the waits run out). The
/// twin: until the writer asks again, the readers stay barred.
#[tokio::test]
async fn a_writers_bar_behind_another_writers_intent_is_lifted_at_its_next_attempt() {
    let store = MysqlStore::start().await;
    let backend = store.backend().await;
    let ttl = Duration::from_secs(30);
    let held = granted(backend.acquire("lock:k", request(ttl)).await);
    assert!(backend.release("lock:k", &held.lease).await.unwrap());
    let marks = RaceMarks::new();
    let now = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))";
    let left_behind = format!(
        "UPDATE {} SET writers = JSON_ARRAY(\
            JSON_OBJECT('t', ?, 'a', {now} - 2, 'e', {now} + 60000000, 'b', FALSE), \
            JSON_OBJECT('t', ?, 'a', {now} - 1, 'e', {now} + 60000000, 'b', TRUE)), \
         claims = JSON_ARRAY(JSON_OBJECT('t', ?, 'e', {now} + 60000000)) \
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
