//! ZooKeeper's readers and writers never wait for each other in a circle. A writer that read
//! no writer ahead of it puts its intent (which bars new readers) while another writer's place
//! may be on its way: then readers wait for this writer, this writer waits for the writer
//! ahead, and that one — without an intent — waits for the readers' claims. The writer
//! withdraws such an intent at its next attempt, and the readers it barred come in. The twin:
//! until it asks again, they stay barred.

use integration_tests::{
    RaceMarks, ZookeeperEnsemble, a_stale_bar_is_lifted_at_the_writers_next_attempt,
};
use tower_lock::backend::zookeeper::{DEFAULT_ROOT, ZookeeperBackend};
use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_intent_put_behind_another_writers_place_gives_way_to_the_readers_it_bars() {
    let ensemble = ZookeeperEnsemble::start(1);
    let backend = ZookeeperBackend::connect(&ensemble.connect_string())
        .await
        .expect("the ensemble answers");
    let client = Client::connect(&ensemble.connect_string())
        .await
        .expect("the ensemble answers");
    // What a race leaves: the first writer's place; the second writer's place and intent,
    // put on a read from before the first's place; a waiting reader's claim.
    let dir = format!("{DEFAULT_ROOT}/lock:k");
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    for path in [DEFAULT_ROOT, dir.as_str()] {
        match client.create(path, &[], &persistent).await {
            Ok(_) | Err(ZkError::NodeExists) => {}
            Err(error) => panic!("{path}: {error}"),
        }
    }
    let marks = RaceMarks::new();
    let node = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    for (kind, token) in [
        ('w', marks.first),
        ('w', marks.second),
        ('i', marks.second),
        ('c', marks.reader),
    ] {
        let prefix = format!("{dir}/{kind}-{token}-");
        client.create(&prefix, &[], &node).await.expect("created");
    }

    a_stale_bar_is_lifted_at_the_writers_next_attempt(&backend, marks).await;
}
