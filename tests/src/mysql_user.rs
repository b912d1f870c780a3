//! A user of a test's own on the machine's MariaDB, which the test can lock out (as a network
//! cut or a revoked credential would) and let in again.

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::{Connection, MySqlConnection};

use crate::blocking::finish_on_own_thread;
use crate::mysql::{Connections, admin, kill_connections, server_url};

/// A user with every privilege on one database, dropped (connections killed first) when
/// dropped.
#[derive(Debug)]
pub struct MysqlUser {
    name: String,
    database: String,
}

impl MysqlUser {
    /// Creates a user, without a password, with every privilege on `database`.
    pub(crate) async fn create(database: &str) -> Self {
        let name = format!("tl_user_{:016x}", fastrand::u64(..));
        let mut admin = admin().await;
        run(&mut admin, &format!("CREATE USER '{name}'@'%'")).await;
        run(
            &mut admin,
            &format!("GRANT ALL ON {database}.* TO '{name}'@'%'"),
        )
        .await;
        admin.close().await.ok();
        Self {
            name,
            database: database.to_owned(),
        }
    }

    /// A pool of its own on the database, logged in as the user.
    pub async fn pool(&self) -> MySqlPool {
        let options: MySqlConnectOptions = server_url().parse().expect("a mysql:// URL");
        MySqlPoolOptions::new()
            .max_connections(4)
            .connect_with(options.username(&self.name).database(&self.database))
            .await
            .expect("the new user logs in")
    }

    /// Locks the user out (`ACCOUNT LOCK`): it may not log in any more, and its connections
    /// are killed.
    pub async fn lock_out(&self) {
        let mut admin = admin().await;
        run(
            &mut admin,
            &format!("ALTER USER '{}'@'%' ACCOUNT LOCK", self.name),
        )
        .await;
        kill_connections(&mut admin, Connections::OfUser(&self.name)).await;
        admin.close().await.ok();
    }

    /// Lets the user log in again.
    pub async fn let_in(&self) {
        let mut admin = admin().await;
        run(
            &mut admin,
            &format!("ALTER USER '{}'@'%' ACCOUNT UNLOCK", self.name),
        )
        .await;
        admin.close().await.ok();
    }
}

impl Drop for MysqlUser {
    fn drop(&mut self) {
        let name = self.name.clone();
        finish_on_own_thread(|| async move {
            let mut admin = admin().await;
            kill_connections(&mut admin, Connections::OfUser(&name)).await;
            run(&mut admin, &format!("DROP USER '{name}'@'%'")).await;
        });
    }
}

async fn run(admin: &mut MySqlConnection, statement: &str) {
    sqlx::query(statement)
        .execute(admin)
        .await
        .unwrap_or_else(|error| panic!("{statement}: {error}"));
}
