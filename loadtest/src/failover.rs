//! Scenario `failover` (`--backend redis-sentinel` or `redis-cluster`): how often a lock is
//! granted twice when its master dies, without and with replica acknowledgements
//! (`--replica-acks N`), in alternating trials.
//!
//! Each trial, on a group of its own (a master with two replicas watched by three Sentinels,
//! or a cluster of three masters with a replica each): process A takes fresh keys, about
//! 2 000 a second (reject policy, a 10 s lease renewed every third), holding each for 6 s; at
//! a random moment the master serving them is killed (SIGKILL) — with `--lag-ms`, that long
//! after its replication stalled (its replicas frozen, its links to them filled), so that what
//! it granted meanwhile reached none of them, as on a network that lags. Once a replica has
//! taken over, process B asks for every key A held at the kill, while A still holds it (its
//! lease runs on, renewal not due yet): each one B gets was granted twice — the lock was on the
//! dead master and not on the replica that took over.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use integration_tests::{MASTER_NAME, RedisCluster, RedisSentinels};
use tokio::time::{Instant, sleep};
use tower_lock::backend::redis::{ClusterLink, RedisConnection, SentinelConnection};
use tower_lock::{HeldLock, Locker, RedisBackend};

use crate::args::{Args, Backend};

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
    /// From the kill until a replica served in the dead master's place.
    pub failover_ms: u64,
    /// A's acquires that failed: unacknowledged, or the master down during the failover.
    pub refused: usize,
}

/// A group of Redis servers whose master a trial kills.
pub trait Group: Sized + Send + 'static {
    /// The connection its backend follows the master with.
    type Connection: RedisConnection;

    /// Starts a group of its own (blocking).
    fn start() -> Self;

    /// A backend of a process of its own on the group.
    async fn backend(&self) -> RedisBackend<Self::Connection>;

    /// The port of the master a trial kills.
    fn victim(&self) -> u16;

    /// Which lock keys the master on port `master` serves.
    fn serves(&self, master: u16) -> KeyFilter;

    /// Stalls replication from the master on port `master`: the ports of its replicas, frozen.
    fn stall_replication(&self, master: u16) -> Vec<u16>;

    /// Thaws the server on `port`.
    fn thaw(&self, port: u16);

    /// Kills the master on `port` (SIGKILL).
    fn kill(&mut self, port: u16);

    /// Waits until a replica serves in place of the master on port `killed`.
    fn wait_for_takeover(&self, killed: u16);
}

impl Group for RedisSentinels {
    type Connection = SentinelConnection;

    fn start() -> Self {
        RedisSentinels::start(2)
    }

    async fn backend(&self) -> RedisBackend<SentinelConnection> {
        let backend = RedisBackend::connect_sentinel(self.sentinel_urls(), MASTER_NAME).await;
        backend.expect("the Sentinels answer")
    }

    fn victim(&self) -> u16 {
        self.master()
    }

    fn serves(&self, _: u16) -> KeyFilter {
        Arc::new(|_| true)
    }

    fn stall_replication(&self, _: u16) -> Vec<u16> {
        self.stall_replication()
    }

    fn thaw(&self, port: u16) {
        self.resume(port);
    }

    fn kill(&mut self, _: u16) {
        self.kill_master();
    }

    fn wait_for_takeover(&self, killed: u16) {
        self.wait_for_another_master(killed);
    }
}

impl Group for RedisCluster {
    type Connection = ClusterLink;

    fn start() -> Self {
        RedisCluster::start(3, 1)
    }

    async fn backend(&self) -> RedisBackend<ClusterLink> {
        let backend = RedisBackend::connect_cluster(self.urls()).await;
        backend.expect("the cluster answers")
    }

    fn victim(&self) -> u16 {
        self.masters()[0]
    }

    fn serves(&self, master: u16) -> KeyFilter {
        let ranges = self.slots_of(master);
        Arc::new(move |key| {
            let slot = slot_of_lock(key);
            (ranges.iter()).any(|&(low, high)| low <= slot && slot <= high)
        })
    }

    fn stall_replication(&self, master: u16) -> Vec<u16> {
        self.stall_replication(master)
    }

    fn thaw(&self, port: u16) {
        self.resume(port);
    }

    fn kill(&mut self, port: u16) {
        RedisCluster::kill(self, port);
    }

    fn wait_for_takeover(&self, _: u16) {
        self.wait_until_settled();
    }
}

/// Which lock keys a master serves.
pub type KeyFilter = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// The hash slot of lock `key` (with the default prefix, and no braces, which keys may not
/// hold): its Redis key is `{lock:<key>}`, so `lock:<key>` is the hash tag.
fn slot_of_lock(key: &str) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(format!("lock:{key}").as_bytes()) % 16384
}

