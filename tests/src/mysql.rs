//! A fresh database on the machine's MariaDB (or MySQL) per test, dropped when the test ends.

use crate::blocking::finish_on_own_thread;
use crate::mysql_user::MysqlUser;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::{ConnectOptions, Connection, MySqlConnection};

/// Where the tests find MariaDB: `TEST_MYSQL_URL`, or the loopback server with user `root` and
/// an empty password that `.ci/run` sets up.
pub(crate) fn server_url() -> String {
    std::env::var("TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".to_owned())
}

/// A database of its own on the machine's MariaDB, dropped with everything in it on drop.
#[derive(Debug)]
pub struct MysqlDatabase {
    name: String,
}

impl MysqlDatabase {
    /// Creates a fresh database; panics, saying how to get MariaDB, when it does not answer.
    pub async fn create() -> Self {
        let name = format!("tower_lock_test_{:016x}", fastrand::u64(..));
        let mut admin = admin().await;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .expect("creating a test database");
        admin.close().await.ok();
        Self { name }
    }

    /// `table` in this database: `database.table`.
    pub fn table(&self, table: &str) -> String {
        format!("{}.{table}", self.name)
    }

    /// The URL of this database.
    pub fn url(&self) -> String {
        format!("{}/{}", server_url(), self.name)
    }

    /// A pool of its own on this database, as another process would have.
    pub async fn pool(&self) -> MySqlPool {
        self.pool_of(4).await
    }

    /// A pool of its own of up to `connections` connections (a lock held in a session keeps
    /// one).
    pub async fn pool_of(&self, connections: u32) -> MySqlPool {
        MySqlPoolOptions::new()
            .max_connections(connections)
            .connect(&self.url())
            .await
            .expect("MariaDB answered a moment ago")
    }

    /// Kills every connection using this database (`KILL`), as a crash of the connection
    /// would: how many there were.
    pub async fn kill_connections(&self) -> usize {
        let mut admin = admin().await;
        let killed = kill_connections(&mut admin, Connections::OnDatabase(&self.name)).await;
        admin.close().await.ok();
        killed
    }

    /// A user of its own with every privilege on this database, to lock out and let in.
    pub async fn user(&self) -> MysqlUser {
        MysqlUser::create(&self.name).await
    }
}

/// Whose connections [`kill_connections`] kills.
pub(crate) enum Connections<'a> {
    OnDatabase(&'a str),
    OfUser(&'a str),
}

/// Kills `which` connections (`KILL`): how many there were.
pub(crate) async fn kill_connections(admin: &mut MySqlConnection, which: Connections<'_>) -> usize {
    let (column, value) = match which {
        Connections::OnDatabase(database) => ("DB", database),
        Connections::OfUser(user) => ("USER", user),
    };
    let ids: Vec<i64> = sqlx::query_scalar(&format!(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE {column} = ?"
    ))
    .bind(value)
    .fetch_all(&mut *admin)
    .await
    .expect("MariaDB lists its connections");
    for id in &ids {
        // A connection may have ended by itself meanwhile.
        sqlx::raw_sql(&format!("KILL {id}"))
            .execute(&mut *admin)
            .await
            .ok();
    }
    ids.len()
}

impl Drop for MysqlDatabase {
    fn drop(&mut self) {
        let drop_database = format!("DROP DATABASE IF EXISTS {}", self.name);
        let dropped = finish_on_own_thread(|| async move {
            let mut admin = admin().await;
            sqlx::query(&drop_database).execute(&mut admin).await
        });
        if let Err(error) = dropped {
            eprintln!("could not drop test database {}: {error}", self.name);
        }
    }
}

pub(crate) async fn admin() -> MySqlConnection {
    let url = server_url();
    let options: MySqlConnectOptions = url.parse().expect("TEST_MYSQL_URL is a mysql:// URL");
    options.connect().await.unwrap_or_else(|error| {
        panic!(
            "MariaDB at {url} does not answer ({error}). Install and start it \
             (apt-get install mariadb-server; service mariadb start) with user root and an \
             empty password on 127.0.0.1 — `.ci/run` sets this up — or point TEST_MYSQL_URL \
             at a server (mysql://user:password@host:port, no database)."
        )
    })
}
