//! A lease-row holder cut off from the database mid-hold: its connections are killed
//! (`pg_terminate_backend`, MariaDB's `KILL`) and it cannot log in again (its role or user
//! locked out, as a network cut or a revoked credential would do). Its renewals fail, so it is
//! told the lease is lost; another replica takes the lock with a newer fence; and when the old
//! holder reaches the database again, its write carrying the old fence is refused. The twin
//! writes without the fence condition: the stale write lands.

use std::time::Duration;

use integration_tests::{MysqlDatabase, MysqlUser, PostgresRole, PostgresSchema};
use sqlx::{MySqlPool, PgPool};
use tokio::time::timeout;
use tower_lock::Locker;
use tower_lock::backend::LockBackend;
use tower_lock::backend::mysql::MysqlBackend;
use tower_lock::backend::postgres::PostgresBackend;

/// The leases here: the contender renews its own (every third) while it writes, and a loaded
/// machine has delayed a round trip by 324 ms; 1.5 s leaves a second after each renewal.
const TTL: Duration = Duration::from_millis(1500);

/// A database where the test can cut the holder off, and the claim's write to a coupon.
trait Database {
    type Backend: LockBackend;

    /// The holder's backend, on its own (cuttable) login, or another replica's.
    async fn backend(&self, as_holder: bool) -> Self::Backend;
    /// Kills the holder's connections and keeps it from logging in again.
    async fn cut_holder_off(&self);
    /// Lets the holder log in again.
    async fn let_holder_in(&self);
    /// Claims the coupon as the holder (or the contender) — fenced by `fence` (`… AND
    /// last_fence <= fence`), or not — and says whether the write changed it.
    async fn claim(&self, as_holder: bool, fence: Option<u64>) -> bool;
}

