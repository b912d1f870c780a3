//! The hot-key grid: every implementation on one key, in one process or several.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::Stdio;
use std::time::Duration;

use integration_tests::{EtcdCluster, ZookeeperEnsemble};

use crate::args::Args;
use crate::hot_key::{self, Measured, Plan, now_us};
use crate::lockers::Impl;
use crate::report::{HotKeySummary, hot_key_figures, percentile, print_hot_key_table};
use crate::{chart, progress, redis_stats};

/// The stores of a hot-key grid: Redis, and the store under test when one is measured.
pub struct Urls<'a> {
    pub redis: String,
    pub other: Option<String>,
    /// The etcd or ZooKeeper under test, whose request counts are read off it.
    pub counted: Option<Counted<'a>>,
}

/// A store under test that counts the requests it handles.
#[derive(Clone, Copy)]
pub enum Counted<'a> {
    /// etcd's key-value requests (its sessions' keep-alives are not among them).
    Etcd(&'a EtcdCluster),
    /// Every request ZooKeeper received (the sessions' heartbeats among them: one per backend
    /// every few seconds).
    Zookeeper(&'a ZookeeperEnsemble),
}

impl Urls<'_> {
    pub fn redis(url: &str) -> Self {
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

pub async fn run(args: &Args, urls: &Urls<'_>, impls: &[Impl]) {
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
