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

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::Stdio;
use std::time::Duration;

use clap::Parser;
use integration_tests::{
    EtcdCluster, RedisCluster, RedisSentinels, RedisServer, ZookeeperEnsemble,
};

mod chaos;
mod chart;
mod cpu;
mod delay_proxy;
mod distinct_keys;
mod etcd_pairs;
mod failover;
mod hot_key;
mod lockers;
mod progress;
mod redis_pairs;
mod redis_stats;
mod report;
mod soak;
mod sql_pairs;
mod zookeeper_pairs;

use distinct_keys::PairImpl;
use etcd_pairs::EtcdPair;
use hot_key::{Measured, Plan, now_us};
use lockers::{Contender, Impl, Shape};
use redis_pairs::RedisPair;
use report::{HotKeySummary, hot_key_figures, percentile, print_hot_key_table};
use sql_pairs::{Database, SqlPair};
use zookeeper_pairs::ZookeeperPair;

/// Lock benchmarks against a real Redis.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// What to measure.
    #[arg(long, value_enum, default_value = "hot-key")]
    scenario: Scenario,
    /// Measure tower-lock on this store instead of on Redis against peer libraries: the
    /// machine's PostgreSQL or MariaDB (`TEST_POSTGRES_URL` or `TEST_MYSQL_URL` for another), or
    /// an etcd, ZooKeeper, Redis Cluster, RedLock's masters or a Sentinel-watched master of
    /// lockbench's own (beside one Redis node).
    #[arg(long, value_enum)]
    backend: Option<Backend>,
    /// Hot key: a contender that released waits until another has acquired before it wants
    /// the lock again, so every acquisition is a handoff.
    #[arg(long)]
    handoff: bool,
    /// Hot key: the shape of lock taken — `mutex`, `write` (every contender writes),
    /// `read-mostly` (nine readers to one writer) or `permit` (a semaphore of 2). The peers
    /// (seed-naive, rslock) have mutexes only and sit out the others.
    #[arg(long, value_enum, default_value_t = Shape::Mutex)]
    shape: Shape,
    /// Concurrent contenders or tasks (repeatable); default: the scenario's grid (hot key: 8
    /// and 64; distinct keys: 1, 16 and 64).
    #[arg(long)]
    concurrency: Vec<usize>,
    /// How long each acquisition holds the lock, in ms (repeatable); default: 0 and 1.
    #[arg(long)]
    hold_ms: Vec<u64>,
    /// Length of each run.
    #[arg(long, default_value_t = 3)]
    duration_s: u64,
    /// Distinct keys: run the grid this many times, interleaved, and report each figure's
    /// median (the host's noise spreads single runs by ±10 % and more).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Split the contenders over this many processes (1 to 16).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=16))]
    processes: u8,
    /// Implementations to compare (repeatable); default: all of the scenario's. Hot key:
    /// tower-lock-notified, tower-lock-cohort, tower-lock-polling, tower-lock-fair, memory,
    /// seed-naive, rslock (on PostgreSQL: postgres-notified, postgres-cohort,
    /// postgres-polling, postgres-fair, tower-lock-notified; on MySQL: mysql-in-line,
    /// mysql-cohort, mysql-polling, tower-lock-notified; on etcd: etcd-notified, etcd-cohort,
    /// etcd-fair, etcd-polling, tower-lock-notified; on ZooKeeper: zookeeper-notified,
    /// zookeeper-cohort, zookeeper-fair, zookeeper-polling, tower-lock-notified; on Redis
    /// Cluster: redis-cluster-notified, redis-cluster-cohort, tower-lock-notified,
    /// tower-lock-cohort; on RedLock: redlock-polling, redlock-cohort, tower-lock-polling,
    /// tower-lock-cohort; on Sentinel: sentinel-notified, sentinel-cohort, sentinel-wait,
    /// tower-lock-notified, tower-lock-cohort). The
    /// `-cohort` rows keep tower-lock's default run of 8 holds handed on within a process; the
    /// others release every lock in the store. Distinct keys: raw-scripts,
    /// seed-minimal, tower-lock, tower-lock-nofence, tower-lock-engine, tower-lock-service,
    /// rslock (on PostgreSQL: postgres-raw, postgres-backend, postgres-engine,
    /// pg-advisory-lock, pg-advisory-engine, redis-engine; on MySQL: mysql-raw, mysql-backend,
    /// mysql-engine, mysql-get-lock, mysql-nowait-engine, redis-engine; on etcd: etcd-raw,
    /// etcd-backend, etcd-engine, etcd-lock-rpc, redis-engine; on ZooKeeper: zookeeper-raw,
    /// zookeeper-backend, zookeeper-engine, redis-engine; on Redis Cluster: cluster-backend,
    /// cluster-engine, redis-backend, redis-engine; on RedLock: redlock-backend, redlock-engine,
    /// redis-backend, redis-engine; on Sentinel: sentinel-backend, sentinel-engine,
    /// sentinel-wait-engine, redis-backend, redis-engine).
    #[arg(long = "impl")]
    impls: Vec<String>,
    /// Where to draw the chart (SVG): throughput against concurrency per implementation
    /// (distinct keys), or throughput and p99 wait per implementation and configuration (hot
    /// key). Default: `target/lockbench/<scenario>-<store>.svg`.
    #[arg(long)]
    chart: Option<std::path::PathBuf>,
    /// One JSON object per line instead of the table.
    #[arg(long)]
    json: bool,
    /// Record tower-lock's metrics into a Prometheus recorder (as an application exporting
    /// them would), to measure what recording costs; by default no recorder is installed.
    #[arg(long)]
    record_metrics: bool,
    /// Use this Redis instead of starting one.
    #[arg(long)]
    redis_url: Option<String>,
    /// Reach Redis through a proxy on loopback that delays each direction by this many µs
    /// (a network's round trip: 500 adds 1 ms per round trip).
    #[arg(long, default_value_t = 0)]
    delay_us: u64,
    /// Chaos: the stores to run on (repeatable): redis, postgres, mysql, etcd, zookeeper;
    /// default: all five, one after another.
    #[arg(long = "chaos-store")]
    chaos_stores: Vec<String>,
    /// Chaos: the shapes its workers take (repeatable): mutex, read, write, permit, keys (two
    /// at once); default: all five, mixed.
    #[arg(long = "chaos-shape")]
    chaos_shapes: Vec<String>,
    /// Chaos: one fault at a time (by default a fault may begin while others still run).
    #[arg(long)]
    one_fault_at_a_time: bool,
    /// Chaos: holds per store (the run also injects each kind of fault at least once).
    #[arg(long, default_value_t = 100_000)]
    holds: u64,
    /// Soak: how long to run, in minutes (Redis, or `--backend postgres`).
    #[arg(long, default_value_t = 30)]
    soak_minutes: u64,
    /// Failover: how many times the master is killed, without and again with acknowledgements.
    #[arg(long, default_value_t = 200)]
    trials: usize,
    /// Failover: replicas that must acknowledge each lock (`WAIT`) in every other trial.
    #[arg(long, default_value_t = 1)]
    replica_acks: u32,
    /// Failover: stall replication before killing the master (its replicas frozen, its links
    /// to them filled with 64 MiB, then this many ms more), so that the locks it grants
    /// meanwhile reach none of them.
    #[arg(long, default_value_t = 0)]
    lag_ms: u64,
    /// Redis Cluster (hot key, distinct keys): replicas per master of the three-master cluster
    /// lockbench starts (0: masters alone, as the one node beside them).
    #[arg(long, default_value_t = 1)]
    cluster_replicas: usize,
    /// Internal: run one process's share of a run (a JSON plan) and print what it measured.
    #[arg(long, hide = true)]
    worker: Option<String>,
}

