//! Run with
//!
//! ```sh
//! cargo run --release -p loadtest --bin lockbench -- --scenario hot-key            # whole grid
//! cargo run --release -p loadtest --bin lockbench -- --scenario hot-key --handoff --concurrency 8 --hold-ms 1
//! cargo run --release -p loadtest --bin lockbench -- --scenario hot-key --shape read-mostly --hold-ms 1
//! cargo run --release -p loadtest --bin lockbench -- --scenario distinct-keys --chart docs/distinct-keys.svg
//! cargo run --release -p loadtest --bin lockbench -- --help
//! ```
//!
//! Lock-level benchmarks on a real Redis: lockbench starts its own `redis-server` on a free
//! port (or uses `--redis-url`) and compares tower-lock with peer implementations in the same
//! run. With `--backend postgres` or `--backend mysql` it measures tower-lock on the
//! machine's PostgreSQL or MariaDB instead (a fresh schema or database of its own), beside the
//! database's own lock and Redis; with `--backend etcd`, on a one-member etcd of its own,
//! beside etcd's own lock service and Redis; with `--backend zookeeper`, on a standalone
//! ZooKeeper of its own, beside Redis. See `docs/BENCHMARKS.md` for results and what
//! limits them.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use integration_tests::{
    EtcdCluster, MASTER_NAME, RedisCluster, RedisSentinels, RedisServer, ZookeeperEnsemble,
};

mod args;
mod chaos;
mod chart;
mod cpu;
mod delay_proxy;
mod distinct_keys;
mod distinct_keys_grids;
mod etcd_pairs;
mod failover;
mod hot_key;
mod hot_key_grid;
mod lease_settings;
mod lockers;
mod progress;
mod redis_benchmark;
mod redis_pairs;
mod redis_stats;
mod report;
mod shape;
mod soak;
mod sql_pairs;
mod zookeeper_pairs;

use args::{Args, Backend, Scenario, chosen};
use distinct_keys::PairImpl;
use etcd_pairs::EtcdPair;
use hot_key::Plan;
use hot_key_grid::{Counted, Urls};
use lease_settings::SESSION;
use lockers::{Contender, Impl};
use redis_pairs::RedisPair;
use sql_pairs::SqlPair;
use zookeeper_pairs::ZookeeperPair;

fn main() {
    // A chaos run starts this program again as its workers.
    if integration_tests::chaos::run_worker() {
        return;
    }
    let args = Args::parse();
    if args.scenario == Scenario::Chaos {
        chaos::run(&chaos::ChaosArgs {
            stores: &args.chaos_stores,
            shapes: &args.chaos_shapes,
            holds: args.holds,
            overlapping: !args.one_fault_at_a_time,
        });
        return;
    }
    measure(args);
}

