//! Scenario `chaos`: on each store (`--chaos-store`, default all five), three worker processes
//! (this program, started again) × 16 tasks take 4 hot keys' locks while random faults run,
//! until `--holds` holds and each kind of fault at least once; then every hold they recorded
//! is checked (`integration_tests::chaos`). One line per store, then the table
//! `docs/RELIABILITY.md` keeps.

use std::process::Command;

use integration_tests::chaos::{self, ChaosPlan, ChaosReport, ChaosStore, Fault};

/// Runs the stores named in `names` (all when empty), `holds` holds each.
pub fn run(names: &[String], holds: u64) {
    let stores: Vec<ChaosStore> = if names.is_empty() {
        ChaosStore::ALL.to_vec()
    } else {
        names.iter().map(|name| parse(name)).collect()
    };
    let worker = || Command::new(std::env::current_exe().expect("lockbench's own path"));
    let reports: Vec<ChaosReport> = stores
        .into_iter()
        .map(|store| {
            let report = chaos::run(&ChaosPlan::new(store, holds), &worker);
            println!("{report}");
            report
        })
        .collect();
    println!(
        "\n| store | holds | time | faults (kill / pause / cut off / store restart) | overlaps: fenced | unfenced, reported lost | unfenced, never told | reads and writes refused (stale fence) | updates lost | longest without a grant (faults around it, s from its start) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for report in &reports {
        let fault = |kind| report.faults.get(&kind).copied().unwrap_or(0);
        println!(
            "| {} | {} | {:.0?} | {} / {} / {} / {} | {} | {} | {} | {} | {} | {:.1?}{} |",
            report.store,
            report.verdict.holds,
            report.elapsed,
            fault(Fault::KillProcess),
            fault(Fault::PauseProcess),
            fault(Fault::CutOff),
            fault(Fault::RestartStore),
            report.verdict.fenced_overlaps,
            report.verdict.unfenced_reported,
            report.verdict.unfenced_unreported,
            report.register.refused,
            report.register.lost_updates(),
            report.verdict.longest_gap,
            report.longest_gap_cause(),
        );
    }
    if !reports.iter().all(ChaosReport::holds_up) {
        eprintln!(
            "lockbench: a chaos run found holds that overlap outside fencing, or lost updates"
        );
        std::process::exit(1);
    }
}

fn parse(name: &str) -> ChaosStore {
    ChaosStore::ALL
        .into_iter()
        .find(|store| store.name() == name)
        .unwrap_or_else(|| {
            eprintln!(
                "lockbench: --chaos-store {name}: not a store a chaos run knows (redis, \
                 postgres, mysql, etcd, zookeeper)"
            );
            std::process::exit(2);
        })
}