/// The store measured instead of Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Backend {
    /// The machine's PostgreSQL.
    Postgres,
    /// The machine's MariaDB or MySQL.
    Mysql,
    /// A one-member etcd started by lockbench.
    Etcd,
    /// A standalone ZooKeeper server started by lockbench.
    Zookeeper,
    /// A Redis Cluster started by lockbench: three masters, each with a replica.
    RedisCluster,
    /// RedLock over three Redis masters started by lockbench.
    Redlock,
    /// A master with two replicas, watched by three Sentinels, started by lockbench.
    RedisSentinel,
}

impl Backend {
    /// The SQL database it is, if it is one.
    fn database(self) -> Option<Database> {
        match self {
            Backend::Postgres => Some(Database::Postgres),
            Backend::Mysql => Some(Database::Mysql),
            Backend::Etcd
            | Backend::Zookeeper
            | Backend::RedisCluster
            | Backend::Redlock
            | Backend::RedisSentinel => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Scenario {
    /// Many contenders, one key.
    HotKey,
    /// Tasks locking keys nobody else uses: the cost of the lock itself.
    DistinctKeys,
    /// Locks granted twice when the master dies (`--backend redis-sentinel` or
    /// `redis-cluster`, `--trials`, `--replica-acks`, `--lag-ms`).
    Failover,
    /// Three worker processes on hot keys while random faults run, every hold checked
    /// (`--chaos-store`, `--holds`).
    Chaos,
    /// A moderate load for a long time, memory, sockets and store objects sampled (Redis or
    /// `--backend postgres`, `--soak-minutes`).
    Soak,
}

impl Args {
    /// The concurrencies asked for, or the scenario's `grid`.
    fn concurrencies(&self, grid: &[usize]) -> Vec<usize> {
        if self.concurrency.is_empty() {
            grid.to_vec()
        } else {
            self.concurrency.clone()
        }
    }

    /// How long each run lasts.
    /// The store measured, as the chart's name and title say it.
    fn store(&self) -> &'static str {
        match self.backend {
            None => "Redis 7.0",
            Some(Backend::Postgres) => "PostgreSQL 15",
            Some(Backend::Mysql) => "MariaDB 10.11",
            Some(Backend::Etcd) => "etcd 3.4",
            Some(Backend::Zookeeper) => "ZooKeeper 3.8",
            Some(Backend::RedisCluster) => "Redis-Cluster 7.0",
            Some(Backend::Redlock) => "RedLock 3×Redis 7.0",
            Some(Backend::RedisSentinel) => "Redis-Sentinel 7.0",
        }
    }

    /// Where the chart goes.
    fn chart_path(&self) -> std::path::PathBuf {
        self.chart.clone().unwrap_or_else(|| {
            let scenario = match self.scenario {
                Scenario::HotKey => "hot-key",
                Scenario::DistinctKeys => "distinct-keys",
                Scenario::Failover => "failover",
                Scenario::Chaos => "chaos",
                Scenario::Soak => "soak",
            };
            let store = self
                .store()
                .split(' ')
                .next()
                .unwrap_or_default()
                .to_lowercase();
            format!("target/lockbench/{scenario}-{store}.svg").into()
        })
    }

    /// Draws the chart with `draw` and says where it is.
    fn write_chart(&self, draw: impl FnOnce(&std::path::Path, &str) -> chart::Drawn) {
        let path = self.chart_path();
        match draw(&path, self.store()) {
            Ok(()) => eprintln!("chart written to {}", path.display()),
            Err(error) => eprintln!("cannot write the chart {}: {error}", path.display()),
        }
    }

    /// How many runs the grid makes with `impls` implementations.
    fn runs(&self, impls: usize) -> u64 {
        let runs = match self.scenario {
            Scenario::HotKey => {
                let holds = self.hold_ms.len().max(2);
                self.concurrencies(&[8, 64]).len() * holds
            }
            Scenario::DistinctKeys => self.concurrencies(&[1, 16, 64]).len() * self.rounds.max(1),
            Scenario::Failover => self.trials,
            Scenario::Chaos | Scenario::Soak => 0,
        };
        (runs * impls) as u64
    }

    fn duration(&self) -> Duration {
        Duration::from_secs(self.duration_s)
    }
}

/// The implementations named on the command line, among the scenario's `all`.
fn chosen<T: Copy>(names: &[String], all: &[T], name: impl Fn(T) -> &'static str) -> Vec<T> {
    if names.is_empty() {
        return all.to_vec();
    }
    names
        .iter()
        .map(|wanted| {
            all.iter()
                .copied()
                .find(|candidate| name(*candidate) == wanted)
                .unwrap_or_else(|| {
                    let known: Vec<_> = all.iter().map(|candidate| name(*candidate)).collect();
                    eprintln!(
                        "unknown --impl {wanted}; this scenario has {}",
                        known.join(", ")
                    );
                    std::process::exit(2)
                })
        })
        .collect()
}

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
        failover_trials(&args).await;
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
        (Scenario::HotKey, None) => hot_key_grid(&args, &Urls::redis(&url), &hot_key_impls).await,
        (Scenario::HotKey, Some(Backend::Etcd)) => {
            let etcd = EtcdCluster::start(1);
            let urls = Urls {
                redis: url.clone(),
                other: Some(etcd.endpoint(0)),
                counted: Some(Counted::Etcd(&etcd)),
            };
            hot_key_grid(&args, &urls, &hot_key_impls).await;
        }
        (Scenario::HotKey, Some(Backend::Zookeeper)) => {
            let zookeeper = ZookeeperEnsemble::start(1);
            let urls = Urls {
                redis: url.clone(),
                other: Some(zookeeper.connect_string()),
                counted: Some(Counted::Zookeeper(&zookeeper)),
            };
            hot_key_grid(&args, &urls, &hot_key_impls).await;
        }
        (Scenario::HotKey, Some(Backend::RedisCluster)) => {
            let cluster = RedisCluster::start(3, args.cluster_replicas);
            let urls = Urls {
                redis: url.clone(),
                other: Some(cluster.urls().join(",")),
                counted: None,
            };
            hot_key_grid(&args, &urls, &hot_key_impls).await;
        }
        (Scenario::HotKey, Some(Backend::RedisSentinel)) => {
            let group = RedisSentinels::start(2);
            let urls = Urls {
                redis: url.clone(),
                other: Some(group.sentinel_urls().join(",")),
                counted: None,
            };
            hot_key_grid(&args, &urls, &hot_key_impls).await;
        }
        (Scenario::HotKey, Some(Backend::Redlock)) => {
            let masters = [
                RedisServer::start(),
                RedisServer::start(),
                RedisServer::start(),
            ];
            let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
            let urls = Urls {
                redis: url.clone(),
                other: Some(urls.join(",")),
                counted: None,
            };
            hot_key_grid(&args, &urls, &hot_key_impls).await;
        }
        (Scenario::HotKey, Some(backend)) => {
            let database = backend.database().expect("a SQL backend");
            let scratch = sql_pairs::Scratch::create(database).await;
            let urls = Urls {
                redis: url.clone(),
                other: Some(scratch.url()),
                counted: None,
            };
            hot_key_grid(&args, &urls, &hot_key_impls).await;
        }
        (Scenario::DistinctKeys, None) => distinct_keys_grid(&args, &url, &pair_impls).await,
        (Scenario::DistinctKeys, Some(Backend::Etcd)) => {
            etcd_distinct_keys_grid(&args, &url, &etcd_pairs).await;
        }
        (Scenario::DistinctKeys, Some(Backend::Zookeeper)) => {
            zookeeper_distinct_keys_grid(&args, &url, &zookeeper_pairs).await;
        }
        (Scenario::DistinctKeys, Some(Backend::RedisCluster)) => {
            let cluster = RedisCluster::start(3, args.cluster_replicas);
            let title = format!(
                "Redis Cluster (3 masters, {} replicas)",
                3 * args.cluster_replicas
            );
            let nodes = cluster.urls();
            redis_distinct_keys_grid(&args, (&title, &nodes), &url, &redis_pairs).await;
        }
        (Scenario::DistinctKeys, Some(Backend::RedisSentinel)) => {
            let group = RedisSentinels::start(2);
            let title = "the master Sentinels name (2 replicas)";
            let sentinels = group.sentinel_urls();
            redis_distinct_keys_grid(&args, (title, &sentinels), &url, &redis_pairs).await;
        }
        (Scenario::DistinctKeys, Some(Backend::Redlock)) => {
            let masters = [
                RedisServer::start(),
                RedisServer::start(),
                RedisServer::start(),
            ];
            let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
            let title = "RedLock (3 masters)";
            redis_distinct_keys_grid(&args, (title, &urls), &url, &redis_pairs).await;
        }
        (Scenario::DistinctKeys, Some(backend)) => {
            let database = backend.database().expect("a SQL backend");
            sql_distinct_keys_grid(&args, database, &url, &sql_pairs).await;
        }
        (Scenario::Failover | Scenario::Chaos | Scenario::Soak, _) => {}
    }
    progress::finish();
}

