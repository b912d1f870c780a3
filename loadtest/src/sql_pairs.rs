//! Scenario `distinct-keys` on PostgreSQL or MySQL/MariaDB (`--backend postgres|mysql`):
//! tasks lock and unlock keys nobody else uses, through tower-lock's engine and backend, with
//! the backend's own SQL sent directly, with the database's own lock primitive, and with the
//! engine on Redis for scale. Every run gets a fresh schema (PostgreSQL) or database (MySQL).

use std::time::Duration;

use integration_tests::{MysqlDatabase, PostgresSchema};
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgPool, PgPoolOptions};
use tower_lock::backend::OwnerToken;
use tower_lock::backend::mysql::{MysqlBackend, NowaitBackend};
use tower_lock::backend::postgres::{AdvisoryBackend, PostgresBackend};
use tower_lock::{Locker, RedisBackend};

use crate::distinct_keys::{PairSummary, Pairing, backend_pair, client_timed, engine, engine_pair};
use crate::lease_settings::TTL;

/// Connections of every SQL pool here: the backends' default.
const POOL: u32 = 10;

/// Which database a SQL benchmark runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Database {
    /// The machine's PostgreSQL (`TEST_POSTGRES_URL` to use another).
    Postgres,
    /// The machine's MariaDB or MySQL (`TEST_MYSQL_URL` to use another).
    Mysql,
}

/// What is compared, by its name in the output (prefixed with the database's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SqlPair {
    /// `Locker::with_lock` around no work.
    Engine,
    /// The backend's `acquire` and `release`.
    Backend,
    /// The backend's acquire and release statements, sent directly on a pool.
    Raw,
    /// The database's own lock on one connection: `pg_try_advisory_lock`/`pg_advisory_unlock`,
    /// or `GET_LOCK`/`RELEASE_LOCK`.
    Primitive,
    /// `Locker::with_lock` on the session-lock backend: `AdvisoryBackend` on PostgreSQL,
    /// `NowaitBackend` on MySQL.
    SessionEngine,
    /// `Locker::with_lock` on Redis, on the same machine.
    RedisEngine,
}

impl SqlPair {
    pub const ALL: [SqlPair; 6] = [
        SqlPair::Raw,
        SqlPair::Backend,
        SqlPair::Engine,
        SqlPair::Primitive,
        SqlPair::SessionEngine,
        SqlPair::RedisEngine,
    ];

    pub fn name(self, database: Database) -> &'static str {
        match (database, self) {
            (Database::Postgres, SqlPair::Engine) => "postgres-engine",
            (Database::Postgres, SqlPair::Backend) => "postgres-backend",
            (Database::Postgres, SqlPair::Raw) => "postgres-raw",
            (Database::Postgres, SqlPair::Primitive) => "pg-advisory-lock",
            (Database::Postgres, SqlPair::SessionEngine) => "pg-advisory-engine",
            (Database::Mysql, SqlPair::Engine) => "mysql-engine",
            (Database::Mysql, SqlPair::Backend) => "mysql-backend",
            (Database::Mysql, SqlPair::Raw) => "mysql-raw",
            (Database::Mysql, SqlPair::Primitive) => "mysql-get-lock",
            (Database::Mysql, SqlPair::SessionEngine) => "mysql-nowait-engine",
            (_, SqlPair::RedisEngine) => "redis-engine",
        }
    }
}

/// A fresh schema (PostgreSQL) or database (MySQL) on the machine's server, dropped with
/// everything in it after the run.
pub enum Scratch {
    Postgres(PostgresSchema),
    Mysql(MysqlDatabase),
}

impl Scratch {
    pub async fn create(database: Database) -> Self {
        match database {
            Database::Postgres => Self::Postgres(PostgresSchema::create().await),
            Database::Mysql => Self::Mysql(MysqlDatabase::create().await),
        }
    }

    /// A URL whose connections work in it.
    pub fn url(&self) -> String {
        match self {
            Self::Postgres(schema) => schema.url(),
            Self::Mysql(database) => database.url(),
        }
    }
}

enum Pairs {
    PostgresEngine(Locker<PostgresBackend>),
    PostgresBackend(PostgresBackend),
    PostgresRaw {
        pool: PgPool,
        acquire: String,
        release: String,
    },
    PostgresAdvisory(PgPool),
    PostgresSession(Locker<AdvisoryBackend>),
    MysqlEngine(Locker<MysqlBackend>),
    MysqlBackend(MysqlBackend),
    MysqlRaw {
        pool: MySqlPool,
        acquire: String,
        release: String,
    },
    MysqlGetLock(MySqlPool),
    MysqlSession(Locker<NowaitBackend>),
    RedisEngine(Locker<RedisBackend>),
}

async fn postgres_pool(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(POOL)
        .connect(url)
        .await
        .expect("PostgreSQL reachable")
}

async fn mysql_pool(url: &str) -> MySqlPool {
    MySqlPoolOptions::new()
        .max_connections(POOL)
        .connect(url)
        .await
        .expect("MySQL reachable")
}

impl Pairing for Pairs {
    async fn pair(&self, key: &str) {
        self.pair_once(key).await;
    }
}

