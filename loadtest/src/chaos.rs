//! Scenario `chaos`: on each store (`--chaos-store`, default all five), three worker processes
//! (this program, started again) × 16 tasks take 4 hot keys' locks — in every shape, or those
//! `--chaos-shape` names — while random faults run, overlapping (or, with
//! `--one-fault-at-a-time`, one after another), until `--holds` holds and each kind of fault at
//! least once; then every hold they recorded is checked (`integration_tests::chaos`). One line
//! per store, then the table `docs/RELIABILITY.md` keeps.

use std::process::Command;

use integration_tests::chaos::{self, ChaosPlan, ChaosReport, ChaosShape, ChaosStore, Fault};

/// What a run of the scenario takes from the command line.
pub struct ChaosArgs<'a> {
    /// The stores' names (all when empty).
    pub stores: &'a [String],
    /// The shapes' names (all when empty).
    pub shapes: &'a [String],
    /// Holds per store.
    pub holds: u64,
    /// Whether faults may overlap.
    pub overlapping: bool,
}

/// Runs the stores `args` names, `holds` holds each.
pub fn run(args: &ChaosArgs<'_>) {
    let stores: Vec<ChaosStore> = if args.stores.is_empty() {
        ChaosStore::ALL.to_vec()
    } else {
        args.stores.iter().map(|name| parse_store(name)).collect()
    };
    let shapes: Vec<ChaosShape> = if args.shapes.is_empty() {
        ChaosShape::ALL.to_vec()
    } else {
        args.shapes.iter().map(|name| parse_shape(name)).collect()
    };
    let worker = || Command::new(std::env::current_exe().expect("lockbench's own path"));
    let reports: Vec<ChaosReport> = stores
        .into_iter()
        .map(|store| {
            let plan = ChaosPlan {
                shapes: shapes.clone(),
                overlapping: args.overlapping,
                ..ChaosPlan::new(store, args.holds)
            };
            let report = chaos::run(&plan, &worker);
            println!("{report}");
            report
        })
        .collect();
    println!(
        "\n| store | holds (mutex / read / write / permit / two keys) | time | faults (kill / pause / cut off / store restart; begun while another ran) | overlaps: fenced | unfenced, reported lost | unfenced, never told | semaphores over their permits | reads and writes refused (stale fence) | updates lost | longest without a grant (faults around it, s from its start) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for report in &reports {
        let fault = |kind| report.faults.get(&kind).copied().unwrap_or(0);
        let shape = |name: &str| report.verdict.shapes.get(name).copied().unwrap_or(0);
        println!(
            "| {} | {} ({} / {} / {} / {} / {}) | {:.0?} | {} / {} / {} / {}; {} | {} | {} | {} | {} | {} | {} | {:.1?}{} |",
            report.store,
            report.verdict.holds,
            shape("mutex"),
            shape("read"),
            shape("write"),
            shape("permit"),
            shape("keys"),
            report.elapsed,
            fault(Fault::KillProcess),
            fault(Fault::PauseProcess),
            fault(Fault::CutOff),
            fault(Fault::RestartStore),
            report.overlapped,
            report.verdict.fenced_overlaps,
            report.verdict.unfenced_reported,
            report.verdict.unfenced_unreported,
            report.verdict.permits_exceeded,
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

fn parse_shape(name: &str) -> ChaosShape {
    let shapes = [
        ("mutex", ChaosShape::Mutex),
        ("read", ChaosShape::Read),
        ("write", ChaosShape::Write),
        ("permit", ChaosShape::Permit),
        ("keys", ChaosShape::TwoKeys),
    ];
    let found = shapes.iter().find(|(known, _)| *known == name);
    found.map(|(_, shape)| *shape).unwrap_or_else(|| {
        eprintln!(
            "lockbench: --chaos-shape {name}: not a shape a chaos run takes (mutex, read, write, \
             permit, keys)"
        );
        std::process::exit(2);
    })
}

fn parse_store(name: &str) -> ChaosStore {
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