/// The stores of a hot-key grid: Redis, and the store under test when one is measured.
struct Urls<'a> {
    redis: String,
    other: Option<String>,
    /// The etcd or ZooKeeper under test, whose request counts are read off it.
    counted: Option<Counted<'a>>,
}

/// A store under test that counts the requests it handles.
#[derive(Clone, Copy)]
enum Counted<'a> {
    /// etcd's key-value requests (its sessions' keep-alives are not among them).
    Etcd(&'a EtcdCluster),
    /// Every request ZooKeeper received (the sessions' heartbeats among them: one per backend
    /// every few seconds).
    Zookeeper(&'a ZookeeperEnsemble),
}

impl Urls<'_> {
    fn redis(url: &str) -> Self {
        Self {
            redis: url.to_owned(),
            other: None,
            counted: None,
        }
    }

    /// The store of `which`.
    fn of(&self, which: Impl) -> &str {
        match (&self.other, which.off_redis()) {
            (Some(other), true) => other,
            _ => &self.redis,
        }
    }

    /// Requests the etcd or ZooKeeper under test has handled so far, when `which` runs on it.
    fn store_requests(&self, which: Impl) -> Option<u64> {
        match self.counted.filter(|_| which.on_consensus_store())? {
            Counted::Etcd(etcd) => Some(etcd.requests_started(0, "etcdserverpb.KV")),
            Counted::Zookeeper(zookeeper) => Some(zookeeper.requests_received(0)),
        }
    }
}