#[tokio::main]
async fn measure(args: Args) {
    if args.scenario == Scenario::Soak {
        match args.backend {
            None | Some(Backend::Postgres) => {
                soak::run(args.backend.is_some(), args.soak_minutes).await;
            }
            Some(_) => {
                eprintln!("lockbench: --scenario soak runs on Redis or --backend postgres");
                std::process::exit(2);
            }
        }
        return;
    }
    if let Some(plan) = &args.worker {
        let plan: Plan = serde_json::from_str(plan).expect("a plan from the coordinator");
        println!(
            "{}",
            serde_json::to_string(&hot_key::run(plan).await).expect("serializable")
        );
        return;
    }
    if args.scenario == Scenario::Failover {
        failover::trials(&args).await;
        return;
    }
    // Names are checked before a Redis is started: an unknown one exits, which would skip
    // stopping it.
    let hot_key_all: &[Impl] = match args.backend {
        None => &Impl::HOT_KEY,
        Some(Backend::Postgres) => &Impl::POSTGRES_HOT_KEY,
        Some(Backend::Mysql) => &Impl::MYSQL_HOT_KEY,
        Some(Backend::Etcd) => &Impl::ETCD_HOT_KEY,
        Some(Backend::Zookeeper) => &Impl::ZOOKEEPER_HOT_KEY,
        Some(Backend::RedisCluster) => &Impl::REDIS_CLUSTER_HOT_KEY,
        Some(Backend::Redlock) => &Impl::REDLOCK_HOT_KEY,
        Some(Backend::RedisSentinel) => &Impl::SENTINEL_HOT_KEY,
    };
    let (mut hot_key_impls, mut pair_impls, mut sql_pairs) = (Vec::new(), Vec::new(), Vec::new());
    let (mut etcd_pairs, mut zookeeper_pairs, mut redis_pairs) =
        (Vec::new(), Vec::new(), Vec::new());
    match (args.scenario, args.backend) {
        (Scenario::HotKey, _) => {
            hot_key_impls = chosen(&args.impls, hot_key_all, Impl::name);
            hot_key_impls.retain(|&which| Contender::takes(which, args.shape, args.processes));
        }
        // Run before the grids (`failover_trials`, `chaos::run`, `soak::run`).
        (Scenario::Failover | Scenario::Chaos | Scenario::Soak, _) => {}
        (Scenario::DistinctKeys, None) => {
            pair_impls = chosen(&args.impls, &PairImpl::ALL, PairImpl::name);
        }
        (Scenario::DistinctKeys, Some(Backend::Etcd)) => {
            etcd_pairs = chosen(&args.impls, &EtcdPair::ALL, EtcdPair::name);
        }
        (Scenario::DistinctKeys, Some(Backend::Zookeeper)) => {
            zookeeper_pairs = chosen(&args.impls, &ZookeeperPair::ALL, ZookeeperPair::name);
        }
        (Scenario::DistinctKeys, Some(Backend::RedisCluster)) => {
            redis_pairs = chosen(&args.impls, &RedisPair::CLUSTER, RedisPair::name);
        }
        (Scenario::DistinctKeys, Some(Backend::Redlock)) => {
            redis_pairs = chosen(&args.impls, &RedisPair::REDLOCK, RedisPair::name);
        }
        (Scenario::DistinctKeys, Some(Backend::RedisSentinel)) => {
            redis_pairs = chosen(&args.impls, &RedisPair::SENTINEL, RedisPair::name);
        }
        (Scenario::DistinctKeys, Some(backend)) => {
            let database = backend.database().expect("a SQL backend");
            sql_pairs = chosen(&args.impls, &SqlPair::ALL, |pair| pair.name(database));
        }
    }
    let impls = [
        hot_key_impls.len(),
        pair_impls.len(),
        sql_pairs.len(),
        etcd_pairs.len(),
        zookeeper_pairs.len(),
        redis_pairs.len(),
    ];
    progress::start(args.runs(impls.iter().sum()));
    let _recorder = args.record_metrics.then(|| {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder();
        recorder.expect("the only metrics recorder of lockbench")
    });
    let own_redis = args.redis_url.is_none().then(RedisServer::start);
    let url = args
        .redis_url
        .clone()
        .unwrap_or_else(|| own_redis.as_ref().expect("started").url());
    let url = match args.delay_us {
        0 => url,
        delay => delayed(&url, Duration::from_micros(delay)),
    };

    match (args.scenario, args.backend) {
        (Scenario::HotKey, None) => {
            hot_key_grid::run(&args, &Urls::redis(&url), &hot_key_impls).await
        }
        (Scenario::HotKey, Some(Backend::Etcd)) => {
            let etcd = EtcdCluster::start(1);
            let urls = Urls {
                redis: url.clone(),
                other: Some(format!("{}?session_ms={}", etcd.url(), SESSION.as_millis())),
                counted: Some(Counted::Etcd(&etcd)),
            };
            hot_key_grid::run(&args, &urls, &hot_key_impls).await;
        }
        (Scenario::HotKey, Some(Backend::Zookeeper)) => {
            let zookeeper = ZookeeperEnsemble::start(1);
            let session = SESSION.as_millis();
            let urls = Urls {
                redis: url.clone(),
                other: Some(format!("{}?session_ms={session}", zookeeper.url())),
                counted: Some(Counted::Zookeeper(&zookeeper)),
            };
            hot_key_grid::run(&args, &urls, &hot_key_impls).await;
        }
        (Scenario::HotKey, Some(Backend::RedisCluster)) => {
            let cluster = RedisCluster::start(3, args.cluster_replicas);
            let urls = Urls {
                redis: url.clone(),
                other: Some(format!("redis+cluster://{}", cluster.addresses().join(","))),
                counted: None,
            };
            hot_key_grid::run(&args, &urls, &hot_key_impls).await;
        }
        (Scenario::HotKey, Some(Backend::RedisSentinel)) => {
            let group = RedisSentinels::start(2);
            let sentinels = group.sentinel_addresses().join(",");
            let urls = Urls {
                redis: url.clone(),
                other: Some(format!("redis+sentinel://{sentinels}/{MASTER_NAME}")),
                counted: None,
            };
            hot_key_grid::run(&args, &urls, &hot_key_impls).await;
        }
        (Scenario::HotKey, Some(Backend::Redlock)) => {
            let masters = [
                RedisServer::start(),
                RedisServer::start(),
                RedisServer::start(),
            ];
            let masters: Vec<String> = (masters.iter())
                .map(|master| format!("127.0.0.1:{}", master.port()))
                .collect();
            let urls = Urls {
                redis: url.clone(),
                other: Some(format!("redlock://{}", masters.join(","))),
                counted: None,
            };
            hot_key_grid::run(&args, &urls, &hot_key_impls).await;
        }
        (Scenario::HotKey, Some(backend)) => {
            let database = backend.database().expect("a SQL backend");
            let scratch = sql_pairs::Scratch::create(database).await;
            let urls = Urls {
                redis: url.clone(),
                other: Some(scratch.url()),
                counted: None,
            };
            hot_key_grid::run(&args, &urls, &hot_key_impls).await;
        }
        (Scenario::DistinctKeys, None) => {
            distinct_keys_grids::redis_node_grid(&args, &url, &pair_impls).await;
        }
        (Scenario::DistinctKeys, Some(Backend::Etcd)) => {
            distinct_keys_grids::etcd_grid(&args, &url, &etcd_pairs).await;
        }
        (Scenario::DistinctKeys, Some(Backend::Zookeeper)) => {
            distinct_keys_grids::zookeeper_grid(&args, &url, &zookeeper_pairs).await;
        }
        (Scenario::DistinctKeys, Some(Backend::RedisCluster)) => {
            let cluster = RedisCluster::start(3, args.cluster_replicas);
            let title = format!(
                "Redis Cluster (3 masters, {} replicas)",
                3 * args.cluster_replicas
            );
            let nodes = cluster.urls();
            distinct_keys_grids::redis_grid(&args, (&title, &nodes), &url, &redis_pairs).await;
        }
        (Scenario::DistinctKeys, Some(Backend::RedisSentinel)) => {
            let group = RedisSentinels::start(2);
            let title = "the master Sentinels name (2 replicas)";
            let sentinels = group.sentinel_urls();
            distinct_keys_grids::redis_grid(&args, (title, &sentinels), &url, &redis_pairs).await;
        }
        (Scenario::DistinctKeys, Some(Backend::Redlock)) => {
            let masters = [
                RedisServer::start(),
                RedisServer::start(),
                RedisServer::start(),
            ];
            let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
            let title = "RedLock (3 masters)";
            distinct_keys_grids::redis_grid(&args, (title, &urls), &url, &redis_pairs).await;
        }
        (Scenario::DistinctKeys, Some(backend)) => {
            let database = backend.database().expect("a SQL backend");
            distinct_keys_grids::sql_grid(&args, database, &url, &sql_pairs).await;
        }
        (Scenario::Failover | Scenario::Chaos | Scenario::Soak, _) => {}
    }
    progress::finish();
}

/// `url` (a Redis URL) through a delay proxy of `delay` per direction; a URL without an IP
/// address and port ends lockbench with one line saying so.
fn delayed(url: &str, delay: Duration) -> String {
    let address = url
        .strip_prefix("redis://")
        .and_then(|rest| rest.split('/').next())
        .and_then(|host_port| host_port.parse::<SocketAddr>().ok());
    let Some(address) = address else {
        eprintln!("--delay-us: the Redis URL must be redis://IP:PORT, got {url}");
        std::process::exit(2);
    };
    format!("redis://{}", delay_proxy::start(address, delay))
}
