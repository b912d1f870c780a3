//! ZooKeeper locks leave nothing behind: each lock's directory is a container node, which the
//! server deletes once its last node is gone, so locking many distinct keys does not pile up
//! empty directories. The twin: the same directories created as plain persistent nodes stay.

use std::time::Duration;

use integration_tests::{ZookeeperEnsemble, hold};
use tokio::time::{Instant, sleep};
use tower_lock::backend::LockBackend;
use tower_lock::backend::zookeeper::{DEFAULT_ROOT, ZookeeperBackend};
use zookeeper_client::{Acls, Client, CreateMode};

const KEYS: usize = 50;

/// How many directories are under `root` once none is left, or after 10 s (the server deletes
/// empty containers every second here).
async fn directories_left(client: &Client, root: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = client
            .list_children(root)
            .await
            .expect("the root is there")
            .len();
        if left == 0 || Instant::now() >= deadline {
            return left;
        }
        sleep(Duration::from_millis(200)).await;
    }
}

async fn client(ensemble: &ZookeeperEnsemble) -> Client {
    Client::connect(&ensemble.connect_string())
        .await
        .expect("the ensemble answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locking_many_keys_leaves_no_directory_behind() {
    let ensemble = ZookeeperEnsemble::start(1);
    let backend = ZookeeperBackend::connect(&ensemble.connect_string())
        .await
        .expect("the ensemble answers");
    for key in 0..KEYS {
        let name = format!("lock:coupon:{key}");
        let held = hold(&backend, &name, Duration::from_secs(5)).await;
        backend.release(&name, &held.lease).await.expect("released");
    }

    let left = directories_left(&client(&ensemble).await, DEFAULT_ROOT).await;

    assert_eq!(left, 0, "{left} of {KEYS} lock directories left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_containers_empty_directories_pile_up() {
    let ensemble = ZookeeperEnsemble::start(1);
    let client = client(&ensemble).await;
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let node = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    client
        .create("/plain", &[], &persistent)
        .await
        .expect("a root");
    for key in 0..KEYS {
        let dir = format!("/plain/lock:coupon:{key}");
        client
            .create(&dir, &[], &persistent)
            .await
            .expect("a directory");
        let (_, sequence) = client
            .create(&format!("{dir}/x-"), &[], &node)
            .await
            .expect("a node");
        client
            .delete(&format!("{dir}/x-{sequence}"), None)
            .await
            .expect("deleted");
    }

    let left = directories_left(&client, "/plain").await;

    assert_eq!(left, KEYS, "plain directories stay");
}
