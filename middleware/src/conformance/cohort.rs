//! Locks handed on among the tasks of one locker (cohort handoff): exclusion across processes,
//! fences strictly increasing across local and store handoffs, a lease carried over and never
//! held past its end, and another process served after at most a run of local holds.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{Instant, sleep};

use super::Store;
use super::support::{LONG, Occupancy, SHORT, SLACK, free_within, locker, until};
use crate::backend::{FencingToken, SharedLocks};
use crate::testing::CountingBackend;
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
            probe.visit(Duration::from_micros(200)).await;
            for _ in 0..2 {
                let work = |_| async { inside.visit(Duration::from_micros(200)).await };
                locker.with_lock("k", work).await?;
            }
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

/// One process keeps a key busy with 8 tasks, handing it on; a task of another process, whose
/// place in the store's queue was taken while the first process's run began, gets the lock
/// when that run ends: after the run's other 3 holds (runs of 4). The twin: with runs of 32
/// holds, it waits 31.
pub async fn another_process_waits_at_most_one_run_of_local_holds<S: Store>(store: &S) {
    let mutex = |locker: Counted<S>| async move { locker.lock("k").await };
    let short_runs = holds_before_the_others(store, 4, 1, mutex).await;
    assert!(
        short_runs[0] <= 3,
        "the other process waited {short_runs:?} holds, with runs of 4"
    );
    let long_runs = holds_before_the_others(store, 32, 1, mutex).await;
    assert!(
        long_runs[0] > 3,
        "with runs of 32, the other process waited only {long_runs:?} holds (the probe works)"
    );
}

/// The same with write locks and two other processes: each waiting writer keeps its place
/// across processes, so both get the lock when the run under way ends (runs of 4: after its
/// other 3 holds) — the busy process, asking again as its run ends, comes after them. The
/// twin: with runs of 32 holds, they wait 31. A store that kept one waiting writer's turn at
/// a time served the first other process so, but the second could lose its turn to the busy
/// process again and again (memory: 11 holds, PostgreSQL: 10 to 18, ZooKeeper: 104).
pub async fn waiting_writers_keep_their_place_while_another_processs_runs_end<S: Store>(store: &S)
where
    S::Backend: SharedLocks,
{
    let write = |locker: Counted<S>| async move { locker.write("k").await };
    let short_runs = holds_before_the_others(store, 4, 2, write).await;
    assert!(
        short_runs.iter().all(|&holds| holds <= 3),
        "the other processes' writers waited {short_runs:?} holds, with runs of 4"
    );
    let long_runs = holds_before_the_others(store, 32, 2, write).await;
    assert!(
        long_runs.iter().all(|&holds| holds > 3),
        "with runs of 32, the other processes waited only {long_runs:?} holds (the probe works)"
    );
}

/// A locker whose store calls are counted.
type Counted<S> = Locker<CountingBackend<<S as Store>::Backend>>;

