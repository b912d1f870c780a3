//! Locks handed on among the tasks of one locker (cohort handoff): exclusion across processes,
//! fences strictly increasing across local and store handoffs, a lease carried over and never
//! held past its end, and another process served after at most a run of local holds.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{Instant, sleep};

use super::Store;
use super::support::{LONG, Occupancy, SHORT, SLACK, free_within, locker};
use crate::backend::{FencingToken, SharedLocks};
use crate::{HeldLock, LockError, Locker, LockerBuilder};

/// Three processes with 64 tasks each take one key over and over, handing it on within each
/// process (the default run of 8 holds): never two inside at once. The same tasks without the
/// lock are seen inside together (the probe works).
pub async fn exclusion_holds_with_locks_handed_on_in_three_processes<S: Store>(store: &S) {
    let lockers = processes(store, 3, |builder| builder.wait(LONG).ttl(LONG)).await;
    let inside = Arc::new(Occupancy::default());
    let probe = Arc::new(Occupancy::default());
    let mut tasks = Vec::new();
    for task in 0..192 {
        let (locker, inside, probe) = (lockers[task % 3].clone(), inside.clone(), probe.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..2 {
                let work = |_| async { inside.visit(Duration::from_micros(200)).await };
                locker.with_lock("k", work).await?;
            }
            probe.visit(Duration::from_millis(1)).await;
            Ok::<_, crate::LockError>(())
        }));
    }
    for task in tasks {
        let done = task.await.expect("a task panicked");
        done.expect("every task gets the lock within the wait");
    }
    assert_eq!(inside.most(), 1, "two tasks held the key at once");
    assert!(
        probe.most() > 1,
        "the probe saw no overlap without the lock"
    );
}

/// Two processes with 16 tasks each take one key over and over: every hold's fence is above
/// the one before it, whether the lock was handed on within a process or went through the
/// store; and both happened.
pub async fn fences_increase_across_local_and_store_handoffs<S: Store>(store: &S) {
    if !store.fences() {
        return;
    }
    let lockers = processes(store, 2, |builder| {
        builder.wait(LONG).ttl(LONG).max_local_run(4)
    })
    .await;
    let holds: Arc<Mutex<Vec<(usize, FencingToken)>>> = Arc::default();
    let mut tasks = Vec::new();
    for task in 0..32 {
        let (locker, holds) = (lockers[task % 2].clone(), holds.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                let held = locker.lock("k").await?;
                let fence = held.fence().expect("an exclusive hold is fenced");
                holds.lock().unwrap().push((task % 2, fence));
                sleep(Duration::from_micros(300)).await;
                held.release().await?;
            }
            Ok::<_, crate::LockError>(())
        }));
    }
    for task in tasks {
        let done = task.await.expect("a task panicked");
        done.expect("every task gets the lock within the wait");
    }
    let holds = holds.lock().unwrap().clone();
    for pair in holds.windows(2) {
        assert!(pair[0].1 < pair[1].1, "fences out of order: {pair:?}");
    }
    let switches = holds
        .windows(2)
        .filter(|pair| pair[0].0 != pair[1].0)
        .count();
    let runs_within = holds.len() - 1 - switches;
    assert!(switches > 0, "the lock never went to the other process");
    assert!(
        runs_within > 0,
        "the lock was never handed on within a process"
    );
}

/// One process keeps a key busy with 8 tasks, handing it on; a task of another process asks
/// for it meanwhile and gets it within two runs (of 4 holds) of the first process: the rest of
/// the run under way when its place in the store's queue is taken, and — when that run ended
/// before, while it was still asking — one more. The twin: with runs of 32 holds, it waits
/// longer than that.
pub async fn another_process_waits_at_most_one_run_of_local_holds<S: Store>(store: &S) {
    let mutex = |locker: Locker<S::Backend>| async move { locker.lock("k").await };
    let short_runs = holds_before_the_others(store, 4, 1, mutex).await;
    assert!(
        short_runs[0] <= 8,
        "the other process waited {short_runs:?} holds, with runs of 4"
    );
    let long_runs = holds_before_the_others(store, 32, 1, mutex).await;
    assert!(
        long_runs[0] > 8,
        "with runs of 32, the other process waited only {long_runs:?} holds (the probe works)"
    );
}