/// Distinct keys on a SQL database: each implementation in turn, every round, and the
/// engine's and backend's throughput over the raw statements' in the same round.
async fn sql_distinct_keys_grid(
    args: &Args,
    database: Database,
    redis_url: &str,
    impls: &[SqlPair],
) {
    let title = format!("{database:?}");
    let raw = SqlPair::Raw.name(database);
    grid_over_raw(args, &title, raw, impls, |which, concurrency| {
        sql_pairs::run(which, database, redis_url, concurrency, args.duration())
    })
    .await;
}

/// Distinct keys on ZooKeeper: each implementation in turn, every round, on one standalone
/// server started for the grid, and the engine's and backend's throughput over the raw
/// requests' in the same round.
async fn zookeeper_distinct_keys_grid(args: &Args, redis_url: &str, impls: &[ZookeeperPair]) {
    let zookeeper = ZookeeperEnsemble::start(1);
    let servers = zookeeper.connect_string();
    let raw = ZookeeperPair::Raw.name();
    grid_over_raw(args, "ZooKeeper", raw, impls, |which, concurrency| {
        zookeeper_pairs::run(which, &servers, redis_url, concurrency, args.duration())
    })
    .await;
}

/// Runs the distinct-keys grid of `impls` on the store called `title` with `run`, and prints
/// each figure's median and its ratio to `raw`'s (the store's own requests) in the same round.
async fn grid_over_raw<W: Copy, F: std::future::Future<Output = distinct_keys::PairSummary>>(
    args: &Args,
    title: &str,
    raw: &str,
    impls: &[W],
    run: impl Fn(W, usize) -> F,
) {
    let concurrencies = args.concurrencies(&[1, 16, 64]);
    let mut rows = Vec::new();
    let mut ratio_lines = Vec::new();
    for &concurrency in &concurrencies {
        let rounds = interleaved(args.rounds, impls, concurrency, |which| {
            run(which, concurrency)
        })
        .await;
        for (which, median, lowest, highest) in distinct_keys::ratios_to(&rounds, raw) {
            ratio_lines.push(format!(
                "  {which:<20} {concurrency:>4} {median:>8.2} {lowest:>6.2}–{highest:.2}"
            ));
        }
        push_medians(rounds, args.json, &mut rows);
    }
    if !args.json {
        println!(
            "\nscenario distinct-keys on {title}, {} s per run, median of {} interleaved rounds",
            args.duration_s, args.rounds
        );
        distinct_keys::print_table(&rows, raw);
        println!("\nthroughput over the raw requests' in the same round (median, lowest–highest):");
        println!(
            "  {:<20} {:>4} {:>8} {:>11}",
            "impl", "C", "median", "range"
        );
        for line in &ratio_lines {
            println!("{line}");
        }
    }
    args.write_chart(|path, store| chart::throughput_by_concurrency(path, store, &rows));
}

