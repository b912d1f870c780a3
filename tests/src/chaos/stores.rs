//! The stores a chaos run takes place on, started for the run, with the faults they suffer.

use std::fmt;
use std::net::SocketAddr;

use crate::{EtcdCluster, MariadbServer, PostgresServer, RedisServer, ZookeeperEnsemble};

/// A store a chaos run can take place on: every store whose holds several processes share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChaosStore {
    /// One `redis-server` with its append-only file synced on every write, so a restart
    /// keeps the locks and the fencing counters.
    Redis,
    /// A PostgreSQL server of the run's own.
    Postgres,
    /// A MariaDB server of the run's own.
    Mysql,
    /// A three-member etcd cluster.
    Etcd,
    /// A three-server ZooKeeper ensemble.
    Zookeeper,
}

impl ChaosStore {
    /// Every store, in the order runs report them.
    pub const ALL: [Self; 5] = [
        Self::Redis,
        Self::Postgres,
        Self::Mysql,
        Self::Etcd,
        Self::Zookeeper,
    ];

    /// Its name on lockbench's command line: `redis`, `postgres`, `mysql`, `etcd`, `zookeeper`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Redis => "redis",
            Self::Postgres => "postgres",
            Self::Mysql => "mysql",
            Self::Etcd => "etcd",
            Self::Zookeeper => "zookeeper",
        }
    }

    pub(crate) fn start(self) -> RunningStore {
        match self {
            Self::Redis => RunningStore::Redis(RedisServer::start_durable()),
            Self::Postgres => RunningStore::Postgres(PostgresServer::start()),
            Self::Mysql => RunningStore::Mysql(MariadbServer::start()),
            Self::Etcd => RunningStore::Etcd(EtcdCluster::start(3)),
            Self::Zookeeper => RunningStore::Zookeeper(ZookeeperEnsemble::start(3)),
        }
    }
}

impl fmt::Display for ChaosStore {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            Self::Redis => "Redis",
            Self::Postgres => "PostgreSQL",
            Self::Mysql => "MariaDB",
            Self::Etcd => "etcd (3 members)",
            Self::Zookeeper => "ZooKeeper (3 servers)",
        })
    }
}

/// A store running for a chaos run.
#[derive(Debug)]
pub(crate) enum RunningStore {
    Redis(RedisServer),
    Postgres(PostgresServer),
    Mysql(MariadbServer),
    Etcd(EtcdCluster),
    Zookeeper(ZookeeperEnsemble),
}

impl RunningStore {
    /// Every member's client address.
    pub(crate) fn members(&self) -> Vec<SocketAddr> {
        let address = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        let parse = |endpoint: String| {
            let address = endpoint.trim_start_matches("http://");
            address.parse().expect("a member's address")
        };
        match self {
            Self::Redis(server) => vec![address(server.port())],
            Self::Postgres(server) => vec![address(server.port())],
            Self::Mysql(server) => vec![address(server.port())],
            Self::Etcd(cluster) => cluster.endpoints().into_iter().map(parse).collect(),
            Self::Zookeeper(ensemble) => (0..3)
                .map(|index| parse(ensemble.endpoint(index)))
                .collect(),
        }
    }

    /// The store as a `--lock-store` URL through `members` (proxies of [`members`](Self::members),
    /// in the same order).
    pub(crate) fn url_through(&self, members: &[SocketAddr]) -> String {
        let list = |members: &[SocketAddr]| {
            let members: Vec<String> = members.iter().map(ToString::to_string).collect();
            members.join(",")
        };
        match self {
            Self::Redis(_) => format!("redis://{}", members[0]),
            Self::Postgres(_) => format!("postgres://postgres@{}/postgres", members[0]),
            Self::Mysql(_) => format!("mysql://root@{}/test", members[0]),
            Self::Etcd(_) => format!("etcd://{}", list(members)),
            Self::Zookeeper(_) => format!("zk://{}", list(members)),
        }
    }

    /// Kills member `member` (the whole store where it has one) with SIGKILL.
    pub(crate) fn kill(&mut self, member: usize) {
        match self {
            Self::Redis(server) => server.kill(),
            Self::Postgres(server) => server.kill(),
            Self::Mysql(server) => server.kill(),
            Self::Etcd(cluster) => cluster.kill(member),
            Self::Zookeeper(ensemble) => ensemble.kill(member),
        }
    }

    /// Starts killed member `member` again on its data; returns once it serves.
    pub(crate) fn restart(&mut self, member: usize) {
        let serves = match self {
            Self::Redis(server) => {
                server.restart();
                true
            }
            Self::Postgres(server) => {
                server.restart();
                true
            }
            Self::Mysql(server) => {
                server.restart();
                true
            }
            Self::Etcd(cluster) => {
                cluster.restart(member);
                cluster.wait_healthy(member)
            }
            Self::Zookeeper(ensemble) => {
                ensemble.restart(member);
                ensemble.wait_serving(member)
            }
        };
        assert!(
            serves,
            "member {member} of the store did not serve again after its restart"
        );
    }
}
