//! Test support for tower-lock's end-to-end tests: real `redis-server` processes on free
//! loopback ports — single servers and Redis Clusters ([`RedisCluster`]) —, started per test
//! and killed on drop, with fault injection (kill, restart on the same port, pause with
//! SIGSTOP, a hash slot migrated).
//!
//! Tests never use a Redis somebody left running: each starts its own. On the machine's
//! PostgreSQL and MariaDB, each takes a fresh schema or database of its own
//! ([`PostgresSchema`], [`MysqlDatabase`]) and drops it; a test that kills and restarts the
//! database starts a server of its own ([`PostgresServer`], [`MariadbServer`]). Demo replicas
//! run as real processes too ([`DemoReplica`]), driven over HTTP ([`Http`]).

mod blocking;
mod browser;
mod certificates;
pub mod chaos;
pub mod consensus;
mod demo;
mod etcd_cluster;
mod failover;
mod http_client;
mod in_process;
mod locks;
mod mariadb_server;
mod mysql;
mod mysql_user;
pub mod outage;
mod postgres;
mod postgres_role;
mod postgres_server;
mod private_server;
mod probes;
mod process;
mod redis_cluster;
mod redis_sentinel;
mod redis_server;
mod stale_bar;
mod zookeeper_ensemble;

pub use browser::Browser;
pub use certificates::TlsFiles;
pub use demo::DemoReplica;
pub use etcd_cluster::EtcdCluster;
pub use failover::lockers_recover_from;
pub use http_client::Http;
pub use in_process::{Reply, post, send};
pub use locks::{fence_of, granted, hold, request};
pub use mariadb_server::MariadbServer;
pub use mysql::MysqlDatabase;
pub use mysql_user::MysqlUser;
pub use postgres::PostgresSchema;
pub use postgres_role::PostgresRole;
pub use postgres_server::PostgresServer;
pub use probes::{Gate, GateControl};
pub use process::free_port;
pub use redis_cluster::RedisCluster;
pub use redis_sentinel::{MASTER_NAME, RedisSentinels};
pub use redis_server::RedisServer;
pub use stale_bar::{RaceMarks, a_stale_bar_is_lifted_at_the_writers_next_attempt};
pub use tower_lock::conformance::Occupancy;
pub use zookeeper_ensemble::ZookeeperEnsemble;