/// Distinct keys on etcd: each implementation in turn, every round, on one etcd started for
/// the grid, and the engine's and backend's throughput over the raw transactions' in the same
/// round.
async fn etcd_distinct_keys_grid(args: &Args, redis_url: &str, impls: &[EtcdPair]) {
    let etcd = EtcdCluster::start(1);
    let endpoint = etcd.endpoint(0);
    let (concurrencies, duration) = (args.concurrencies(&[1, 16, 64]), args.duration());
    let mut rows = Vec::new();
    let mut ratio_lines = Vec::new();
    for &concurrency in &concurrencies {
        let rounds = interleaved(args.rounds, impls, concurrency, |which| {
            etcd_pairs::run(which, &endpoint, redis_url, concurrency, duration)
        })
        .await;
        for reference in [EtcdPair::Raw, EtcdPair::LockRpc] {
            for (which, median, lowest, highest) in
                distinct_keys::ratios_to(&rounds, reference.name())
            {
                ratio_lines.push(format!(
                    "  {which:<20} {:<14} {concurrency:>4} {median:>8.2} {lowest:>6.2}–{highest:.2}",
                    reference.name()
                ));
            }
        }
        push_medians(rounds, args.json, &mut rows);
    }
    if !args.json {
        println!(
            "\nscenario distinct-keys on etcd, {} s per run, median of {} interleaved rounds",
            args.duration_s, args.rounds
        );
        distinct_keys::print_table(&rows, EtcdPair::Raw.name());
        println!("\nthroughput over a reference's in the same round (median, lowest–highest):");
        println!(
            "  {:<20} {:<14} {:>4} {:>8} {:>11}",
            "impl", "over", "C", "median", "range"
        );
        for line in &ratio_lines {
            println!("{line}");
        }
    }
    args.write_chart(|path, store| chart::throughput_by_concurrency(path, store, &rows));
}

