//! What the engine reports through the `metrics` facade, read back from a debugging recorder.

use std::future::Future;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tokio::time::sleep;

use super::locker;
use crate::telemetry::Metric;
use crate::test_support::{Fault, MutexOnly};
use crate::{LockError, MemoryBackend};

/// One recorded metric: name, labels (sorted), value.
type Sample = (String, Vec<(String, String)>, DebugValue);

/// Runs `scenario` on a current-thread runtime in paused time with a recorder of its own, and
/// returns everything recorded. The scenario gets a snapshotter of its own, to look meanwhile.
fn recorded<F: Future<Output = ()>>(scenario: impl FnOnce(Snapshotter) -> F) -> Vec<Sample> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let during = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || runtime.block_on(scenario(during)));
    samples(&snapshotter)
}

fn samples(snapshotter: &Snapshotter) -> Vec<Sample> {
    let samples = snapshotter.snapshot().into_vec().into_iter();
    samples
        .map(|(key, _, _, value)| {
            let key = key.key();
            let mut labels: Vec<_> = (key.labels())
                .map(|label| (label.key().to_owned(), label.value().to_owned()))
                .collect();
            labels.sort();
            (key.name().to_owned(), labels, value)
        })
        .collect()
}

/// The value of metric `name` whose labels include every one of `labels`, if recorded.
fn value<'a>(samples: &'a [Sample], name: &str, labels: &[(&str, &str)]) -> Option<&'a DebugValue> {
    samples
        .iter()
        .find(|(sample, sampled, _)| {
            sample == name
                && (labels.iter())
                    .all(|(key, value)| sampled.iter().any(|(k, v)| k == key && v == value))
        })
        .map(|(_, _, value)| value)
}