/// The same with write locks and two other processes, whose writers ask while the first
/// process's runs of writes end one after another: each waiting writer keeps its place across
/// processes, so each gets the lock within two runs (of 4 holds) of the first process — a
/// process whose run ends asks again behind them, however soon. The twin: with runs of 32
/// holds, they wait longer than that. A store that kept one waiting writer's turn at a time
/// served the first other process so, but the second could lose its turn to the busy process
/// again and again (memory: 11 holds, PostgreSQL: 10 to 18, ZooKeeper: 104).
pub async fn waiting_writers_keep_their_place_while_another_processs_runs_end<S: Store>(store: &S)
where
    S::Backend: SharedLocks,
{
    let write = |locker: Locker<S::Backend>| async move { locker.write("k").await };
    let short_runs = holds_before_the_others(store, 4, 2, write).await;
    assert!(
        short_runs.iter().all(|&holds| holds <= 8),
        "the other processes' writers waited {short_runs:?} holds, with runs of 4"
    );
    // The twin: the busy process's runs must keep the lock for the probe to see anything, which
    // a loaded machine's scheduler may keep them from in one try.
    let mut long_runs = Vec::new();
    for _ in 0..3 {
        long_runs = holds_before_the_others(store, 32, 2, write).await;
        if long_runs.iter().any(|&holds| holds > 8) {
            break;
        }
    }
    assert!(
        long_runs.iter().any(|&holds| holds > 8),
        "with runs of 32, the other processes waited only {long_runs:?} holds (the probe works)"
    );
}

/// How many holds of a busy process (8 tasks, each holding for 5 ms, runs of `max_run`)
/// started between each of `others` other processes' task asking for the lock (`take`, all
/// at once) and getting it.
async fn holds_before_the_others<S, F>(
    store: &S,
    max_run: u32,
    others: usize,
    take: impl Fn(Locker<S::Backend>) -> F + Copy + Send + 'static,
) -> Vec<usize>
where
    S: Store,
    F: Future<Output = Result<HeldLock<S::Backend>, LockError>> + Send + 'static,
{
    let settings =
        move |builder: LockerBuilder<_>| builder.wait(LONG).ttl(LONG).max_local_run(max_run);
    let busy = locker(store.backend().await, settings);
    let started = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let stop = Arc::new(tokio::sync::Notify::new());
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (busy, started, stop) = (busy.clone(), started.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let stopped = stop.notified();
            tokio::pin!(stopped);
            stopped.as_mut().enable();
            loop {
                tokio::select! {
                    () = &mut stopped => return,
                    held = take(busy.clone()) => {
                        let held = held.expect("the busy process gets the lock");
                        started.lock().unwrap().push(Instant::now());
                        sleep(Duration::from_millis(5)).await;
                        held.release().await.ok();
                    }
                }
            }
        }));
    }
    let mut waiters = Vec::new();
    for _ in 0..others {
        let other = locker(store.backend().await, settings);
        waiters.push(async move {
            let asked = Instant::now();
            let held = take(other).await.expect("another process gets the lock");
            let got = Instant::now();
            held.release().await.ok();
            (asked, got)
        });
    }
    sleep(Duration::from_millis(30)).await;
    let waited = futures_util::future::join_all(waiters).await;
    stop.notify_waiters();
    for task in tasks {
        task.await.expect("a busy task panicked");
    }
    let started = started.lock().unwrap();
    waited
        .iter()
        .map(|&(asked, got)| {
            started
                .iter()
                .filter(|&&start| start > asked && start < got)
                .count()
        })
        .collect()
}