/// Distinct keys on the cluster's or RedLock's `nodes` (named `title`), beside one Redis.
async fn redis_distinct_keys_grid(
    args: &Args,
    (title, nodes): (&str, &[String]),
    redis_url: &str,
    impls: &[RedisPair],
) {
    let (concurrencies, duration) = (args.concurrencies(&[1, 16, 64]), args.duration());
    let mut rows = Vec::new();
    let mut ratio_lines = Vec::new();
    for &concurrency in &concurrencies {
        let rounds = interleaved(args.rounds, impls, concurrency, |which| {
            redis_pairs::run(which, nodes, redis_url, concurrency, duration)
        })
        .await;
        let reference = RedisPair::RedisEngine.name();
        for (which, median, lowest, highest) in distinct_keys::ratios_to(&rounds, reference) {
            ratio_lines.push(format!(
                "  {which:<22} {reference:<14} {concurrency:>4} {median:>8.2} {lowest:>6.2}–{highest:.2}"
            ));
        }
        push_medians(rounds, args.json, &mut rows);
    }
    if !args.json {
        println!(
            "\nscenario distinct-keys on {title} beside one Redis, {} s per run, median of {} \
             interleaved rounds",
            args.duration_s, args.rounds
        );
        distinct_keys::print_table(&rows, RedisPair::RedisEngine.name());
        println!("\nthroughput over a reference's in the same round (median, lowest–highest):");
        println!(
            "  {:<22} {:<14} {:>4} {:>8} {:>11}",
            "impl", "over", "C", "median", "range"
        );
        for line in &ratio_lines {
            println!("{line}");
        }
    }
    args.write_chart(|path, store| chart::throughput_by_concurrency(path, store, &rows));
}

/// Scenario `failover`: the trials, one line each, and what they add up to without and with
/// replica acknowledgements.
async fn failover_trials(args: &Args) {
    let mut arms: [Vec<failover::Trial>; 2] = [Vec::new(), Vec::new()];
    let each = |n, acks, trial: failover::Trial| {
        if args.json {
            let row = serde_json::json!({ "trial": n, "replica_acks": acks, "result": trial });
            println!("{row}");
        } else {
            println!(
                "trial {n:>4}, replica acks {acks}: {:>5} held at the kill, {:>4} granted twice, \
                 failover {:>5} ms, {:>5} refused",
                trial.held_at_kill, trial.granted_twice, trial.failover_ms, trial.refused
            );
        }
        arms[usize::from(acks > 0)].push(trial);
    };
    let trials = failover::Trials {
        count: args.trials,
        acks: args.replica_acks,
        lag: Duration::from_millis(args.lag_ms),
    };
    match args.backend {
        Some(Backend::RedisSentinel) => failover::run::<RedisSentinels>(trials, each).await,
        Some(Backend::RedisCluster) => failover::run::<RedisCluster>(trials, each).await,
        _ => {
            eprintln!(
                "lockbench: --scenario failover runs on --backend redis-sentinel or redis-cluster"
            );
            std::process::exit(2);
        }
    }
    for (trials, acks) in arms.iter().zip([0, args.replica_acks]) {
        let held: usize = trials.iter().map(|trial| trial.held_at_kill).sum();
        let twice: usize = trials.iter().map(|trial| trial.granted_twice).sum();
        let with_any = trials
            .iter()
            .filter(|trial| trial.granted_twice > 0)
            .count();
        let mut failovers: Vec<u64> = trials.iter().map(|trial| trial.failover_ms).collect();
        failovers.sort_unstable();
        let median = failovers
            .get(failovers.len() / 2)
            .copied()
            .unwrap_or_default();
        println!(
            "{} trials, replica acks {acks}: {with_any} with a lock granted twice; {twice} of \
             {held} locks held at the kill granted twice; failover median {median} ms, longest \
             {} ms",
            trials.len(),
            failovers.last().copied().unwrap_or_default()
        );
    }
}

