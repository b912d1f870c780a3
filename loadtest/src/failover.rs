//! Scenario `failover` (`--backend redis-sentinel`): how often a lock is granted twice when the
//! master dies, without and with replica acknowledgements (`--replica-acks N`), in alternating
//! trials.
//!
//! Each trial, on a master with two replicas watched by three Sentinels (a group of its own):
//! process A takes fresh keys, about 2 000 a second (reject policy, a 10 s lease
//! renewed every third), holding each for 6 s; at a random moment the master is killed. Once the
//! Sentinels have promoted a replica, process B asks for every key A held at the kill, while
//! A still holds it (its lease runs on, renewal not due yet): each one B gets was granted twice —
//! the lock was on the dead master and not yet on the replica that took over.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use integration_tests::{MASTER_NAME, RedisSentinels};
use tokio::time::{Instant, sleep};
use tower_lock::backend::redis::SentinelConnection;
use tower_lock::{HeldLock, Locker, RedisBackend};

/// How long A holds each key: past the failover and B's look.
const HOLD: Duration = Duration::from_secs(6);
/// The lease TTL: renewal at a third, after B has looked.
const TTL: Duration = Duration::from_secs(10);
/// How long a lock waits for its replicas' acknowledgements.
const ACK_TIMEOUT: Duration = Duration::from_millis(100);
/// The pause of each of A's eight tasks between two locks: about 2 000 locks a second in all.
const PACE: Duration = Duration::from_millis(4);

/// What one trial found.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Trial {
    /// Keys A held when the master was killed.
    pub held_at_kill: usize,
    /// Of those, how many B was granted while A still held them.
    pub granted_twice: usize,
    /// From the kill until the Sentinels named another master.
    pub failover_ms: u64,
    /// A's acquires that failed: unacknowledged, or the master down during the failover.
    pub refused: usize,
}

/// Runs `trials` trials without replica acknowledgements and `trials` with `acks`, alternating,
/// each on a group of its own: `each` hears every one, with the acknowledgements it asked for.
pub async fn sentinel_trials(trials: usize, acks: u32, mut each: impl FnMut(usize, u32, Trial)) {
    for trial in 0..2 * trials {
        let acks = if trial % 2 == 0 { 0 } else { acks };
        let group = tokio::task::spawn_blocking(|| RedisSentinels::start(2))
            .await
            .expect("the Sentinels and their master start");
        let result = one_trial(group, trial, acks).await;
        each(trial / 2, acks, result);
    }
}

async fn locker(group: &RedisSentinels, acks: u32) -> Locker<RedisBackend<SentinelConnection>> {
    let backend = RedisBackend::connect_sentinel(group.sentinel_urls(), MASTER_NAME).await;
    let backend = backend.expect("the Sentinels answer");
    Locker::builder(backend.replica_acks(acks, ACK_TIMEOUT))
        .reject()
        .ttl(TTL)
        .build()
        .expect("valid settings")
}

async fn one_trial(group: RedisSentinels, trial: usize, acks: u32) -> Trial {
    let (a, b) = (locker(&group, acks).await, locker(&group, 0).await);
    let stop = Arc::new(AtomicBool::new(false));
    let mut takers = Vec::new();
    for task in 0..8 {
        let (a, stop) = (a.clone(), stop.clone());
        takers.push(tokio::spawn(async move {
            let (mut held, mut refused) = (Vec::new(), 0);
            for n in 0.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let key = format!("t{trial}-{task}-{n}");
                match a.lock(&key).await {
                    Ok(lock) => held.push((key, Instant::now(), lock)),
                    Err(_) => refused += 1,
                }
                sleep(PACE).await;
            }
            (held, refused)
        }));
    }
    sleep(Duration::from_millis(300 + fastrand::u64(..500))).await;
    let (group, killed) = tokio::task::spawn_blocking(move || {
        let mut group = group;
        let killed = Instant::now();
        group.kill_master_and_wait_for_another();
        (group, killed)
    })
    .await
    .expect("a replica takes over");
    let failover = killed.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (mut held, mut refused) = (Vec::<(String, Instant, HeldLock<_>)>::new(), 0);
    for taker in takers {
        let (more, more_refused) = taker.await.expect("a taker panicked");
        held.extend(more);
        refused += more_refused;
    }
    held.retain(|(_, taken, _)| *taken < killed);
    // B's connection follows the Sentinels on its first failed command: spend that on a key
    // of its own.
    for _ in 0..100 {
        if b.lock(&format!("t{trial}-b")).await.is_ok() {
            break;
        }
        sleep(Duration::from_millis(20)).await;
    }
    let mut granted_twice = 0;
    for (key, taken, lock) in &held {
        let a_holds = lock.is_held() && taken.elapsed() < HOLD;
        if a_holds && let Ok(again) = b.lock(key).await {
            granted_twice += 1;
            drop(again);
        }
    }
    let result = Trial {
        held_at_kill: held.len(),
        granted_twice,
        failover_ms: u64::try_from(failover.as_millis()).unwrap_or(u64::MAX),
        refused,
    };
    drop(held);
    drop(group);
    result
}