/// What happened to the cut-off holder: whether it was told its lease was lost, and whether
/// its stale write landed.
async fn cut_off_mid_hold<D: Database>(database: &D, fenced: bool) -> (bool, bool) {
    let holder = Locker::builder(database.backend(true).await)
        .ttl(TTL)
        .build()
        .unwrap();
    let contender = Locker::builder(database.backend(false).await)
        .ttl(TTL)
        .build()
        .unwrap();
    let held = holder.lock("coupon:1").await.expect("free");
    let old_fence = held.fence().expect("lease rows fence").get();

    database.cut_holder_off().await;
    let told = timeout(3 * TTL, held.lost()).await.is_ok();

    let taken = contender.lock("coupon:1").await.expect("free once expired");
    let new_fence = taken.fence().expect("lease rows fence").get();
    assert!(new_fence > old_fence, "{new_fence} after {old_fence}");
    assert!(
        database.claim(false, Some(new_fence)).await,
        "the new holder writes"
    );
    taken.release().await.expect("still the contender's");

    database.let_holder_in().await;
    let landed = database.claim(true, fenced.then_some(old_fence)).await;
    (told, landed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_holder_cut_off_loses_its_lease_and_its_fenced_write_is_refused() {
    let database = Postgres::create().await;
    let (told, landed) = cut_off_mid_hold(&database, true).await;
    assert!(told, "the holder learns its lease is lost");
    assert!(!landed, "the database refuses the stale fence");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_fence_a_cut_off_postgres_holders_stale_write_lands() {
    let database = Postgres::create().await;
    let (told, landed) = cut_off_mid_hold(&database, false).await;
    assert!(told);
    assert!(landed, "nothing stops a holder that no longer holds");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mariadb_holder_cut_off_loses_its_lease_and_its_fenced_write_is_refused() {
    let database = Mariadb::create().await;
    let (told, landed) = cut_off_mid_hold(&database, true).await;
    assert!(told, "the holder learns its lease is lost");
    assert!(!landed, "the database refuses the stale fence");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_fence_a_cut_off_mariadb_holders_stale_write_lands() {
    let database = Mariadb::create().await;
    let (told, landed) = cut_off_mid_hold(&database, false).await;
    assert!(told);
    assert!(landed, "nothing stops a holder that no longer holds");
}

/// A fresh schema with the lease and coupon tables, and the holder's role.
struct Postgres {
    schema: PostgresSchema,
    pool: PgPool,
    holder_pool: PgPool,
    role: PostgresRole,
}

impl Postgres {
    async fn create() -> Self {
        let schema = PostgresSchema::create().await;
        let pool = schema.pool().await;
        PostgresBackend::with_table(pool.clone(), &schema.table("leases"))
            .await
            .unwrap();
        for statement in coupon_table(&schema.table("coupons")) {
            sqlx::query(&statement).execute(&pool).await.unwrap();
        }
        let role = schema.role().await;
        let holder_pool = role.pool("tower-lock-holder").await;
        Self {
            schema,
            pool,
            holder_pool,
            role,
        }
    }

    fn pool(&self, as_holder: bool) -> &PgPool {
        if as_holder {
            &self.holder_pool
        } else {
            &self.pool
        }
    }
}

impl Database for Postgres {
    type Backend = PostgresBackend;

    async fn backend(&self, as_holder: bool) -> PostgresBackend {
        let table = self.schema.table("leases");
        PostgresBackend::with_table(self.pool(as_holder).clone(), &table)
            .await
            .unwrap()
    }

    async fn cut_holder_off(&self) {
        self.role.lock_out().await;
    }

    async fn let_holder_in(&self) {
        self.role.let_in().await;
    }

    async fn claim(&self, as_holder: bool, fence: Option<u64>) -> bool {
        let coupons = self.schema.table("coupons");
        let pool = self.pool(as_holder);
        let fence = fence.map(|fence| i64::try_from(fence).unwrap());
        let claim = match fence {
            Some(_) => format!(
                "UPDATE {coupons} SET claimed = claimed + 1, last_fence = $1 \
                 WHERE id = 1 AND last_fence <= $1"
            ),
            None => format!("UPDATE {coupons} SET claimed = claimed + 1 WHERE id = 1"),
        };
        let query = sqlx::query(&claim);
        let query = match fence {
            Some(fence) => query.bind(fence),
            None => query,
        };
        query.execute(pool).await.unwrap().rows_affected() == 1
    }
}

/// A fresh database with the lease and coupon tables, and the holder's user.
struct Mariadb {
    database: MysqlDatabase,
    pool: MySqlPool,
    holder_pool: MySqlPool,
    user: MysqlUser,
}

impl Mariadb {
    async fn create() -> Self {
        let database = MysqlDatabase::create().await;
        let pool = database.pool().await;
        for statement in coupon_table(&database.table("coupons")) {
            sqlx::query(&statement).execute(&pool).await.unwrap();
        }
        let user = database.user().await;
        let holder_pool = user.pool().await;
        Self {
            database,
            pool,
            holder_pool,
            user,
        }
    }

    fn pool(&self, as_holder: bool) -> &MySqlPool {
        if as_holder {
            &self.holder_pool
        } else {
            &self.pool
        }
    }
}

impl Database for Mariadb {
    type Backend = MysqlBackend;

    async fn backend(&self, as_holder: bool) -> MysqlBackend {
        let table = self.database.table("leases");
        MysqlBackend::with_table(self.pool(as_holder).clone(), &table)
            .await
            .unwrap()
    }

    async fn cut_holder_off(&self) {
        self.user.lock_out().await;
    }

    async fn let_holder_in(&self) {
        self.user.let_in().await;
    }

    async fn claim(&self, as_holder: bool, fence: Option<u64>) -> bool {
        let coupons = self.database.table("coupons");
        let pool = self.pool(as_holder);
        let claim = match fence {
            Some(_) => format!(
                "UPDATE {coupons} SET claimed = claimed + 1, last_fence = ? \
                 WHERE id = 1 AND last_fence <= ?"
            ),
            None => format!("UPDATE {coupons} SET claimed = claimed + 1 WHERE id = 1"),
        };
        let query = sqlx::query(&claim);
        let query = match fence {
            Some(fence) => query.bind(fence).bind(fence),
            None => query,
        };
        query.execute(pool).await.unwrap().rows_affected() == 1
    }
}

/// Creates the coupon table `coupons` with coupon 1, unclaimed, never fenced.
fn coupon_table(coupons: &str) -> [String; 2] {
    [
        format!(
            "CREATE TABLE {coupons} (id int PRIMARY KEY, claimed int NOT NULL, \
             last_fence bigint NOT NULL)"
        ),
        format!("INSERT INTO {coupons} VALUES (1, 0, 0)"),
    ]
}
