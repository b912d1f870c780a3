//! Scenario `distinct-keys` on ZooKeeper (`--backend zookeeper`): tasks lock and unlock keys
//! nobody else uses, through tower-lock's engine and backend, with the backend's three requests
//! sent directly (Curator's recipe: create the node, list the directory, delete the node), and
//! with the engine on Redis for scale. Every run keeps its nodes under a root of its own.

use std::time::Duration;

use tower_lock::backend::OwnerToken;
use tower_lock::backend::zookeeper::{ZookeeperBackend, ZookeeperSettings};
use tower_lock::{Locker, RedisBackend};
use zookeeper_client::{Acls, Client, CreateMode};

use crate::distinct_keys::{PairSummary, Pairing, backend_pair, client_timed, engine, engine_pair};
use crate::lease_settings::SESSION;

/// What is compared, by its name in the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZookeeperPair {
    /// The backend's requests, sent directly.
    Raw,
    /// The backend's `acquire` and `release`.
    Backend,
    /// `Locker::with_lock` around no work.
    Engine,
    /// `Locker::with_lock` on Redis, on the same machine.
    RedisEngine,
}

impl ZookeeperPair {
    pub const ALL: [ZookeeperPair; 4] = [
        ZookeeperPair::Raw,
        ZookeeperPair::Backend,
        ZookeeperPair::Engine,
        ZookeeperPair::RedisEngine,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ZookeeperPair::Raw => "zookeeper-raw",
            ZookeeperPair::Backend => "zookeeper-backend",
            ZookeeperPair::Engine => "zookeeper-engine",
            ZookeeperPair::RedisEngine => "redis-engine",
        }
    }
}

enum Pairs {
    Engine(Locker<ZookeeperBackend>),
    Backend(ZookeeperBackend),
    /// The backend's requests on a session of their own, directories under `root`.
    Raw {
        client: Client,
        root: String,
    },
    RedisEngine(Locker<RedisBackend>),
}

impl Pairs {
    async fn connect(which: ZookeeperPair, servers: &str, redis_url: &str, root: &str) -> Self {
        let backend = || async {
            let settings = ZookeeperSettings::default()
                .root(root)
                .session_timeout(SESSION);
            ZookeeperBackend::connect_with(servers, settings)
                .await
                .expect("ZooKeeper reachable")
        };
        match which {
            ZookeeperPair::Engine => Pairs::Engine(engine(backend().await)),
            ZookeeperPair::Backend => Pairs::Backend(backend().await),
            ZookeeperPair::Raw => {
                let client = Client::connector()
                    .with_session_timeout(SESSION)
                    .connect(servers)
                    .await
                    .expect("ZooKeeper reachable");
                let directory = CreateMode::Persistent.with_acls(Acls::anyone_all());
                client.mkdir(root, &directory).await.expect("a root");
                Pairs::Raw {
                    client,
                    root: root.to_owned(),
                }
            }
            ZookeeperPair::RedisEngine => {
                let backend = RedisBackend::connect(redis_url).await;
                Pairs::RedisEngine(engine(backend.expect("Redis reachable")))
            }
        }
    }
}

impl Pairing for Pairs {
    async fn pair(&self, key: &str) {
        match self {
            Pairs::Engine(locker) => engine_pair(locker, key).await,
            Pairs::RedisEngine(locker) => engine_pair(locker, key).await,
            Pairs::Backend(backend) => backend_pair(backend, key).await,
            Pairs::Raw { client, root } => raw_pair(client, root, key).await,
        }
    }
}

/// The backend's requests for a mutex on a fresh `key`: create the holder's ephemeral
/// sequential node (its container directory first, as the first node of a key finds none),
/// list the directory, delete the node.
async fn raw_pair(client: &Client, root: &str, key: &str) {
    let dir = format!("{root}/{key}");
    let prefix = format!("{dir}/x-{}-", OwnerToken::new());
    let node = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let container = CreateMode::Container.with_acls(Acls::anyone_all());
    let created = match client.create(&prefix, &[], &node).await {
        Err(zookeeper_client::Error::NoNode) => {
            client
                .create(&dir, &[], &container)
                .await
                .expect("ZooKeeper answers");
            client.create(&prefix, &[], &node).await
        }
        created => created,
    };
    let (_, sequence) = created.expect("ZooKeeper answers");
    let children = client.list_children(&dir).await.expect("ZooKeeper answers");
    assert_eq!(children.len(), 1, "a distinct key's only node holds it");
    client
        .delete(&format!("{prefix}{sequence}"), None)
        .await
        .expect("the holder deletes its node");
}

/// Runs `concurrency` tasks pairing on fresh keys for `duration`, under a root of the run's
/// own.
pub async fn run(
    which: ZookeeperPair,
    servers: &str,
    redis_url: &str,
    concurrency: usize,
    duration: Duration,
) -> PairSummary {
    let root = format!("/bench-{:x}", fastrand::u64(..));
    let pairs = Pairs::connect(which, servers, redis_url, &root).await;
    client_timed(which.name(), pairs, concurrency, duration).await
}
