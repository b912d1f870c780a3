//! `simulate`: runs seeds of the deterministic simulation (see `docs/TESTING.md`).
//!
//!     simulate --seeds 10000      # from a random start; last line: simulated N seeds: V violations
//!     simulate --seed 42          # one seed; last line: seed 42: digest <hex>

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;

/// Runs seeds of tower-lock's deterministic simulation.
#[derive(Debug, Parser)]
#[command(name = "simulate")]
struct Options {
    /// Runs this many seeds, from a random start (or `--from`), and prints how many violated
    /// a check.
    #[arg(long, conflicts_with = "seed")]
    seeds: Option<u64>,
    /// The first seed of `--seeds`.
    #[arg(long, requires = "seeds")]
    from: Option<u64>,
    /// Runs one seed and prints its digest, and the history of any violation.
    #[arg(long)]
    seed: Option<u64>,
    /// With `--seed`: prints the whole history even without a violation.
    #[arg(long, requires = "seed")]
    history: bool,
}

fn main() -> ExitCode {
    let options = Options::parse();
    match (options.seed, options.seeds) {
        (Some(seed), _) => one(seed, options.history),
        (None, Some(seeds)) => many(options.from.unwrap_or_else(|| fastrand::u64(..)), seeds),
        (None, None) => {
            eprintln!("simulate: give --seeds N or --seed S (see --help)");
            ExitCode::from(2)
        }
    }
}

fn one(seed: u64, show_history: bool) -> ExitCode {
    let outcome = simulator::simulate(seed);
    println!("{}", outcome.summary);
    if show_history || !outcome.violations.is_empty() {
        print!("{}", outcome.history);
    }
    for violation in &outcome.violations {
        println!("violation: {violation}");
    }
    println!("seed {seed}: digest {}", outcome.digest);
    match outcome.violations.is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    }
}

fn many(from: u64, seeds: u64) -> ExitCode {
    let started = Instant::now();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let found: Vec<simulator::Outcome> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                scope.spawn(move || {
                    (0..seeds)
                        .filter(|index| index % threads == thread)
                        .map(|index| simulator::simulate(from.wrapping_add(index)))
                        .filter(|outcome| !outcome.violations.is_empty())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|handle| handle.join().expect("a simulating thread"))
            .collect()
    });
    for outcome in &found {
        println!(
            "seed {}: {} (replay: scripts/simulate --seed {})",
            outcome.seed, outcome.violations[0], outcome.seed
        );
    }
    let elapsed = started.elapsed();
    eprintln!(
        "seeds {from}..{} in {:.1} s ({:.0} a minute)",
        from.wrapping_add(seeds),
        elapsed.as_secs_f64(),
        seeds as f64 / elapsed.as_secs_f64() * 60.0
    );
    println!("simulated {seeds} seeds: {} violations", found.len());
    match found.is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    }
}
