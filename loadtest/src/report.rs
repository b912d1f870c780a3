//! Turning measurements into the figures lockbench reports.

use std::collections::HashMap;
use std::time::Duration;

use crate::hot_key::Acquisition;

/// One line of the hot-key report (and of its JSON output).
#[derive(Debug, serde::Serialize)]
pub struct HotKeySummary {
    #[serde(rename = "impl")]
    pub which: &'static str,
    pub scenario: &'static str,
    /// The shape of lock taken (`--shape`).
    pub shape: &'static str,
    pub handoff: bool,
    pub concurrency: usize,
    pub hold_ms: u64,
    pub acquisitions_per_s: f64,
    pub utilization: f64,
    pub jain: f64,
    /// Jain's index over the processes' acquisitions (1.0 in one process).
    pub process_jain: f64,
    /// The acquisitions of each process.
    pub process_acquisitions: Vec<u64>,
    /// Acquisitions that waited longer than 3 s: a caller with the demo's wait (3 s) would
    /// have been answered busy (409) instead.
    pub waits_over_3s: usize,
    /// The longest run of consecutive acquisitions inside one process.
    pub max_local_run: usize,
    pub wait_p50_ms: f64,
    pub wait_p99_ms: f64,
    pub wait_max_ms: f64,
    /// The p99 wait of the contenders holding the lock shared (readers, permits), and of those
    /// holding it alone (mutex, writers); NaN (JSON `null`) when there were none.
    pub shared_wait_p99_ms: f64,
    pub exclusive_wait_p99_ms: f64,
    pub handoff_p50_us: f64,
    pub handoff_p99_us: f64,
    pub round_trips_per_acquire: Option<f64>,
    pub redis_cmds_per_acquire: f64,
}

/// The `p`-quantile (0..=1) of sorted `values`, or 0 when empty.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Jain's fairness index over per-contender counts: 1.0 when even, 1/n when one got all.
pub fn jain(counts: &[u64]) -> f64 {
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let squares: f64 = counts.iter().map(|&c| (c as f64).powi(2)).sum();
    if squares == 0.0 {
        return 0.0;
    }
    sum * sum / (counts.len() as f64 * squares)
}

/// Everything derived from one hot-key run's acquisitions.
pub struct HotKeyFigures {
    pub acquisitions_per_s: f64,
    pub utilization: f64,
    pub jain: f64,
    pub process_jain: f64,
    pub per_process: Vec<u64>,
    pub max_local_run: usize,
    pub wait_us: Vec<u64>,
    /// `wait_us` of the shared holds alone, and of the exclusive ones.
    pub shared_wait_us: Vec<u64>,
    pub exclusive_wait_us: Vec<u64>,
    pub handoff_us: Vec<u64>,
}

/// The figures of `acquisitions` by `contenders` in `processes`, over a run of `duration`.
pub fn hot_key_figures(
    mut acquisitions: Vec<Acquisition>,
    (contenders, processes): (usize, usize),
    duration: Duration,
) -> HotKeyFigures {
    let seconds = duration.as_secs_f64();
    let mut per_contender: HashMap<usize, u64> = (0..contenders).map(|c| (c, 0)).collect();
    let mut per_process = vec![0; processes];
    for acquisition in &acquisitions {
        *per_contender.entry(acquisition.contender).or_default() += 1;
        if let Some(count) = per_process.get_mut(acquisition.process) {
            *count += 1;
        }
    }
    let counts: Vec<u64> = per_contender.into_values().collect();
    let held_us: u64 = acquisitions
        .iter()
        .map(|a| a.hold_end_us.saturating_sub(a.acquired_us))
        .sum();
    let waits = |shared: Option<bool>| {
        let mut waits: Vec<u64> = acquisitions
            .iter()
            .filter(|a| shared.is_none_or(|shared| a.shared == shared))
            .map(|a| a.acquired_us.saturating_sub(a.want_us))
            .collect();
        waits.sort_unstable();
        waits
    };
    let (wait_us, shared_wait_us, exclusive_wait_us) =
        (waits(None), waits(Some(true)), waits(Some(false)));
    acquisitions.sort_unstable_by_key(|a| a.acquired_us);
    let max_local_run = max_local_run(&acquisitions, processes);
    let mut handoff_us: Vec<u64> = acquisitions
        .windows(2)
        .map(|pair| pair[1].acquired_us.saturating_sub(pair[0].hold_end_us))
        .collect();
    handoff_us.sort_unstable();
    HotKeyFigures {
        acquisitions_per_s: acquisitions.len() as f64 / seconds,
        utilization: held_us as f64 / 1e6 / seconds,
        jain: jain(&counts),
        process_jain: jain(&per_process),
        per_process,
        max_local_run,
        wait_us,
        shared_wait_us,
        exclusive_wait_us,
        handoff_us,
    }
}

