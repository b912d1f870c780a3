//! A holder's database connection killed mid-hold (`pg_terminate_backend`, MariaDB's `KILL`).
//!
//! Session locks (PostgreSQL's advisory locks, MySQL's rows locked `NOWAIT`) live in the
//! connection: killing it frees the lock at once, and the holder is told at its next renewal.
//! Their twin: a live session keeps its lock for many TTLs. Lease rows outlive connections:
//! the holder's pool reconnects and renews, and nobody else gets the lock meanwhile. (A holder
//! that cannot come back within its TTL loses the lease and its writes are refused by the
//! fence: `faults/cut_off_holder.rs`.)

use std::future::Future;
use std::time::Duration;

use integration_tests::{MysqlDatabase, PostgresSchema, granted, request};
use tokio::time::{sleep, timeout};
use tower_lock::backend::mysql::{MysqlBackend, NowaitBackend};
use tower_lock::backend::postgres::{AdvisoryBackend, PostgresBackend};
use tower_lock::backend::{Attempt, LockBackend};
use tower_lock::{LockError, Locker};

const TTL: Duration = Duration::from_millis(600);
/// How the holder's connections name themselves to PostgreSQL.
const HOLDER: &str = "tower-lock-holder";

/// A holder (renewing every TTL/3) and a contender that asks once.
fn lockers<B: LockBackend>(holder: B, contender: B) -> (Locker<B>, Locker<B>) {
    let holder = Locker::builder(holder).ttl(TTL).build().unwrap();
    let contender = Locker::builder(contender)
        .ttl(TTL)
        .reject()
        .build()
        .unwrap();
    (holder, contender)
}

/// Whether the contender finds the lock busy.
async fn busy<B: LockBackend>(contender: &Locker<B>) -> bool {
    match contender.lock("coupon:1").await {
        Ok(held) => {
            held.release().await.ok();
            false
        }
        Err(LockError::Busy { .. }) => true,
        Err(error) => panic!("the store answers: {error}"),
    }
}

/// Takes the lock, kills the holder's connection with `kill`, and says whether the contender
/// then got the lock, and whether the holder was told it lost it within a TTL.
async fn kill_mid_hold<B, K>(holder: B, contender: B, kill: K) -> (bool, bool)
where
    B: LockBackend,
    K: Future<Output = ()>,
{
    let (holder, contender) = lockers(holder, contender);
    let held = holder.lock("coupon:1").await.expect("free");
    assert!(busy(&contender).await, "held before the kill");

    kill.await;
    sleep(TTL / 10).await;

    let taken = !busy(&contender).await;
    let told = timeout(TTL, held.lost()).await.is_ok();
    (taken, told)
}

/// The twin: nothing is killed, and for three TTLs the contender finds the lock busy.
async fn hold_for_three_ttls<B: LockBackend>(holder: B, contender: B) {
    let (holder, contender) = lockers(holder, contender);
    let held = holder.lock("coupon:1").await.expect("free");
    for _ in 0..6 {
        sleep(TTL / 2).await;
        assert!(busy(&contender).await, "a live session keeps its lock");
    }
    assert!(held.is_held());
    held.release().await.expect("still the holder's");
}

async fn advisory(schema: &PostgresSchema) -> (AdvisoryBackend, AdvisoryBackend) {
    let holder = AdvisoryBackend::with_pool(schema.pool_as(HOLDER).await, schema.name());
    let contender = AdvisoryBackend::with_pool(schema.pool().await, schema.name());
    (holder, contender)
}

