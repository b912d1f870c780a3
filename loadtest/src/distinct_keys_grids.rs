//! The distinct-keys grids: each implementation in turn, every round, and each figure's
//! ratio to a reference measured in the same round.

use std::future::Future;

use integration_tests::{EtcdCluster, ZookeeperEnsemble};

use crate::args::Args;
use crate::distinct_keys::{self, PairImpl, PairSummary};
use crate::etcd_pairs::{self, EtcdPair};
use crate::redis_pairs::{self, RedisPair};
use crate::sql_pairs::{self, Database, SqlPair};
use crate::zookeeper_pairs::{self, ZookeeperPair};
use crate::{chart, progress, redis_benchmark, redis_stats};

/// Distinct keys on a SQL database: each implementation in turn, every round, and the
/// engine's and backend's throughput over the raw statements' in the same round.
pub async fn sql_grid(args: &Args, database: Database, redis_url: &str, impls: &[SqlPair]) {
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
pub async fn zookeeper_grid(args: &Args, redis_url: &str, impls: &[ZookeeperPair]) {
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
async fn grid_over_raw<W: Copy, F: Future<Output = PairSummary>>(
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
pub async fn etcd_grid(args: &Args, redis_url: &str, impls: &[EtcdPair]) {
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
pub async fn redis_grid(
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

/// Runs each of `impls` at `concurrency` with `run`, `rounds` times over, interleaved (so
/// that the host's drift spreads over all of them): each implementation's runs, in `impls`'
/// order.
async fn interleaved<W: Copy, F: Future<Output = PairSummary>>(
    rounds: usize,
    impls: &[W],
    concurrency: usize,
    run: impl Fn(W) -> F,
) -> Vec<Vec<PairSummary>> {
    let mut runs: Vec<Vec<PairSummary>> = impls.iter().map(|_| Vec::new()).collect();
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
fn push_medians(rounds: Vec<Vec<PairSummary>>, json: bool, rows: &mut Vec<PairSummary>) {
    for runs in rounds {
        let row = distinct_keys::median(runs);
        if json {
            println!("{}", serde_json::to_string(&row).expect("serializable"));
        }
        rows.push(row);
    }
}

pub async fn redis_node_grid(args: &Args, url: &str, impls: &[PairImpl]) {
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
            let figures = redis_benchmark::rates(url, concurrency).await;
            let line: Vec<String> = figures
                .iter()
                .map(|(what, rate)| format!("{what} {rate:.0}"))
                .collect();
            println!("  C={concurrency}: {}", line.join(", "));
        }
    }
    args.write_chart(|path, store| chart::throughput_by_concurrency(path, store, &rows));
}
