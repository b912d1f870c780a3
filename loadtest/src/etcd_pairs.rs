//! Scenario `distinct-keys` on etcd (`--backend etcd`): tasks lock and unlock keys nobody else
//! uses, through tower-lock's engine and backend, with the backend's two transactions sent
//! directly, with etcd's own lock service (the `Lock`/`Unlock` RPCs), and with the engine on
//! Redis for scale. Every run keeps its keys under a namespace of its own.

use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, KvClient, LockClient, LockOptions, PutOptions, Txn,
    TxnOp,
};
use tower_lock::backend::OwnerToken;
use tower_lock::backend::etcd::{EtcdBackend, EtcdSettings};
use tower_lock::{Locker, RedisBackend};

use crate::distinct_keys::{PairSummary, Pairing, backend_pair, client_timed, engine, engine_pair};
use crate::lease_settings::SESSION;

/// What is compared, by its name in the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtcdPair {
    /// The backend's acquire and release transactions, sent directly.
    Raw,
    /// The backend's `acquire` and `release`.
    Backend,
    /// `Locker::with_lock` around no work.
    Engine,
    /// etcd's own lock service: `Lock` and `Unlock` on one session lease.
    LockRpc,
    /// `Locker::with_lock` on Redis, on the same machine.
    RedisEngine,
}

impl EtcdPair {
    pub const ALL: [EtcdPair; 5] = [
        EtcdPair::Raw,
        EtcdPair::Backend,
        EtcdPair::Engine,
        EtcdPair::LockRpc,
        EtcdPair::RedisEngine,
    ];

    pub fn name(self) -> &'static str {
        match self {
            EtcdPair::Raw => "etcd-raw",
            EtcdPair::Backend => "etcd-backend",
            EtcdPair::Engine => "etcd-engine",
            EtcdPair::LockRpc => "etcd-lock-rpc",
            EtcdPair::RedisEngine => "redis-engine",
        }
    }
}

enum Pairs {
    Engine(Locker<EtcdBackend>),
    Backend(EtcdBackend),
    /// The backend's transactions on a lease of their own, keys under `namespace`.
    Raw {
        kv: KvClient,
        lease: i64,
        namespace: String,
    },
    LockRpc {
        locks: LockClient,
        lease: i64,
    },
    RedisEngine(Locker<RedisBackend>),
}

/// A lease for the raw pairs and the lock service: longer than any run, so it needs no
/// keep-alive.
const RUN_LEASE_S: i64 = 60;

impl Pairs {
    async fn connect(which: EtcdPair, endpoint: &str, redis_url: &str, namespace: &str) -> Self {
        let backend = || async {
            let settings = EtcdSettings::default()
                .namespace(namespace)
                .session_ttl(SESSION);
            EtcdBackend::connect_with([endpoint], settings)
                .await
                .expect("etcd reachable")
        };
        let client = || async {
            let client = Client::connect([endpoint], None).await;
            let client = client.expect("etcd reachable");
            let lease = client.lease_client().grant(RUN_LEASE_S, None).await;
            (client, lease.expect("a lease").id())
        };
        match which {
            EtcdPair::Engine => Pairs::Engine(engine(backend().await)),
            EtcdPair::Backend => Pairs::Backend(backend().await),
            EtcdPair::Raw => {
                let (client, lease) = client().await;
                let namespace = namespace.to_owned();
                let kv = client.kv_client();
                Pairs::Raw {
                    kv,
                    lease,
                    namespace,
                }
            }
            EtcdPair::LockRpc => {
                let (client, lease) = client().await;
                Pairs::LockRpc {
                    locks: client.lock_client(),
                    lease,
                }
            }
            EtcdPair::RedisEngine => {
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
            Pairs::Raw {
                kv,
                lease,
                namespace,
            } => raw_pair(kv.clone(), *lease, namespace, key).await,
            Pairs::LockRpc { locks, lease } => {
                let mut locks = locks.clone();
                let options = LockOptions::new().with_lease(*lease);
                let held = locks.lock(key, Some(options)).await;
                let held = held.expect("etcd answers");
                locks.unlock(held.key()).await.expect("etcd answers");
            }
        }
    }
}

/// The backend's two requests for a mutex on `key`: a transaction putting the holder's key
/// when nothing is under the lock and the token has not given up, and a delete of that key
/// returning what it deleted.
async fn raw_pair(mut kv: KvClient, lease: i64, namespace: &str, key: &str) {
    let token = OwnerToken::new();
    let prefix = format!("{namespace}{key}/");
    let holder = format!("{prefix}x/{token}");
    let given_up = format!("{namespace}%given-up/{token}");
    let acquire = Txn::new()
        .when([
            Compare::version(prefix, CompareOp::Equal, 0).with_prefix(),
            Compare::create_revision(given_up, CompareOp::Equal, 0),
        ])
        .and_then([TxnOp::put(
            holder.clone(),
            Vec::new(),
            Some(PutOptions::new().with_lease(lease)),
        )]);
    let taken = kv.txn(acquire).await.expect("etcd answers");
    assert!(taken.succeeded(), "a distinct key is free");
    let released = kv
        .delete(holder, Some(DeleteOptions::new().with_prev_key()))
        .await
        .expect("etcd answers");
    assert_eq!(released.prev_kvs().len(), 1, "the holder releases its key");
}

/// Runs `concurrency` tasks pairing on fresh keys for `duration`, under a namespace of the
/// run's own.
pub async fn run(
    which: EtcdPair,
    endpoint: &str,
    redis_url: &str,
    concurrency: usize,
    duration: Duration,
) -> PairSummary {
    let namespace = format!("bench-{:x}/", fastrand::u64(..));
    let pairs = Pairs::connect(which, endpoint, redis_url, &namespace).await;
    client_timed(which.name(), pairs, concurrency, duration).await
}
