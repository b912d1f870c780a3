//! A seed replays: run in two separate OS processes, it gives the same digest — and a seed
//! that finds a violation finds it again.

use std::process::Command;

/// The last line `simulate` prints for `args`, and whether it succeeded.
fn simulate(args: &[&str]) -> (String, bool) {
    let output = Command::new(env!("CARGO_BIN_EXE_simulate"))
        .args(args)
        .output()
        .expect("the simulator runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or_default().to_owned();
    (last, output.status.success())
}

#[test]
fn one_seed_in_two_processes_gives_one_digest() {
    for seed in ["7", "971", "4272"] {
        let first = simulate(&["--seed", seed]);
        let second = simulate(&["--seed", seed]);
        assert!(
            first.0.starts_with(&format!("seed {seed}: digest ")),
            "{first:?}"
        );
        assert_eq!(first, second, "seed {seed} replayed differently");
        assert!(first.1, "seed {seed} violated a check: {first:?}");
    }
}

/// Its twin: a different seed gives a different history.
#[test]
fn two_seeds_give_two_digests() {
    assert_ne!(simulate(&["--seed", "7"]).0, simulate(&["--seed", "8"]).0);
}

#[test]
fn a_seed_that_finds_a_mutant_finds_it_again() {
    let (last, succeeded) = simulate(&[
        "--mutant",
        "lease-from-answer",
        "--seeds",
        "50",
        "--from",
        "0",
    ]);
    assert!(!succeeded, "found: {last}");
    let seed = (last.strip_prefix("mutant lease-from-answer found by seed "))
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("no seed in {last:?}"));
    for _ in 0..2 {
        let (_, replayed) = simulate(&["--seed", seed, "--mutant", "lease-from-answer"]);
        assert!(!replayed, "seed {seed} finds the mutant again");
    }
}
