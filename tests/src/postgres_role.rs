//! A login role of a test's own on the machine's PostgreSQL, which the test can lock out
//! (as a network cut or a revoked credential would) and let in again.

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Connection, PgConnection};

use crate::blocking::finish_on_own_thread;
use crate::postgres::{admin, postgres_url};

/// A role with every privilege on one schema, dropped (sessions ended first) when dropped.
#[derive(Debug)]
pub struct PostgresRole {
    name: String,
}

impl PostgresRole {
    /// Creates a role that may log in and use `schema` and every table in it now.
    pub(crate) async fn create(schema: &str) -> Self {
        let name = format!("tower_lock_role_{:016x}", fastrand::u64(..));
        let mut admin = admin().await;
        for statement in [
            format!("CREATE ROLE {name} LOGIN"),
            format!("GRANT ALL ON SCHEMA {schema} TO {name}"),
            format!("GRANT ALL ON ALL TABLES IN SCHEMA {schema} TO {name}"),
        ] {
            run(&mut admin, &statement).await;
        }
        admin.close().await.ok();
        Self { name }
    }

    /// A pool of its own, logged in as the role, whose connections name themselves
    /// `application` to the server.
    pub async fn pool(&self, application: &str) -> PgPool {
        let options: PgConnectOptions = postgres_url().parse().expect("a postgres:// URL");
        PgPoolOptions::new()
            .max_connections(4)
            .connect_with(options.username(&self.name).application_name(application))
            .await
            .expect("the new role logs in")
    }

    /// Locks the role out: it may not log in any more, and its sessions are ended.
    pub async fn lock_out(&self) {
        let mut admin = admin().await;
        run(&mut admin, &format!("ALTER ROLE {} NOLOGIN", self.name)).await;
        end_sessions(&mut admin, &self.name).await;
        admin.close().await.ok();
    }

    /// Lets the role log in again.
    pub async fn let_in(&self) {
        let mut admin = admin().await;
        run(&mut admin, &format!("ALTER ROLE {} LOGIN", self.name)).await;
        admin.close().await.ok();
    }
}

impl Drop for PostgresRole {
    fn drop(&mut self) {
        let name = self.name.clone();
        finish_on_own_thread(|| async move {
            let mut admin = admin().await;
            end_sessions(&mut admin, &name).await;
            run(&mut admin, &format!("DROP OWNED BY {name}")).await;
            run(&mut admin, &format!("DROP ROLE {name}")).await;
        });
    }
}

async fn run(admin: &mut PgConnection, statement: &str) {
    sqlx::query(statement)
        .execute(admin)
        .await
        .unwrap_or_else(|error| panic!("{statement}: {error}"));
}

async fn end_sessions(admin: &mut PgConnection, role: &str) {
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1")
        .bind(role)
        .execute(admin)
        .await
        .expect("PostgreSQL ends the role's sessions");
}