impl Pairs {
    async fn connect(
        which: SqlPair,
        database: Database,
        redis_url: &str,
    ) -> (Self, Option<Scratch>) {
        if which == SqlPair::RedisEngine {
            let backend = RedisBackend::connect(redis_url)
                .await
                .expect("Redis reachable");
            return (Pairs::RedisEngine(engine(backend)), None);
        }
        let scratch = Scratch::create(database).await;
        let url = scratch.url();
        match database {
            Database::Postgres => {
                let backend = || async {
                    PostgresBackend::with_table(postgres_pool(&url).await, "tower_lock_leases")
                        .await
                        .expect("the lease table is made")
                };
                let pairs = match which {
                    SqlPair::Engine => Pairs::PostgresEngine(engine(backend().await)),
                    SqlPair::Backend => Pairs::PostgresBackend(backend().await),
                    SqlPair::Raw => {
                        let made = backend().await;
                        let (acquire, release) = made.mutex_statements();
                        Pairs::PostgresRaw {
                            pool: postgres_pool(&url).await,
                            acquire: acquire.to_owned(),
                            release: release.to_owned(),
                        }
                    }
                    SqlPair::SessionEngine => {
                        let pool = postgres_pool(&url).await;
                        Pairs::PostgresSession(engine(AdvisoryBackend::with_pool(pool, "bench")))
                    }
                    _ => Pairs::PostgresAdvisory(postgres_pool(&url).await),
                };
                (pairs, Some(scratch))
            }
            Database::Mysql => {
                let backend = || async {
                    MysqlBackend::with_table(mysql_pool(&url).await, "tower_lock_leases")
                        .await
                        .expect("the lease table is made")
                };
                let pairs = match which {
                    SqlPair::Engine => Pairs::MysqlEngine(engine(backend().await)),
                    SqlPair::Backend => Pairs::MysqlBackend(backend().await),
                    SqlPair::Raw => {
                        let made = backend().await;
                        let (acquire, release) = made.mutex_statements();
                        Pairs::MysqlRaw {
                            pool: mysql_pool(&url).await,
                            acquire: acquire.to_owned(),
                            release: release.to_owned(),
                        }
                    }
                    SqlPair::SessionEngine => {
                        let pool = mysql_pool(&url).await;
                        let backend = NowaitBackend::with_table(pool, "tower_lock_rows").await;
                        Pairs::MysqlSession(engine(backend.expect("the row table is made")))
                    }
                    _ => Pairs::MysqlGetLock(mysql_pool(&url).await),
                };
                (pairs, Some(scratch))
            }
        }
    }

    /// Locks and unlocks `key` once.
    async fn pair_once(&self, key: &str) {
        let millis = TTL.as_millis() as i64;
        match self {
            Pairs::PostgresEngine(locker) => engine_pair(locker, key).await,
            Pairs::MysqlEngine(locker) => engine_pair(locker, key).await,
            Pairs::RedisEngine(locker) => engine_pair(locker, key).await,
            Pairs::PostgresSession(locker) => engine_pair(locker, key).await,
            Pairs::MysqlSession(locker) => engine_pair(locker, key).await,
            Pairs::PostgresBackend(backend) => backend_pair(backend, key).await,
            Pairs::MysqlBackend(backend) => backend_pair(backend, key).await,
            Pairs::PostgresRaw {
                pool,
                acquire,
                release,
            } => {
                let owner = OwnerToken::new().to_string();
                let (fence, _, _): (Option<i64>, Option<i64>, Option<bool>) =
                    sqlx::query_as(acquire)
                        .bind(key)
                        .bind(&owner)
                        .bind(millis)
                        .bind("lockbench")
                        .fetch_one(pool)
                        .await
                        .expect("PostgreSQL answers");
                assert!(fence.is_some(), "a distinct key is free");
                sqlx::query(release)
                    .bind(key)
                    .bind(&owner)
                    .execute(pool)
                    .await
                    .expect("PostgreSQL answers");
            }
            Pairs::MysqlRaw {
                pool,
                acquire,
                release,
            } => {
                let owner = OwnerToken::new().to_string();
                let taken = sqlx::query(acquire)
                    .bind(key.as_bytes())
                    .bind(&owner)
                    .bind(millis * 1000)
                    .bind("lockbench")
                    .execute(pool)
                    .await
                    .expect("MySQL answers");
                assert!(taken.last_insert_id() > 0, "a distinct key is free");
                sqlx::query(release)
                    .bind(key.as_bytes())
                    .bind(&owner)
                    .execute(pool)
                    .await
                    .expect("MySQL answers");
            }
            Pairs::PostgresAdvisory(pool) => {
                let mut connection = pool.acquire().await.expect("PostgreSQL reachable");
                let taken: bool =
                    sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtextextended($1, 0))")
                        .bind(key)
                        .fetch_one(&mut *connection)
                        .await
                        .expect("PostgreSQL answers");
                assert!(taken, "a distinct key is free");
                sqlx::query("SELECT pg_advisory_unlock(hashtextextended($1, 0))")
                    .bind(key)
                    .execute(&mut *connection)
                    .await
                    .expect("PostgreSQL answers");
            }
            Pairs::MysqlGetLock(pool) => {
                let mut connection = pool.acquire().await.expect("MySQL reachable");
                let taken: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
                    .bind(key)
                    .fetch_one(&mut *connection)
                    .await
                    .expect("MySQL answers");
                assert_eq!(taken, Some(1), "a distinct key is free");
                sqlx::query("SELECT RELEASE_LOCK(?)")
                    .bind(key)
                    .execute(&mut *connection)
                    .await
                    .expect("MySQL answers");
            }
        }
    }
}

/// Runs `concurrency` tasks pairing on fresh keys for `duration`, in a fresh schema or
/// database.
pub async fn run(
    which: SqlPair,
    database: Database,
    redis_url: &str,
    concurrency: usize,
    duration: Duration,
) -> PairSummary {
    let (pairs, scratch) = Pairs::connect(which, database, redis_url).await;
    let summary = client_timed(which.name(database), pairs, concurrency, duration).await;
    drop(scratch);
    summary
}
