//! What the tests of the consensus stores (etcd, ZooKeeper) share: one interface over a test's
//! own cluster or ensemble, and the scenarios each store's tests run on it — a server killed,
//! the quorum lost, a holder cut off past its session, a waiter counted while it waits.

use std::future::Future;
use std::time::Duration;

use tower_lock::backend::LockBackend;
use tower_lock::backend::etcd::{EtcdBackend, EtcdSettings};
use tower_lock::backend::zookeeper::{ZookeeperBackend, ZookeeperSettings};

use crate::{EtcdCluster, ZookeeperEnsemble};

pub mod failover;
pub mod sessions;
pub mod waiting;

/// A cluster of a consensus store started by a test, with its servers' faults and counts.
pub trait ConsensusStore: Send + Sync + Sized + 'static {
    /// The backend the store's locks live in.
    type Backend: LockBackend + Clone;

    /// Starts `size` servers and waits until they serve.
    fn start(size: usize) -> Self;

    /// A backend talking to the servers `servers` (indexes), on a session of `session`.
    fn backend(
        &self,
        servers: &[usize],
        session: Duration,
    ) -> impl Future<Output = Self::Backend> + Send;

    /// The servers as a `--lock-store` URL of the demo (`etcd://…`, `zk://…`).
    fn url(&self) -> String;

    /// The server that leads now, if one does.
    fn leader(&self) -> Option<usize>;

    /// Kills server `index` with SIGKILL.
    fn kill(&mut self, index: usize);

    /// Starts server `index` again, on its ports with its data.
    fn restart(&mut self, index: usize);

    /// Waits until server `index` serves again (after a restart), up to 30 s.
    fn wait_serving(&self, index: usize) -> bool;

    /// Freezes server `index` with SIGSTOP.
    fn pause(&self, index: usize);

    /// Thaws server `index` with SIGCONT.
    fn resume(&self, index: usize);

    /// The lock requests server `index` has handled so far, as the server counts them.
    fn lock_requests(&self, index: usize) -> u64;

    /// How many of [`lock_requests`](Self::lock_requests) two idle backends with 40 s
    /// sessions may send within 3 s: their sessions' heartbeats, where the server counts them.
    const HEARTBEATS_IN_3_S: u64;
}

impl ConsensusStore for EtcdCluster {
    type Backend = EtcdBackend;

    fn start(size: usize) -> Self {
        EtcdCluster::start(size)
    }

    async fn backend(&self, servers: &[usize], session: Duration) -> EtcdBackend {
        let endpoints: Vec<String> = servers.iter().map(|index| self.endpoint(*index)).collect();
        let settings = EtcdSettings::default().session_ttl(session);
        EtcdBackend::connect_with(endpoints, settings)
            .await
            .expect("the cluster answers")
    }

    fn url(&self) -> String {
        self.url()
    }

    fn leader(&self) -> Option<usize> {
        EtcdCluster::leader(self)
    }

    fn kill(&mut self, index: usize) {
        EtcdCluster::kill(self, index);
    }

    fn restart(&mut self, index: usize) {
        EtcdCluster::restart(self, index);
    }

    fn wait_serving(&self, index: usize) -> bool {
        self.wait_healthy(index)
    }

    fn pause(&self, index: usize) {
        EtcdCluster::pause(self, index);
    }

    fn resume(&self, index: usize) {
        EtcdCluster::resume(self, index);
    }

    /// Key-value requests (sessions' keep-alives are lease requests, not counted).
    fn lock_requests(&self, index: usize) -> u64 {
        self.requests_started(index, "etcdserverpb.KV")
    }

    const HEARTBEATS_IN_3_S: u64 = 0;
}

impl ConsensusStore for ZookeeperEnsemble {
    type Backend = ZookeeperBackend;

    fn start(size: usize) -> Self {
        ZookeeperEnsemble::start(size)
    }

    async fn backend(&self, servers: &[usize], session: Duration) -> ZookeeperBackend {
        let servers: Vec<String> = servers.iter().map(|index| self.endpoint(*index)).collect();
        let settings = ZookeeperSettings::default().session_timeout(session);
        ZookeeperBackend::connect_with(&servers.join(","), settings)
            .await
            .expect("the ensemble answers")
    }

    fn url(&self) -> String {
        self.url()
    }

    fn leader(&self) -> Option<usize> {
        ZookeeperEnsemble::leader(self)
    }

    fn kill(&mut self, index: usize) {
        ZookeeperEnsemble::kill(self, index);
    }

    fn restart(&mut self, index: usize) {
        ZookeeperEnsemble::restart(self, index);
    }

    fn wait_serving(&self, index: usize) -> bool {
        ZookeeperEnsemble::wait_serving(self, index)
    }

    fn pause(&self, index: usize) {
        ZookeeperEnsemble::pause(self, index);
    }

    fn resume(&self, index: usize) {
        ZookeeperEnsemble::resume(self, index);
    }

    /// Every request the server received, heartbeats included.
    fn lock_requests(&self, index: usize) -> u64 {
        self.requests_received(index)
    }

    /// A 40 s session renews itself every 10 s (a touch and a listing of its nodes) and its
    /// client pings after 6 s without sending: at most one of those per backend in 3 s.
    const HEARTBEATS_IN_3_S: u64 = 2 * 2;
}

/// Every server of a cluster of `size`.
fn all(size: usize) -> Vec<usize> {
    (0..size).collect()
}

/// Turns scenarios of one module of `tests/src/consensus` into named tests on each store, in
/// modules `etcd` and `zookeeper`: `consensus_tests!(failover: killing_the_leader_…, …);`.
#[macro_export]
macro_rules! consensus_tests {
    ($module:ident: $($scenario:ident),* $(,)?) => {
        mod etcd {
            $crate::__consensus_tests!($crate::EtcdCluster; $module: $($scenario),*);
        }
        mod zookeeper {
            $crate::__consensus_tests!($crate::ZookeeperEnsemble; $module: $($scenario),*);
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __consensus_tests {
    ($store:ty; $module:ident: $($scenario:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                $crate::consensus::$module::$scenario::<$store>().await;
            }
        )*
    };
}