/// The longest run of consecutive acquisitions (sorted by time) inside one process, while
/// every one of the `processes` contends: between the last process's first acquisition and
/// the first process's last one. (As a run ends, processes stop a few ms apart, and the last
/// one left takes every acquisition.)
fn max_local_run(sorted: &[Acquisition], processes: usize) -> usize {
    let mut first = vec![u64::MAX; processes];
    let mut last = vec![0; processes];
    for acquisition in sorted {
        if let (Some(first), Some(last)) = (
            first.get_mut(acquisition.process),
            last.get_mut(acquisition.process),
        ) {
            *first = (*first).min(acquisition.acquired_us);
            *last = (*last).max(acquisition.acquired_us);
        }
    }
    let (from, to) = (first.into_iter().max(), last.into_iter().min());
    let (Some(from), Some(to)) = (from, to) else {
        return 0;
    };
    sorted
        .iter()
        .filter(|a| (from..=to).contains(&a.acquired_us))
        .collect::<Vec<_>>()
        .chunk_by(|a, b| a.process == b.process)
        .map(<[&Acquisition]>::len)
        .max()
        .unwrap_or(0)
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

impl HotKeySummary {
    pub fn wait_ms(figures: &HotKeyFigures) -> (f64, f64, f64) {
        (
            ms(percentile(&figures.wait_us, 0.50)),
            ms(percentile(&figures.wait_us, 0.99)),
            ms(figures.wait_us.last().copied().unwrap_or(0)),
        )
    }

    /// How many of the waits were longer than 3 s.
    pub fn waits_over_3s(figures: &HotKeyFigures) -> usize {
        let over = figures.wait_us.partition_point(|&wait| wait <= 3_000_000);
        figures.wait_us.len() - over
    }

    /// The p99 waits of shared and exclusive holds, NaN where there were none.
    pub fn wait_p99_by_hold_ms(figures: &HotKeyFigures) -> (f64, f64) {
        let p99 = |waits: &[u64]| {
            if waits.is_empty() {
                f64::NAN
            } else {
                ms(percentile(waits, 0.99))
            }
        };
        (
            p99(&figures.shared_wait_us),
            p99(&figures.exclusive_wait_us),
        )
    }
}

/// Each process's acquisitions, `a/b/c`.
fn per_process(counts: &[u64]) -> String {
    let counts: Vec<String> = counts.iter().map(u64::to_string).collect();
    counts.join("/")
}

/// Prints the hot-key table.
pub fn print_hot_key_table(rows: &[HotKeySummary]) {
    println!(
        "{:<20} {:<11} {:>7} {:>4} {:>4} {:>9} {:>6} {:>6} {:>6} {:>14} {:>5} {:>9} {:>9} {:>9} {:>5} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7}",
        "impl",
        "shape",
        "variant",
        "C",
        "H",
        "acq/s",
        "util",
        "jain",
        "p-jain",
        "per process",
        "run",
        "wait p50",
        "wait p99",
        "wait max",
        ">3s",
        "shar p99",
        "excl p99",
        "gap p50",
        "gap p99",
        "rt/acq",
        "cmd/acq"
    );
    println!(
        "{:<20} {:<11} {:>7} {:>4} {:>4} {:>9} {:>6} {:>6} {:>6} {:>14} {:>5} {:>9} {:>9} {:>9} {:>5} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7}",
        "",
        "",
        "",
        "",
        "ms",
        "",
        "",
        "",
        "",
        "",
        "",
        "ms",
        "ms",
        "ms",
        "",
        "ms",
        "ms",
        "µs",
        "µs",
        "",
        ""
    );
    let or_dash = |ms: f64| {
        if ms.is_nan() {
            "-".to_owned()
        } else {
            format!("{ms:.2}")
        }
    };
    for row in rows {
        println!(
            "{:<20} {:<11} {:>7} {:>4} {:>4} {:>9.1} {:>6.3} {:>6.3} {:>6.3} {:>14} {:>5} {:>9.2} {:>9.2} {:>9.2} {:>5} {:>9} {:>9} {:>9.0} {:>9.0} {:>7} {:>7}",
            row.which,
            row.shape,
            if row.handoff { "handoff" } else { "default" },
            row.concurrency,
            row.hold_ms,
            row.acquisitions_per_s,
            row.utilization,
            row.jain,
            row.process_jain,
            per_process(&row.process_acquisitions),
            row.max_local_run,
            row.wait_p50_ms,
            row.wait_p99_ms,
            row.wait_max_ms,
            row.waits_over_3s,
            or_dash(row.shared_wait_p99_ms),
            or_dash(row.exclusive_wait_p99_ms),
            row.handoff_p50_us,
            row.handoff_p99_us,
            row.round_trips_per_acquire
                .map_or_else(|| "-".to_owned(), |rt| format!("{rt:.2}")),
            or_dash(row.redis_cmds_per_acquire),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_is_one_when_even_and_one_over_n_when_one_gets_all() {
        assert!((jain(&[5, 5, 5, 5]) - 1.0).abs() < 1e-9);
        assert!((jain(&[20, 0, 0, 0]) - 0.25).abs() < 1e-9);
    }

    #[test]
    fn percentiles_pick_ranks_of_sorted_values() {
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&values, 0.5), 51);
        assert_eq!(percentile(&values, 0.99), 99);
        assert_eq!(percentile(&[], 0.5), 0);
    }

    #[test]
    fn utilization_and_handoff_gaps_come_from_measured_holds() {
        let acquisitions = vec![
            Acquisition {
                contender: 0,
                process: 0,
                shared: false,
                want_us: 0,
                acquired_us: 0,
                hold_end_us: 400_000,
            },
            Acquisition {
                contender: 1,
                process: 1,
                shared: true,
                want_us: 0,
                acquired_us: 500_000,
                hold_end_us: 900_000,
            },
        ];
        let figures = hot_key_figures(acquisitions, (2, 2), Duration::from_secs(1));
        assert!((figures.utilization - 0.8).abs() < 1e-9);
        assert_eq!(figures.handoff_us, [100_000]);
        assert_eq!(figures.wait_us, [0, 500_000]);
        assert_eq!(figures.shared_wait_us, [500_000]);
        assert_eq!(figures.exclusive_wait_us, [0]);
        assert!((figures.jain - 1.0).abs() < 1e-9);
        assert!((figures.process_jain - 1.0).abs() < 1e-9);
    }

    #[test]
    fn local_runs_count_only_while_every_process_contends() {
        let at = |process, acquired_us| Acquisition {
            contender: process,
            process,
            shared: false,
            want_us: 0,
            acquired_us,
            hold_end_us: acquired_us,
        };
        // Process 0 runs three times in a row while 1 contends, then alone at the end.
        let sorted = [
            at(0, 1),
            at(1, 2),
            at(0, 3),
            at(0, 4),
            at(0, 5),
            at(1, 6),
            at(0, 7),
            at(0, 8),
        ];

        assert_eq!(max_local_run(&sorted, 2), 3);
    }
}