/// How many holds of a busy process (8 tasks, each holding for 5 ms, runs of `max_run`) came
/// after its first before each of `others` other processes' task (`take`) got the lock.
///
/// Nothing here depends on timing: the first hold is kept until the busy process's 8 tasks wait
/// in its line behind it and each other task has its place in the store's queue (its first
/// look and the attempt that queues it answered); then the run begins, each hold handed on to
/// a task already waiting, and ends after `max_run` holds.
async fn holds_before_the_others<S, F>(
    store: &S,
    max_run: u32,
    others: usize,
    take: impl Fn(Counted<S>) -> F + Copy + Send + 'static,
) -> Vec<usize>
where
    S: Store,
    F: Future<Output = Result<HeldLock<CountingBackend<S::Backend>>, LockError>> + Send + 'static,
{
    let settings =
        move |builder: LockerBuilder<_>| builder.wait(LONG).ttl(LONG).max_local_run(max_run);
    let busy = locker(CountingBackend::new(store.backend().await), settings);
    let first = take(busy.clone())
        .await
        .expect("the busy process gets the lock");
    let holds = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(tokio::sync::Notify::new());
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (busy, holds, stop) = (busy.clone(), holds.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let stopped = stop.notified();
            tokio::pin!(stopped);
            stopped.as_mut().enable();
            loop {
                tokio::select! {
                    () = &mut stopped => return,
                    held = take(busy.clone()) => {
                        let held = held.expect("the busy process gets the lock");
                        holds.fetch_add(1, SeqCst);
                        sleep(Duration::from_millis(5)).await;
                        held.release().await.ok();
                    }
                }
            }
        }));
    }
    let name = format!("{}k", busy.settings().prefix);
    until("the busy process's 8 tasks wait in its line", || {
        busy.waiting_in_line(&name) == 8
    })
    .await;
    let mut waiters = Vec::new();
    for _ in 0..others {
        let backend = CountingBackend::new(store.backend().await);
        let other = locker(backend.clone(), settings);
        let holds = holds.clone();
        waiters.push(tokio::spawn(async move {
            let held = take(other).await.expect("another process gets the lock");
            let holds_before = holds.load(SeqCst);
            held.release().await.ok();
            holds_before
        }));
        until(
            "the other process's task has its place in the store's queue",
            || backend.acquires_answered() >= 2,
        )
        .await;
    }
    first.release().await.expect("the first hold is kept");
    let mut waited = Vec::new();
    for waiter in waiters {
        waited.push(waiter.await.expect("another process's task panicked"));
    }
    stop.notify_waiters();
    for task in tasks {
        task.await.expect("a busy task panicked");
    }
    waited
}

/// A lock handed on keeps the lease its run began with: without renewal, the next holder's
/// lease ends when the first holder's would have (not a TTL after the handoff), it sees the
/// loss then and not before, and another process takes the lock once the store's lease ran
/// out.
pub async fn a_handed_lease_ends_when_the_runs_lease_ends<S: Store>(store: &S) {
    let (a, b) = (store.backend().await, store.backend().await);
    let unrenewed = |builder: LockerBuilder<_>| builder.wait(LONG).ttl(SHORT).renew(false);
    let first_process = locker(a, unrenewed);
    let first = first_process.lock("k").await.expect("free");
    let (_, runs_deadline) = first.lease().timing();
    let next_process = first_process.clone();
    let next = tokio::spawn(async move { next_process.lock("k").await });
    let name = format!("{}k", first_process.settings().prefix);
    until("the next task waits in the line", || {
        first_process.waiting_in_line(&name) == 1
    })
    .await;
    first.release().await.expect("released");
    let next = next.await.expect("the next task finished");
    let next = next.expect("the lock is handed on");

    let (_, handed_deadline) = next.lease().timing();
    assert_eq!(
        handed_deadline, runs_deadline,
        "the handed lease ends when the run's lease ends"
    );
    next.lost().await;
    assert!(
        Instant::now() >= runs_deadline,
        "the next holder saw the loss before its lease's end"
    );
    if store.leases_expire() {
        // The store's lease began when it received the first acquire, after the local lease
        // began (when it was sent): it ends a round trip after the local deadline at most, well
        // within the TTL and slack allowed here.
        let other = locker(b, |builder| builder.wait(LONG).ttl(LONG));
        let free = free_within(other.backend(), "lock:k", SHORT + SLACK).await;
        assert!(free, "the store frees the lock after the run's lease");
    }
    drop(next);
}

/// A holder that outlives its unrenewed lease does not hold back the other tasks of its
/// process: once the lease lapsed, the next one takes the lock from the store (as another
/// process would) while the stale holder still has its handle — held back, it would wait until
/// that is dropped — with a larger fence.
pub async fn a_lapsed_holder_does_not_hold_back_its_processes_waiters<S: Store>(store: &S) {
    let unrenewed = |builder: LockerBuilder<_>| builder.wait(LONG).ttl(SHORT).renew(false);
    let process = locker(store.backend().await, unrenewed);
    let stale = process.lock("k").await.expect("free");
    let next_task = process.clone();
    let next = tokio::spawn(async move { next_task.lock("k").await });
    let next = next
        .await
        .expect("the next task finished")
        .expect("the next task took the lock before the stale holder let go");
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