/// How the trials run.
#[derive(Clone, Copy, Debug)]
pub struct Trials {
    /// Trials in each arm.
    pub count: usize,
    /// The acknowledgements asked for in the second arm.
    pub acks: u32,
    /// How long before the kill, once its links are full, replication stays stalled (zero:
    /// it does not stall).
    pub lag: Duration,
}

/// Runs `trials.count` trials without replica acknowledgements and as many with
/// `trials.acks`, alternating, each on a group of its own: `each` hears every one, with the
/// acknowledgements it asked for.
pub async fn run<G: Group>(trials: Trials, mut each: impl FnMut(usize, u32, Trial)) {
    for trial in 0..2 * trials.count {
        let acks = if trial % 2 == 0 { 0 } else { trials.acks };
        let group = tokio::task::spawn_blocking(G::start)
            .await
            .expect("the group starts");
        let result = one_trial(group, trial, acks, trials.lag).await;
        each(trial / 2, acks, result);
    }
}

async fn locker<G: Group>(group: &G, acks: u32) -> Locker<RedisBackend<G::Connection>> {
    let backend = group.backend().await.replica_acks(acks, ACK_TIMEOUT);
    Locker::builder(backend)
        .reject()
        .ttl(TTL)
        .build()
        .expect("valid settings")
}

async fn one_trial<G: Group>(group: G, trial: usize, acks: u32, lag: Duration) -> Trial {
    let (a, b) = (locker(&group, acks).await, locker(&group, 0).await);
    // On a cluster, A takes only keys the master killed serves.
    let master = group.victim();
    let serves = group.serves(master);
    let stop = Arc::new(AtomicBool::new(false));
    let mut takers = Vec::new();
    for task in 0..8 {
        let (a, stop, serves) = (a.clone(), stop.clone(), serves.clone());
        takers.push(tokio::spawn(async move {
            let (mut held, mut refused) = (Vec::new(), 0);
            for n in 0.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let key = format!("t{trial}-{task}-{n}");
                if !serves(&key) {
                    continue;
                }
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
        let mut stalled = Vec::new();
        if !lag.is_zero() {
            stalled = group.stall_replication(master);
            std::thread::sleep(lag);
        }
        let killed = Instant::now();
        group.kill(master);
        stalled.iter().for_each(|&replica| group.thaw(replica));
        group.wait_for_takeover(master);
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
    // B's connection follows the takeover on its first failed command: spend that on a key of
    // its own, served by the same master.
    let own = (0..)
        .map(|n| format!("t{trial}-b{n}"))
        .find(|key| serves(key));
    let own = own.expect("some key is served by the master killed");
    for _ in 0..100 {
        if b.lock(&own).await.is_ok() {
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

/// Scenario `failover`: the trials, one line each, and what they add up to without and with
/// replica acknowledgements.
pub async fn trials(args: &Args) {
    let mut arms: [Vec<Trial>; 2] = [Vec::new(), Vec::new()];
    let each = |n, acks, trial: Trial| {
        if args.json {
            let row = serde_json::json!({ "trial": n, "replica_acks": acks, "result": trial });
            println!("{row}");
        } else {
            println!(
                "trial {n:>4}, replica acks {acks}: {:>5} held at the kill, {:>4} granted twice, \
                 failover {:>5} ms, {:>5} refused",
                trial.held_at_kill, trial.granted_twice, trial.failover_ms, trial.refused
            );
        }
        arms[usize::from(acks > 0)].push(trial);
    };
    let trials = Trials {
        count: args.trials,
        acks: args.replica_acks,
        lag: Duration::from_millis(args.lag_ms),
    };
    match args.backend {
        Some(Backend::RedisSentinel) => run::<RedisSentinels>(trials, each).await,
        Some(Backend::RedisCluster) => run::<RedisCluster>(trials, each).await,
        _ => {
            eprintln!(
                "lockbench: --scenario failover runs on --backend redis-sentinel or redis-cluster"
            );
            std::process::exit(2);
        }
    }
    for (trials, acks) in arms.iter().zip([0, args.replica_acks]) {
        let held: usize = trials.iter().map(|trial| trial.held_at_kill).sum();
        let twice: usize = trials.iter().map(|trial| trial.granted_twice).sum();
        let with_any = trials
            .iter()
            .filter(|trial| trial.granted_twice > 0)
            .count();
        let mut failovers: Vec<u64> = trials.iter().map(|trial| trial.failover_ms).collect();
        failovers.sort_unstable();
        let median = failovers
            .get(failovers.len() / 2)
            .copied()
            .unwrap_or_default();
        println!(
            "{} trials, replica acks {acks}: {with_any} with a lock granted twice; {twice} of \
             {held} locks held at the kill granted twice; failover median {median} ms, longest \
             {} ms",
            trials.len(),
            failovers.last().copied().unwrap_or_default()
        );
    }
}