/// A lock handed on keeps the lease its run began with: without renewal, the next holder's
/// lease ends when the first holder's would have (not a TTL after the handoff, half a TTL into
/// the run), it sees the loss then, and another process takes the lock once the store's lease
/// ran out.
pub async fn a_handed_lease_ends_when_the_runs_lease_ends<S: Store>(store: &S) {
    let (a, b) = (store.backend().await, store.backend().await);
    let unrenewed = |builder: LockerBuilder<_>| builder.wait(LONG).ttl(SHORT).renew(false);
    let first_process = locker(a, unrenewed);
    let first = first_process.lock("k").await.expect("free");
    let taken = Instant::now();
    let next_process = first_process.clone();
    let next = tokio::spawn(async move { next_process.lock("k").await });
    sleep(SHORT / 2).await;
    first.release().await.expect("released");
    let next = next.await.expect("the next task finished");
    let next = next.expect("the lock is handed on");
    assert!(
        next.is_held(),
        "the next holder holds the lock after the handoff"
    );

    next.lost().await;
    let lost_after = taken.elapsed();
    // A lease counted afresh from the handoff would end after SHORT * 3 / 2; the margin below
    // that is for a loaded machine's late wake-up.
    assert!(
        lost_after < SHORT + SHORT / 4,
        "the handed lease ended {lost_after:?} after the run began, past its {SHORT:?} TTL"
    );
    if store.leases_expire() {
        let other = locker(b, |builder| builder.wait(LONG).ttl(LONG));
        let free = free_within(other.backend(), "lock:k", SHORT + SLACK).await;
        assert!(free, "the store frees the lock after the run's lease");
    }
    drop(next);
}

/// A holder that outlives its unrenewed lease does not hold back the other tasks of its
/// process: once the lease lapsed, the next one takes the lock from the store (as another
/// process would) before the stale holder is done, with a larger fence.
pub async fn a_lapsed_holder_does_not_hold_back_its_processes_waiters<S: Store>(store: &S) {
    let unrenewed = |builder: LockerBuilder<_>| builder.wait(LONG).ttl(SHORT).renew(false);
    let process = locker(store.backend().await, unrenewed);
    let stale = process.lock("k").await.expect("free");
    let next_task = process.clone();
    let next = tokio::spawn(async move { next_task.lock("k").await });
    sleep(SHORT * 2).await;
    assert!(
        next.is_finished(),
        "the next task still waits for the holder whose lease lapsed"
    );
    let next = next
        .await
        .expect("the next task finished")
        .expect("it took the lock");
    if let (Some(stale), Some(next)) = (stale.fence(), next.fence()) {
        assert!(
            stale < next,
            "the next holder's fence {next} is above {stale}"
        );
    }
    drop((stale, next));
}

/// Four tasks hand one key on for about four lease TTLs: renewal carries over from holder to
/// holder, so each still holds the lock when it releases it, and another process never gets
/// it meanwhile.
pub async fn a_run_of_local_holds_keeps_renewing_its_lease<S: Store>(store: &S) {
    let (a, b) = (store.backend().await, store.backend().await);
    let long_runs = |builder: LockerBuilder<_>| builder.wait(LONG).ttl(SHORT).max_local_run(256);
    let runner = locker(a, long_runs);
    let until = Instant::now() + SHORT * 4;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let runner = runner.clone();
        tasks.push(tokio::spawn(async move {
            let mut holds = 0;
            while Instant::now() < until {
                let held = runner.lock("k").await?;
                sleep(Duration::from_millis(30)).await;
                assert!(held.is_held(), "a holder of the run lost its lease");
                held.release().await?;
                holds += 1;
            }
            Ok::<_, crate::LockError>(holds)
        }));
    }
    let outsider = locker(b, |builder| builder.reject().ttl(LONG));
    sleep(SHORT / 3).await;
    let mut outsider_got_in = false;
    while Instant::now() < until - SHORT / 2 {
        outsider_got_in |= outsider.lock("k").await.is_ok();
        sleep(Duration::from_millis(20)).await;
    }
    for task in tasks {
        let holds = task.await.expect("a task panicked");
        assert!(holds.expect("every hold ends held") > 0);
    }
    assert!(
        !outsider_got_in,
        "another process got the lock during the run"
    );
}

/// `count` lockers on the store, each as another process, built with `settings`.
async fn processes<S: Store>(
    store: &S,
    count: usize,
    settings: impl Fn(LockerBuilder<S::Backend>) -> LockerBuilder<S::Backend> + Copy,
) -> Vec<Locker<S::Backend>> {
    let mut lockers = Vec::new();
    for _ in 0..count {
        lockers.push(locker(store.backend().await, settings));
    }
    lockers
}
