//! Every store gone away is answered as a failure to every task that needs it, on every shape
//! the store has and every way of waiting it offers: silent (its processes frozen), a failure
//! within the store timeout; killed, a failure at once; never "busy" — and once it is back,
//! locks are served again. Each test's twin runs first: the same burst while another process
//! holds the locks is told they are busy, after its wait (`integration_tests::outage`).

use integration_tests::outage::{self, Gone, Lockers};
use integration_tests::{
    EtcdCluster, MASTER_NAME, MariadbServer, PostgresServer, RedisCluster, RedisSentinels,
    RedisServer, ZookeeperEnsemble,
};
use tower_lock::RedisBackend;
use tower_lock::backend::etcd::EtcdBackend;
use tower_lock::backend::mysql::{MysqlBackend, NowaitBackend};
use tower_lock::backend::postgres::{AdvisoryBackend, PostgresBackend};
use tower_lock::backend::redis::RedlockBackend;
use tower_lock::backend::zookeeper::ZookeeperBackend;

/// The twin, then the outage, with lockers of `lockers`' kind on `mine` and `theirs` (two
/// processes).
async fn prove<B>(
    store: &mut impl Gone,
    (mine, theirs): (&B, &B),
    lockers: fn(&B, std::time::Duration) -> Lockers,
    name: &str,
) {
    let (short, patient) = outage::short_and_patient(mine, lockers);
    let other = lockers(theirs, outage::STORE_TIMEOUT);
    outage::busy_while_another_process_holds(&patient, &other).await;
    outage::every_task_hears_the_store_fail(store, (&short, &patient), name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_silent_or_killed_is_a_failure_for_every_task() {
    let mut redis = RedisServer::start();
    let connect = || RedisBackend::connect(redis.url());
    let (mine, theirs) = (connect().await.unwrap(), connect().await.unwrap());
    prove(&mut redis, (&mine, &theirs), Lockers::shaped, "Redis").await;
}

/// Every master of a cluster without replicas (their ports: a frozen cluster cannot be asked).
struct Masters(RedisCluster, Vec<u16>);

impl Gone for Masters {
    fn silence(&mut self) {
        self.1.iter().for_each(|&port| self.0.pause(port));
    }
    fn speak(&mut self) {
        self.1.iter().for_each(|&port| self.0.resume(port));
    }
    fn kill(&mut self) {
        self.1.iter().for_each(|&port| self.0.kill(port));
    }
    fn restart(&mut self) {
        self.1.iter().for_each(|&port| self.0.restart(port));
        self.0.wait_until_settled();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_silent_or_killed_is_a_failure_for_every_task() {
    let cluster = RedisCluster::start(3, 0);
    let masters = cluster.masters();
    let mut cluster = Masters(cluster, masters);
    let urls = cluster.0.urls();
    let connect = || RedisBackend::connect_cluster(urls.clone());
    let (mine, theirs) = (connect().await.unwrap(), connect().await.unwrap());
    prove(
        &mut cluster,
        (&mine, &theirs),
        Lockers::shaped,
        "Redis Cluster",
    )
    .await;
}

/// A master without replicas, watched by Sentinels: nobody to promote.
struct Watched(RedisSentinels, u16);

impl Gone for Watched {
    fn silence(&mut self) {
        self.0.pause(self.1);
    }
    fn speak(&mut self) {
        self.0.resume(self.1);
    }
    fn kill(&mut self) {
        self.0.kill_master();
    }
    fn restart(&mut self) {
        self.0.restart_as_master(self.1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sentinel_master_silent_or_killed_is_a_failure_for_every_task() {
    let sentinels = RedisSentinels::start(0);
    let master = sentinels.master();
    let mut group = Watched(sentinels, master);
    let urls = group.0.sentinel_urls();
    let connect = || RedisBackend::connect_sentinel(urls.clone(), MASTER_NAME);
    let (mine, theirs) = (connect().await.unwrap(), connect().await.unwrap());
    prove(
        &mut group,
        (&mine, &theirs),
        Lockers::shaped,
        "Sentinel's master",
    )
    .await;
}

/// Two masters of three: fewer than a majority answer.
struct Majority([RedisServer; 3]);

impl Gone for Majority {
    fn silence(&mut self) {
        self.0[..2].iter().for_each(RedisServer::pause);
    }
    fn speak(&mut self) {
        self.0[..2].iter().for_each(RedisServer::resume);
    }
    fn kill(&mut self) {
        self.0[..2].iter_mut().for_each(RedisServer::kill);
    }
    fn restart(&mut self) {
        self.0[..2].iter_mut().for_each(RedisServer::restart);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_without_a_majority_is_a_failure_for_every_task() {
    let mut masters = Majority([
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ]);
    let urls: Vec<String> = masters.0.iter().map(RedisServer::url).collect();
    let connect = || RedlockBackend::connect(urls.clone()).expect("valid URLs");
    let (mine, theirs) = (connect(), connect());
    prove(&mut masters, (&mine, &theirs), Lockers::mutexes, "RedLock").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_silent_or_killed_is_a_failure_for_every_task() {
    let mut server = PostgresServer::start();
    let url = server.url();
    let rows = || PostgresBackend::connect(&url);
    let (mine, theirs) = (rows().await.unwrap(), rows().await.unwrap());
    prove(&mut server, (&mine, &theirs), Lockers::shaped, "PostgreSQL").await;
    let advisory = || AdvisoryBackend::connect(&url);
    let (mine, theirs) = (advisory().await.unwrap(), advisory().await.unwrap());
    prove(
        &mut server,
        (&mine, &theirs),
        Lockers::mutexes,
        "PostgreSQL advisory",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_silent_or_killed_is_a_failure_for_every_task() {
    let mut server = MariadbServer::start();
    let url = server.url();
    let rows = || MysqlBackend::connect(&url);
    let (mine, theirs) = (rows().await.unwrap(), rows().await.unwrap());
    prove(&mut server, (&mine, &theirs), Lockers::shaped, "MariaDB").await;
    let nowait = || NowaitBackend::connect(&url);
    let (mine, theirs) = (nowait().await.unwrap(), nowait().await.unwrap());
    prove(
        &mut server,
        (&mine, &theirs),
        Lockers::mutexes,
        "MariaDB NOWAIT",
    )
    .await;
}

/// Every member of a consensus store.
struct Members<S>(S, usize);

impl Gone for Members<EtcdCluster> {
    fn silence(&mut self) {
        (0..self.1).for_each(|member| self.0.pause(member));
    }
    fn speak(&mut self) {
        (0..self.1).for_each(|member| self.0.resume(member));
    }
    fn kill(&mut self) {
        (0..self.1).for_each(|member| self.0.kill(member));
    }
    fn restart(&mut self) {
        (0..self.1).for_each(|member| self.0.restart(member));
        assert!(self.0.wait_healthy(0), "etcd did not elect a leader again");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_with_every_member_silent_or_killed_is_a_failure_for_every_task() {
    let mut cluster = Members(EtcdCluster::start(3), 3);
    let endpoints = cluster.0.endpoints();
    let connect = || EtcdBackend::connect(&endpoints);
    let (mine, theirs) = (connect().await.unwrap(), connect().await.unwrap());
    prove(&mut cluster, (&mine, &theirs), Lockers::shaped, "etcd").await;
}

impl Gone for Members<ZookeeperEnsemble> {
    fn silence(&mut self) {
        (0..self.1).for_each(|member| self.0.pause(member));
    }
    fn speak(&mut self) {
        (0..self.1).for_each(|member| self.0.resume(member));
    }
    fn kill(&mut self) {
        (0..self.1).for_each(|member| self.0.kill(member));
    }
    fn restart(&mut self) {
        (0..self.1).for_each(|member| self.0.restart(member));
        for member in 0..self.1 {
            assert!(self.0.wait_serving(member), "ZooKeeper did not serve again");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_with_every_server_silent_or_killed_is_a_failure_for_every_task() {
    let mut ensemble = Members(ZookeeperEnsemble::start(3), 3);
    let servers = ensemble.0.connect_string();
    let connect = || ZookeeperBackend::connect(&servers);
    let (mine, theirs) = (connect().await.unwrap(), connect().await.unwrap());
    prove(
        &mut ensemble,
        (&mine, &theirs),
        Lockers::shaped,
        "ZooKeeper",
    )
    .await;
}
