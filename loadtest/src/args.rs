//! lockbench's command line: what to measure, where, and how.

use std::time::Duration;

use clap::Parser;

use crate::chart;
use crate::shape::Shape;
use crate::sql_pairs::Database;

/// Lock benchmarks against a real Redis.
#[derive(Debug, Parser)]
#[command(version, about)]
pub struct Args {
    /// What to measure.
    #[arg(long, value_enum, default_value = "hot-key")]
    pub scenario: Scenario,
    /// Measure tower-lock on this store instead of on Redis against peer libraries: the
    /// machine's PostgreSQL or MariaDB (`TEST_POSTGRES_URL` or `TEST_MYSQL_URL` for another), or
    /// an etcd, ZooKeeper, Redis Cluster, RedLock's masters or a Sentinel-watched master of
    /// lockbench's own (beside one Redis node).
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    /// Hot key: a contender that released waits until another has acquired before it wants
    /// the lock again, so every acquisition is a handoff.
    #[arg(long)]
    pub handoff: bool,
    /// Hot key: the shape of lock taken — `mutex`, `write` (every contender writes),
    /// `read-mostly` (nine readers to one writer), `permit` (a semaphore of 2) or `multi-key`
    /// (the key and `<key>:pair` together). The peers (seed-naive, rslock) and RedLock have
    /// mutexes only and sit out the others.
    #[arg(long, value_enum, default_value_t = Shape::Mutex)]
    pub shape: Shape,
    /// Concurrent contenders or tasks (repeatable); default: the scenario's grid (hot key: 8
    /// and 64; distinct keys: 1, 16 and 64).
    #[arg(long)]
    pub concurrency: Vec<usize>,
    /// How long each acquisition holds the lock, in ms (repeatable); default: 0 and 1.
    #[arg(long)]
    pub hold_ms: Vec<u64>,
    /// Length of each run.
    #[arg(long, default_value_t = 3)]
    pub duration_s: u64,
    /// Distinct keys: run the grid this many times, interleaved, and report each figure's
    /// median (the host's noise spreads single runs by ±10 % and more).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Split the contenders over this many processes (1 to 16).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=16))]
    pub processes: u8,
    /// Implementations to compare (repeatable); default: all of the scenario's. Hot key:
    /// tower-lock-notified, tower-lock-typed (the same on a `RedisBackend` chosen in code, not
    /// from a URL), tower-lock-cohort, tower-lock-polling, tower-lock-fair, memory, seed-naive,
    /// rslock (on PostgreSQL: postgres-notified, postgres-cohort,
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
    /// seed-minimal, tower-lock, tower-lock-nofence, tower-lock-engine, tower-lock-any-engine,
    /// tower-lock-service, rslock (on PostgreSQL: postgres-raw, postgres-backend, postgres-engine,
    /// pg-advisory-lock, pg-advisory-engine, redis-engine; on MySQL: mysql-raw, mysql-backend,
    /// mysql-engine, mysql-get-lock, mysql-nowait-engine, redis-engine; on etcd: etcd-raw,
    /// etcd-backend, etcd-engine, etcd-lock-rpc, redis-engine; on ZooKeeper: zookeeper-raw,
    /// zookeeper-backend, zookeeper-engine, redis-engine; on Redis Cluster: cluster-backend,
    /// cluster-engine, redis-backend, redis-engine; on RedLock: redlock-backend, redlock-engine,
    /// redis-backend, redis-engine; on Sentinel: sentinel-backend, sentinel-engine,
    /// sentinel-wait-engine, redis-backend, redis-engine).
    #[arg(long = "impl")]
    pub impls: Vec<String>,
    /// Where to draw the chart (SVG): throughput against concurrency per implementation
    /// (distinct keys), or throughput and p99 wait per implementation and configuration (hot
    /// key). Default: `target/lockbench/<scenario>-<store>.svg`.
    #[arg(long)]
    pub chart: Option<std::path::PathBuf>,
    /// One JSON object per line instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Record tower-lock's metrics into a Prometheus recorder (as an application exporting
    /// them would), to measure what recording costs; by default no recorder is installed.
    #[arg(long)]
    pub record_metrics: bool,
    /// Use this Redis instead of starting one.
    #[arg(long)]
    pub redis_url: Option<String>,
    /// Reach Redis through a proxy on loopback that delays each direction by this many µs
    /// (a network's round trip: 500 adds 1 ms per round trip).
    #[arg(long, default_value_t = 0)]
    pub delay_us: u64,
    /// Chaos: the stores to run on (repeatable): redis, postgres, mysql, etcd, zookeeper;
    /// default: all five, one after another.
    #[arg(long = "chaos-store")]
    pub chaos_stores: Vec<String>,
    /// Chaos: the shapes its workers take (repeatable): mutex, read, write, permit, keys (two
    /// at once); default: all five, mixed.
    #[arg(long = "chaos-shape")]
    pub chaos_shapes: Vec<String>,
    /// Chaos: one fault at a time (by default a fault may begin while others still run).
    #[arg(long)]
    pub one_fault_at_a_time: bool,
    /// Chaos: holds per store (the run also injects each kind of fault at least once).
    #[arg(long, default_value_t = 100_000)]
    pub holds: u64,
    /// Soak: how long to run, in minutes (Redis, or `--backend postgres`).
    #[arg(long, default_value_t = 30)]
    pub soak_minutes: u64,
    /// Failover: how many times the master is killed, without and again with acknowledgements.
    #[arg(long, default_value_t = 200)]
    pub trials: usize,
    /// Failover: replicas that must acknowledge each lock (`WAIT`) in every other trial.
    #[arg(long, default_value_t = 1)]
    pub replica_acks: u32,
    /// Failover: stall replication before killing the master (its replicas frozen, its links
    /// to them filled with 64 MiB, then this many ms more), so that the locks it grants
    /// meanwhile reach none of them.
    #[arg(long, default_value_t = 0)]
    pub lag_ms: u64,
    /// Redis Cluster (hot key, distinct keys): replicas per master of the three-master cluster
    /// lockbench starts (0: masters alone, as the one node beside them).
    #[arg(long, default_value_t = 1)]
    pub cluster_replicas: usize,
    /// Internal: run one process's share of a run (a JSON plan) and print what it measured.
    #[arg(long, hide = true)]
    pub worker: Option<String>,
}

/// The store measured instead of Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
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
    pub fn database(self) -> Option<Database> {
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
pub enum Scenario {
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
    pub fn concurrencies(&self, grid: &[usize]) -> Vec<usize> {
        if self.concurrency.is_empty() {
            grid.to_vec()
        } else {
            self.concurrency.clone()
        }
    }

    /// The store measured, as the chart's name and title say it.
    pub fn store(&self) -> &'static str {
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
    pub fn chart_path(&self) -> std::path::PathBuf {
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
    pub fn write_chart(&self, draw: impl FnOnce(&std::path::Path, &str) -> chart::Drawn) {
        let path = self.chart_path();
        match draw(&path, self.store()) {
            Ok(()) => eprintln!("chart written to {}", path.display()),
            Err(error) => eprintln!("cannot write the chart {}: {error}", path.display()),
        }
    }

    /// How many runs the grid makes with `impls` implementations.
    pub fn runs(&self, impls: usize) -> u64 {
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

    /// How long each run lasts.
    pub fn duration(&self) -> Duration {
        Duration::from_secs(self.duration_s)
    }
}

/// The implementations named on the command line, among the scenario's `all`.
pub fn chosen<T: Copy>(names: &[String], all: &[T], name: impl Fn(T) -> &'static str) -> Vec<T> {
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