async fn nowait(database: &MysqlDatabase) -> (NowaitBackend, NowaitBackend) {
    let table = database.table("rows");
    let holder = NowaitBackend::with_table(database.pool().await, &table);
    let contender = NowaitBackend::with_table(database.pool().await, &table);
    (holder.await.unwrap(), contender.await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_session_frees_its_advisory_lock_and_its_holder_is_told() {
    let schema = PostgresSchema::create().await;
    let (holder, contender) = advisory(&schema).await;

    let (taken, told) = kill_mid_hold(holder, contender, async {
        assert!(schema.terminate(HOLDER).await >= 1);
    })
    .await;

    assert!(taken, "the lock is free once its session ended");
    assert!(
        told,
        "the holder learns it lost the lock at its next renewal"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_session_keeps_its_advisory_lock_past_its_ttl() {
    let schema = PostgresSchema::create().await;
    let (holder, contender) = advisory(&schema).await;
    hold_for_three_ttls(holder, contender).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_connection_frees_its_nowait_row_lock_and_its_holder_is_told() {
    let database = MysqlDatabase::create().await;
    let (holder, contender) = nowait(&database).await;

    let (taken, told) = kill_mid_hold(holder, contender, async {
        assert!(database.kill_connections().await >= 1);
    })
    .await;

    assert!(
        taken,
        "the row is free once its transaction's connection died"
    );
    assert!(
        told,
        "the holder learns it lost the lock at its next renewal"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_transaction_keeps_its_nowait_row_lock_past_its_ttl() {
    let database = MysqlDatabase::create().await;
    let (holder, contender) = nowait(&database).await;
    hold_for_three_ttls(holder, contender).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_row_outlives_its_holders_terminated_connections() {
    let schema = PostgresSchema::create().await;
    let table = schema.table("leases");
    let holder = PostgresBackend::with_table(schema.pool_as(HOLDER).await, &table);
    let contender = PostgresBackend::with_table(schema.pool().await, &table);
    let (holder, contender) = (holder.await.unwrap(), contender.await.unwrap());

    let (taken, told) = kill_mid_hold(holder, contender, async {
        assert!(schema.terminate(HOLDER).await >= 1);
    })
    .await;

    assert!(!taken, "the lease is in the row, not the connection");
    assert!(!told, "the holder's pool reconnects and renews");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_row_outlives_its_holders_killed_connections() {
    let database = MysqlDatabase::create().await;
    let table = database.table("leases");
    let holder = MysqlBackend::with_table(database.pool().await, &table);
    let contender = MysqlBackend::with_table(database.pool().await, &table);
    let (holder, contender) = (holder.await.unwrap(), contender.await.unwrap());

    let (taken, told) = kill_mid_hold(holder, contender, async {
        assert!(database.kill_connections().await >= 1);
    })
    .await;

    assert!(!taken, "the lease is in the row, not the connection");
    assert!(!told, "the holder's pool reconnects and renews");
}

/// A lease dropped without a release (its holder gone mid-release, say) ends its session, so
/// the lock is free for others — and not kept by a pooled connection for its next user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_advisory_lease_dropped_unreleased_frees_the_lock() {
    let schema = PostgresSchema::create().await;
    let (holder, contender) = advisory(&schema).await;
    let grant = granted(holder.acquire("lock:k", request(TTL)).await);

    drop(grant);

    assert!(
        free_within(&contender, "lock:k", TTL).await,
        "the dropped lease's session ended"
    );
}

/// The twin, without the lease closing its connection: a pooled session that took an advisory
/// lock and went back to the pool keeps the lock for whoever uses the connection next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_session_keeps_its_advisory_lock() {
    let schema = PostgresSchema::create().await;
    let pool = schema.pool().await;
    let (_, contender) = advisory(&schema).await;
    let key = format!("{}:lock:k", schema.name());
    let mut connection = pool.acquire().await.unwrap();
    let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtextextended($1, 0))")
        .bind(&key)
        .fetch_one(&mut *connection)
        .await
        .unwrap();
    assert!(locked);

    drop(connection);

    assert!(
        !free_within(&contender, "lock:k", TTL).await,
        "the pooled session still holds the lock"
    );
}

/// Whether `backend` is granted `name` within `limit` (released again at once).
async fn free_within<B: LockBackend>(backend: &B, name: &str, limit: Duration) -> bool {
    let asked = tokio::time::Instant::now();
    while asked.elapsed() < limit {
        if let Attempt::Acquired(grant) = backend.acquire(name, request(TTL)).await.unwrap() {
            backend.release(name, &grant.lease).await.unwrap();
            return true;
        }
        sleep(TTL / 20).await;
    }
    false
}
