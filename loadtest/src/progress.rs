//! Progress of a long lockbench run on the terminal: one bar over every run of the grid, with
//! each run's figure printed above it. Without a terminal only the lines are printed.

use std::sync::OnceLock;

use indicatif::{ProgressBar, ProgressStyle};

static BAR: OnceLock<ProgressBar> = OnceLock::new();

/// Starts the bar over `runs` runs (once per process).
pub fn start(runs: u64) {
    let bar = ProgressBar::new(runs);
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} runs, about {eta} left",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    let _ = BAR.set(bar);
}

/// One run ended: `line` says what it measured.
pub fn run_done(line: &str) {
    match BAR.get() {
        Some(bar) => {
            bar.suspend(|| eprintln!("{line}"));
            bar.inc(1);
        }
        None => eprintln!("{line}"),
    }
}

/// The grid is done: the bar goes, the lines stay.
pub fn finish() {
    if let Some(bar) = BAR.get() {
        bar.finish_and_clear();
    }
}