fn counter(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> u64 {
    match value(samples, name, labels) {
        Some(DebugValue::Counter(count)) => *count,
        None => 0,
        Some(other) => panic!("{name} is not a counter: {other:?}"),
    }
}

fn gauge(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    match value(samples, name, labels) {
        Some(DebugValue::Gauge(level)) => level.into_inner(),
        other => panic!("{name} {labels:?} is not a recorded gauge: {other:?}"),
    }
}

fn observations(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    match value(samples, name, labels) {
        Some(DebugValue::Histogram(values)) => values.iter().map(|v| v.into_inner()).collect(),
        None => Vec::new(),
        Some(other) => panic!("{name} is not a histogram: {other:?}"),
    }
}

#[test]
fn a_lock_taken_and_released_is_counted_timed_and_no_longer_held() {
    let samples = recorded(|_| async {
        let locker = locker(MemoryBackend::new(), |builder| builder);
        let held = locker.lock("invoice:1").await.unwrap();
        sleep(Duration::from_millis(250)).await;
        held.release().await.unwrap();
    });
    let lock = [
        ("backend", "memory"),
        ("shape", "mutex"),
        ("group", "default"),
    ];
    let acquired = [lock.as_slice(), &[("outcome", "acquired")]].concat();
    assert_eq!(
        counter(&samples, Metric::OutcomesTotal.name(), &acquired),
        1
    );
    assert_eq!(
        observations(&samples, Metric::AcquireSeconds.name(), &acquired).len(),
        1
    );
    assert_eq!(
        observations(&samples, Metric::HoldSeconds.name(), &lock),
        [0.25]
    );
    assert_eq!(gauge(&samples, Metric::Held.name(), &lock), 0.0);
    for op in ["acquire", "release"] {
        let call = [("backend", "memory"), ("op", op), ("result", "ok")];
        assert_eq!(
            counter(&samples, Metric::StoreCallsTotal.name(), &call),
            1,
            "{op}"
        );
    }
    assert!(observations(&samples, Metric::WaitSeconds.name(), &[]).is_empty());
    assert!(
        samples
            .iter()
            .all(|(_, labels, _)| labels.iter().all(|(_, v)| !v.contains("invoice"))),
        "no label carries the key: {samples:?}"
    );
}

#[test]
fn a_waiter_is_counted_among_the_waiters_while_it_waits() {
    recorded(|meanwhile| async move {
        let locker = locker(MemoryBackend::new(), |builder| {
            builder.wait(Duration::from_secs(1)).metrics_group("jobs")
        });
        let held = locker.lock("job:7").await.unwrap();
        let waiter = tokio::spawn({
            let locker = locker.clone();
            async move { locker.lock("job:7").await.map(drop) }
        });
        sleep(Duration::from_millis(100)).await;
        // One look: the debugging recorder's snapshot takes what it reads.
        let samples = samples(&meanwhile);
        let jobs = [("group", "jobs"), ("shape", "mutex")];
        assert_eq!(gauge(&samples, Metric::Waiters.name(), &jobs), 1.0);
        assert_eq!(gauge(&samples, Metric::Held.name(), &jobs), 1.0);
        drop(held);
        waiter.await.unwrap().unwrap();
    });
}

#[test]
fn a_refusal_and_a_wait_that_timed_out_are_outcomes_of_their_own() {
    let samples = recorded(|_| async move {
        let store = MemoryBackend::new();
        let waiting = locker(store.clone(), |builder| {
            builder.wait(Duration::from_secs(1)).metrics_group("jobs")
        });
        let rejecting = locker(store, |builder| builder.reject().metrics_group("jobs"));
        let held = waiting.lock("job:7").await.unwrap();
        let busy = rejecting.lock("job:7").await;
        assert!(matches!(busy, Err(LockError::Busy { .. })), "{busy:?}");
        let waited = waiting.lock("job:7").await;
        assert!(matches!(waited, Err(LockError::Busy { .. })), "{waited:?}");
        drop(held);
    });
    let jobs = [("group", "jobs"), ("shape", "mutex")];
    let outcome = |outcome| [jobs.as_slice(), &[("outcome", outcome)]].concat();
    assert_eq!(
        counter(&samples, Metric::OutcomesTotal.name(), &outcome("acquired")),
        1
    );
    assert_eq!(
        counter(&samples, Metric::OutcomesTotal.name(), &outcome("busy")),
        1
    );
    assert_eq!(
        counter(
            &samples,
            Metric::OutcomesTotal.name(),
            &outcome("wait_timed_out")
        ),
        1
    );
    assert!(observations(&samples, Metric::WaitSeconds.name(), &outcome("busy")).is_empty());
    let waited = observations(
        &samples,
        Metric::WaitSeconds.name(),
        &outcome("wait_timed_out"),
    );
    assert_eq!(waited.len(), 1);
    assert!((0.99..=1.01).contains(&waited[0]), "waited {waited:?}");
    assert_eq!(gauge(&samples, Metric::Waiters.name(), &jobs), 0.0);
}

#[test]
fn an_invalid_key_and_a_lost_lease_are_counted() {
    let samples = recorded(|_| async move {
        let stolen = MutexOnly::failing(Fault::Stolen);
        let locker = locker(stolen, |builder| builder.ttl(Duration::from_secs(3)));
        let invalid = locker.lock("").await;
        assert!(
            matches!(invalid, Err(LockError::InvalidKey(_))),
            "{invalid:?}"
        );
        let held = locker.lock("report:1").await.unwrap();
        let lost = held.lost().await;
        assert_eq!(lost, crate::LeaseLost::Taken);
    });
    let mutex = [("backend", "custom"), ("shape", "mutex")];
    let outcome = |outcome| [mutex.as_slice(), &[("outcome", outcome)]].concat();
    assert_eq!(
        counter(
            &samples,
            Metric::OutcomesTotal.name(),
            &outcome("invalid_key")
        ),
        1
    );
    assert_eq!(
        counter(
            &samples,
            Metric::OutcomesTotal.name(),
            &outcome("lease_lost")
        ),
        1
    );
    let refused = [mutex.as_slice(), &[("result", "refused")]].concat();
    assert_eq!(counter(&samples, Metric::RenewalsTotal.name(), &refused), 1);
}