/// Runs each of `impls` at `concurrency` with `run`, `rounds` times over, interleaved (so
/// that the host's drift spreads over all of them): each implementation's runs, in `impls`'
/// order.
async fn interleaved<W: Copy, F: std::future::Future<Output = distinct_keys::PairSummary>>(
    rounds: usize,
    impls: &[W],
    concurrency: usize,
    run: impl Fn(W) -> F,
) -> Vec<Vec<distinct_keys::PairSummary>> {
    let mut runs: Vec<Vec<distinct_keys::PairSummary>> = impls.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds.max(1) {
        for (index, &which) in impls.iter().enumerate() {
            let row = run(which).await;
            progress::run_done(&format!(
                "  round {} {} C={concurrency}: {:.0} pairs/s",
                round + 1,
                row.which,
                row.pairs_per_s
            ));
            runs[index].push(row);
        }
    }
    runs
}

/// Each implementation's median run, added to `rows` (and printed as JSON with `json`).
fn push_medians(
    rounds: Vec<Vec<distinct_keys::PairSummary>>,
    json: bool,
    rows: &mut Vec<distinct_keys::PairSummary>,
) {
    for runs in rounds {
        let row = distinct_keys::median(runs);
        if json {
            println!("{}", serde_json::to_string(&row).expect("serializable"));
        }
        rows.push(row);
    }
}

async fn distinct_keys_grid(args: &Args, url: &str, impls: &[PairImpl]) {
    let (concurrencies, duration) = (args.concurrencies(&[1, 16, 64]), args.duration());
    let mut rows = Vec::new();
    let mut ratio_lines = Vec::new();
    for &concurrency in &concurrencies {
        let rounds = interleaved(args.rounds, impls, concurrency, |which| async move {
            // Every run starts from an empty Redis, so no run pays for another's keys.
            redis_stats::flush(url).await;
            distinct_keys::run(which, url, concurrency, duration).await
        })
        .await;
        for (which, median, lowest, highest) in distinct_keys::ratios_to(&rounds, "rslock") {
            ratio_lines.push(format!(
                "  {which:<20} {concurrency:>4} {median:>8.2} {lowest:>6.2}–{highest:.2}"
            ));
        }
        push_medians(rounds, args.json, &mut rows);
    }
    if !args.json {
        println!(
            "\nscenario distinct-keys, {} s per run, median of {} interleaved rounds",
            args.duration_s, args.rounds
        );
        distinct_keys::print_table(&rows, PairImpl::RawScripts.name());
        if !ratio_lines.is_empty() {
            println!("\nthroughput over rslock's in the same round (median, lowest–highest):");
            println!(
                "  {:<20} {:>4} {:>8} {:>11}",
                "impl", "C", "median", "range"
            );
            for line in &ratio_lines {
                println!("{line}");
            }
        }
        println!("\nredis-benchmark on the same server, each command alone (requests/s):");
        for &concurrency in &concurrencies {
            let figures = distinct_keys::redis_benchmark(url, concurrency).await;
            let line: Vec<String> = figures
                .iter()
                .map(|(what, rate)| format!("{what} {rate:.0}"))
                .collect();
            println!("  C={concurrency}: {}", line.join(", "));
        }
    }
    args.write_chart(|path, store| chart::throughput_by_concurrency(path, store, &rows));
}

async fn hot_key_grid(args: &Args, urls: &Urls<'_>, impls: &[Impl]) {
    let concurrencies = args.concurrencies(&[8, 64]);
    let holds = if args.hold_ms.is_empty() {
        vec![0, 1]
    } else {
        args.hold_ms.clone()
    };
    let duration = Duration::from_secs(args.duration_s);
    let mut rows = Vec::new();
    for &concurrency in &concurrencies {
        for &hold_ms in &holds {
            for &which in impls {
                let row = hot_key_once(args, urls, which, concurrency, hold_ms, duration).await;
                if args.json {
                    println!("{}", serde_json::to_string(&row).expect("serializable"));
                }
                progress::run_done(&format!(
                    "  {} C={concurrency} H={hold_ms}ms: {:.1} acq/s",
                    row.which, row.acquisitions_per_s
                ));
                rows.push(row);
            }
        }
    }
    if !args.json {
        println!(
            "\nscenario hot-key, shape {}, {} variant, {} process(es), {} s per run",
            args.shape.name(),
            if args.handoff { "handoff" } else { "default" },
            args.processes,
            args.duration_s
        );
        print_hot_key_table(&rows);
    }
    args.write_chart(|path, store| chart::hot_key_by_implementation(path, store, &rows));
}

