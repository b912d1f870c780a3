//! `simulate`: runs seeds of the deterministic simulation (see `docs/TESTING.md`).
//!
//!     simulate --seeds 10000                     # last line: simulated N seeds: V violations
//!     simulate --seed 42                         # last line: seed 42: digest <hex>
//!     simulate --mutant lease-from-answer --seeds 10000   # the seed that finds it
//!     simulate --list-mutants
//!
//! A mutant kept as a patch (`simulator/tests/mutants/`) is built by `scripts/simulate` in a
//! scratch copy of the tree, and run with `--patched NAME`.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use clap::Parser;
use tower_lock::testing::mutants::MUTANTS;

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
    /// Runs with one re-introduced bug (see `--list-mutants`); with `--seeds`, stops at the
    /// first seed that finds it (exit status 1) and prints it.
    #[arg(long)]
    mutant: Option<String>,
    /// This build carries bug NAME as a patch (`scripts/simulate` applies it to a scratch
    /// copy): runs as `--mutant NAME` would.
    #[arg(long, conflicts_with = "mutant", hide = true)]
    patched: Option<String>,
    /// Lists the mutants compiled in and the bug each brings back (`scripts/simulate` adds
    /// those kept as patches).
    #[arg(long, exclusive = true)]
    list_mutants: bool,
}

/// The bug a run brings back: its name, and whether it is compiled in (switched on by name) or
/// patched into this build.
#[derive(Clone, Copy, Debug)]
struct Bug<'a> {
    name: &'a str,
    compiled: bool,
}

impl<'a> Bug<'a> {
    /// The compiled mutant to switch on, if any.
    fn switch(bug: Option<Self>) -> Option<&'a str> {
        bug.filter(|bug| bug.compiled).map(|bug| bug.name)
    }
}

fn main() -> ExitCode {
    let options = Options::parse();
    if options.list_mutants {
        for (name, bug) in MUTANTS {
            println!("{name}: {bug}");
        }
        return ExitCode::SUCCESS;
    }
    let compiled = (options.mutant.as_deref()).map(|name| Bug {
        name,
        compiled: true,
    });
    let patched = (options.patched.as_deref()).map(|name| Bug {
        name,
        compiled: false,
    });
    let mutant = compiled.or(patched);
    if let Some(name) = options.mutant.as_deref()
        && !MUTANTS.iter().any(|(known, _)| *known == name)
    {
        let names: Vec<&str> = MUTANTS.iter().map(|(name, _)| *name).collect();
        eprintln!(
            "simulate: no mutant is called {name:?}; compiled in: {} (scripts/simulate \
             --list-mutants lists those kept as patches too)",
            names.join(", ")
        );
        return ExitCode::from(2);
    }
    match (options.seed, options.seeds) {
        (Some(seed), _) => one(seed, mutant, options.history),
        (None, Some(seeds)) => {
            let from = options.from.unwrap_or_else(|| fastrand::u64(..));
            many(from, seeds, mutant)
        }
        (None, None) => {
            eprintln!("simulate: give --seeds N, --seed S or --list-mutants (see --help)");
            ExitCode::from(2)
        }
    }
}

fn one(seed: u64, mutant: Option<Bug<'_>>, show_history: bool) -> ExitCode {
    let outcome = simulator::simulate(seed, Bug::switch(mutant));
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

fn many(from: u64, seeds: u64, mutant: Option<Bug<'_>>) -> ExitCode {
    let started = Instant::now();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    // With a mutant, a thread stops once it is past the first seed found (by any thread): the
    // first is the same however many threads run.
    let first_found = AtomicU64::new(u64::MAX);
    let found: Vec<(u64, simulator::Outcome)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let first_found = &first_found;
                scope.spawn(move || {
                    let mut found = Vec::new();
                    for index in (0..seeds).filter(|index| index % threads == thread) {
                        if mutant.is_some() && index > first_found.load(Ordering::Relaxed) {
                            break;
                        }
                        let seed = from.wrapping_add(index);
                        let outcome = simulator::simulate_quietly(seed, Bug::switch(mutant));
                        if !outcome.violations.is_empty() {
                            first_found.fetch_min(index, Ordering::Relaxed);
                            found.push((index + 1, outcome));
                        }
                    }
                    found
                })
            })
            .collect();
        let mut found: Vec<_> = (handles.into_iter())
            .flat_map(|handle| handle.join().expect("a simulating thread"))
            .collect();
        found.sort_by_key(|(index, _)| *index);
        found
    });
    for (_, outcome) in &found {
        println!(
            "seed {}: {} (replay: scripts/simulate --seed {}{})",
            outcome.seed,
            outcome.violations[0],
            outcome.seed,
            mutant.map_or(String::new(), |bug| format!(" --mutant {}", bug.name))
        );
    }
    let elapsed = started.elapsed();
    eprintln!(
        "seeds from {from} in {:.1} s ({:.0} a minute)",
        elapsed.as_secs_f64(),
        seeds as f64 / elapsed.as_secs_f64() * 60.0
    );
    if let (Some(bug), Some((index, outcome))) = (mutant, found.first()) {
        println!(
            "mutant {} found by seed {} (after {index} seeds)",
            bug.name, outcome.seed
        );
        return ExitCode::FAILURE;
    }
    println!("simulated {seeds} seeds: {} violations", found.len());
    match found.is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    }
}
