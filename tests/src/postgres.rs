//! A fresh schema on the machine's PostgreSQL per test, dropped when the test ends.

use crate::blocking::finish_on_own_thread;
use crate::postgres_role::PostgresRole;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection};

/// Where the tests find PostgreSQL: `TEST_POSTGRES_URL`, or the loopback server with trust
/// authentication that `.ci/run` sets up.
pub fn postgres_url() -> String {
    std::env::var("TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/test".to_owned())
}

/// A schema of its own on the machine's PostgreSQL, dropped with everything in it on drop.
#[derive(Debug)]
pub struct PostgresSchema {
    name: String,
}

impl PostgresSchema {
    /// Creates a fresh schema; panics, saying how to get PostgreSQL, when it does not answer.
    pub async fn create() -> Self {
        let name = format!("tower_lock_test_{:016x}", fastrand::u64(..));
        let mut admin = admin().await;
        sqlx::query(&format!("CREATE SCHEMA {name}"))
            .execute(&mut admin)
            .await
            .expect("creating a test schema");
        admin.close().await.ok();
        Self { name }
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `table` in this schema: `schema.table`.
    pub fn table(&self, table: &str) -> String {
        format!("{}.{table}", self.name)
    }

    /// A URL of the test database whose connections work in this schema (their
    /// `search_path`), for a process that creates its tables unqualified.
    pub fn url(&self) -> String {
        let url = postgres_url();
        let separator = if url.contains('?') { '&' } else { '?' };
        format!("{url}{separator}options=-c%20search_path%3D{}", self.name)
    }

    /// A pool of its own on the test database, as another process would have.
    pub async fn pool(&self) -> PgPool {
        self.pool_as("tower-lock-test").await
    }

    /// A pool of its own whose connections name themselves `application` to the server (with
    /// this schema's name: tests running at once never end each other's sessions), so that
    /// [`terminate`](Self::terminate) can find them.
    pub async fn pool_as(&self, application: &str) -> PgPool {
        let options: PgConnectOptions = postgres_url().parse().expect("a postgres:// URL");
        let application = self.application(application);
        PgPoolOptions::new()
            .max_connections(4)
            .connect_with(options.application_name(&application))
            .await
            .expect("PostgreSQL answered a moment ago")
    }

    /// `application` as this schema's sessions name themselves.
    fn application(&self, application: &str) -> String {
        format!("{application} {}", self.name)
    }

    /// A login role of its own with every privilege on this schema and the tables in it now,
    /// to lock out and let in.
    pub async fn role(&self) -> PostgresRole {
        PostgresRole::create(&self.name).await
    }

    /// Ends every session of `application` (`pg_terminate_backend`), as a crash of the
    /// connection would: how many there were.
    pub async fn terminate(&self, application: &str) -> i64 {
        let application = self.application(application);
        let mut admin = admin().await;
        let ended = sqlx::query_scalar(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = $1",
        )
        .bind(application)
        .fetch_one(&mut admin)
        .await
        .expect("PostgreSQL terminates sessions");
        admin.close().await.ok();
        ended
    }
}

impl Drop for PostgresSchema {
    fn drop(&mut self) {
        let drop_schema = format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name);
        let dropped = finish_on_own_thread(|| async move {
            let mut admin = admin().await;
            sqlx::query(&drop_schema).execute(&mut admin).await
        });
        if let Err(error) = dropped {
            eprintln!("could not drop test schema {}: {error}", self.name);
        }
    }
}

pub(crate) async fn admin() -> PgConnection {
    let url = postgres_url();
    let options: PgConnectOptions = url.parse().expect("TEST_POSTGRES_URL is a postgres:// URL");
    options.connect().await.unwrap_or_else(|error| {
        panic!(
            "PostgreSQL at {url} does not answer ({error}). Install and start it \
             (apt-get install postgresql; service postgresql start), with a role and database \
             the URL names and trust authentication on 127.0.0.1 — `.ci/run` sets this up — \
             or point TEST_POSTGRES_URL at one."
        )
    })
}