async fn hot_key_once(
    args: &Args,
    urls: &Urls<'_>,
    which: Impl,
    concurrency: usize,
    hold_ms: u64,
    duration: Duration,
) -> HotKeySummary {
    let processes = usize::from(args.processes);
    let url = urls.of(which);
    // The server's own command counts: Redis's, etcd's key-value requests and ZooKeeper's
    // requests; on SQL only the client counts.
    let on_redis = !which.off_redis();
    let store_before = urls.store_requests(which);
    let before = if on_redis {
        redis_stats::command_calls(url).await
    } else {
        Default::default()
    };
    let start_us = now_us() + if processes == 1 { 300_000 } else { 2_000_000 };
    let key = format!("hot:{}:{concurrency}:{hold_ms}:{start_us}", which.name());
    let ports: Vec<SocketAddr> = match processes {
        1 => Vec::new(),
        _ => (0..processes).map(|_| free_udp_port()).collect(),
    };
    let plan = |index: usize| Plan {
        which,
        url: url.to_owned(),
        key: key.clone(),
        handoff: args.handoff,
        shape: args.shape,
        contenders: concurrency / processes + usize::from(index < concurrency % processes),
        first_contender: index * (concurrency / processes) + index.min(concurrency % processes),
        process: index,
        hold: Duration::from_millis(hold_ms),
        duration,
        start_us,
        listen: ports.get(index).copied(),
        peers: (ports.iter().enumerate())
            .filter(|&(other, _)| other != index)
            .map(|(_, &port)| port)
            .collect(),
    };
    let measured = if processes == 1 {
        hot_key::run(plan(0)).await
    } else {
        let plans: Vec<Plan> = (0..processes).map(plan).collect();
        let workers: Vec<_> = plans.iter().map(spawn_worker).collect();
        let mut merged = Measured::default();
        for worker in workers {
            let output = worker.await.expect("a worker ran");
            let part: Measured = serde_json::from_slice(&output).expect("a worker's measurements");
            merged.acquisitions.extend(part.acquisitions);
            merged.round_trips += part.round_trips;
        }
        merged
    };
    let after = if on_redis {
        redis_stats::command_calls(url).await
    } else {
        Default::default()
    };
    let acquired = measured.acquisitions.len().max(1) as f64;
    let round_trips = match (store_before, urls.store_requests(which)) {
        (Some(before), Some(after)) => after - before,
        _ if which.counts_round_trips() => measured.round_trips,
        _ => redis_stats::client_issued_by_rslock(&before, &after),
    };
    let figures = hot_key_figures(measured.acquisitions, (concurrency, processes), duration);
    let (wait_p50_ms, wait_p99_ms, wait_max_ms) = HotKeySummary::wait_ms(&figures);
    let (shared_wait_p99_ms, exclusive_wait_p99_ms) = HotKeySummary::wait_p99_by_hold_ms(&figures);
    HotKeySummary {
        which: which.name(),
        scenario: "hot-key",
        shape: args.shape.name(),
        handoff: args.handoff,
        concurrency,
        hold_ms,
        acquisitions_per_s: figures.acquisitions_per_s,
        utilization: figures.utilization,
        jain: figures.jain,
        process_jain: figures.process_jain,
        process_acquisitions: figures.per_process.clone(),
        waits_over_3s: HotKeySummary::waits_over_3s(&figures),
        max_local_run: figures.max_local_run,
        wait_p50_ms,
        wait_p99_ms,
        wait_max_ms,
        shared_wait_p99_ms,
        exclusive_wait_p99_ms,
        handoff_p50_us: percentile(&figures.handoff_us, 0.50) as f64,
        handoff_p99_us: percentile(&figures.handoff_us, 0.99) as f64,
        round_trips_per_acquire: Some(round_trips as f64 / acquired),
        redis_cmds_per_acquire: if on_redis {
            redis_stats::lock_commands(&before, &after) as f64 / acquired
        } else {
            f64::NAN
        },
    }
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

fn free_udp_port() -> SocketAddr {
    UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|socket| socket.local_addr())
        .expect("a free UDP port")
}

/// Runs one process's share of a run in a child lockbench; resolves to its stdout.
fn spawn_worker(plan: &Plan) -> tokio::task::JoinHandle<Vec<u8>> {
    let exe = std::env::current_exe().expect("lockbench's own path");
    let plan = serde_json::to_string(plan).expect("serializable");
    tokio::spawn(async move {
        let output = tokio::process::Command::new(exe)
            .args(["--worker", &plan])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .output()
            .await
            .expect("a worker process");
        assert!(
            output.status.success(),
            "a worker failed: {}",
            output.status
        );
        output.stdout
    })
}
