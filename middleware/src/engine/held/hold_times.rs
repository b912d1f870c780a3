//! How long this process's locks are typically held: the basis of the retry hint a busy
//! answer gives.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// An exponentially weighted moving average of the hold times of a locker's locks (from the
/// grant to the release), each new hold weighing ⅛.
#[derive(Debug, Default)]
pub(crate) struct HoldTimes {
    /// In microseconds; 0 until the first release.
    average_micros: AtomicU64,
}

impl HoldTimes {
    /// A lock was held for `held`.
    pub(crate) fn record(&self, held: Duration) {
        let micros = u64::try_from(held.as_micros()).unwrap_or(u64::MAX).max(1);
        let _ = self
            .average_micros
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |average| {
                Some(match average {
                    0 => micros,
                    average => average - average / 8 + micros / 8,
                })
            });
    }

    /// The typical hold time, once a lock has been released.
    pub(crate) fn typical(&self) -> Option<Duration> {
        match self.average_micros.load(Ordering::Relaxed) {
            0 => None,
            micros => Some(Duration::from_micros(micros)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn nothing_is_typical_before_the_first_release() {
        assert_eq!(HoldTimes::default().typical(), None);
    }

    #[test]
    fn the_first_hold_is_typical_and_later_ones_move_the_average_by_an_eighth() {
        let times = HoldTimes::default();
        times.record(800 * MS);
        assert_eq!(times.typical(), Some(800 * MS));
        times.record(Duration::ZERO);
        assert_eq!(times.typical(), Some(700 * MS));
    }

    #[test]
    fn a_run_of_short_holds_brings_the_average_down() {
        let times = HoldTimes::default();
        times.record(Duration::from_secs(10));
        for _ in 0..40 {
            times.record(300 * MS);
        }
        assert!(times.typical().unwrap() < 400 * MS, "{:?}", times.typical());
    }
}
