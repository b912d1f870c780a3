//! What a seed decides before the run starts: the store's kind of lease and whether it
//! replicates, the processes and their settings, the keys, how often calls fail, when
//! processes are paused or killed, and when the store fails over.

use std::time::Duration;

use fastrand::Rng;

use crate::delivery::AnnouncementFaults;
use crate::link::Faults;
use crate::replication::ReplicaPlan;
use crate::store::Leases;

/// Acquisitions granted in every run, at least.
pub(crate) const ACQUISITIONS: u64 = 200;

/// One run's plan.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) leases: Leases,
    /// How the store's replica keeps up, where it has one to fail over to.
    pub(crate) replica: Option<ReplicaPlan>,
    pub(crate) processes: usize,
    pub(crate) keys: Vec<String>,
    pub(crate) faults: Faults,
    pub(crate) announcements: AnnouncementFaults,
    /// When each fault that strikes a process or the store strikes, from the start.
    pub(crate) events: Vec<(Duration, Event)>,
    pub(crate) stalls: Stalls,
}

/// How often a caller's task stalls at one of the engine's stall points (a GC pause that
/// strikes after the store granted it a lock, or answered it busy), and for how long at most.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stalls {
    pub(crate) chance: f64,
    pub(crate) longest: Duration,
}

/// A fault that strikes a whole process, or the store.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Event {
    /// The process in `slot` (the run's processes, by start order; a restarted one takes its
    /// predecessor's) frozen for this long (a GC pause), calls and work alike.
    Pause { slot: usize, pause: Duration },
    /// The process in `slot` killed (its leases left in the store), and started again as a new
    /// process this much later.
    Kill {
        slot: usize,
        restart_after: Duration,
    },
    /// The store's replication stalls (as it does when the master is overloaded, or cut off
    /// from its replica), and `stall` later the master dies; its replica is promoted `outage`
    /// after that: meanwhile nothing answers, and the writes the replica had not caught up
    /// with are forgotten.
    FailOver { stall: Duration, outage: Duration },
}

/// How one process's locker is set up.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ProcessPlan {
    pub(crate) ttl: Duration,
    pub(crate) store_timeout: Duration,
    pub(crate) policy: Policy,
    pub(crate) workers: usize,
    pub(crate) max_local_run: u32,
}

/// What a process's callers do when the lock is busy.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Policy {
    Reject,
    /// Waits this long, woken by the store's announcements.
    Notified(Duration),
    /// Waits this long, asking again every so often.
    Polling(Duration),
    /// Waits this long in the store's fair queue, its ticket kept for the second.
    Fair(Duration, Duration),
}

impl Policy {
    /// How long a caller may wait for the lock.
    pub(crate) fn wait(self) -> Duration {
        match self {
            Self::Reject => Duration::ZERO,
            Self::Notified(wait) | Self::Polling(wait) | Self::Fair(wait, _) => wait,
        }
    }
}

fn millis(rng: &mut Rng, range: std::ops::RangeInclusive<u64>) -> Duration {
    Duration::from_millis(rng.u64(range))
}

impl Plan {
    pub(crate) fn draw(rng: &mut Rng) -> Self {
        let leases = match rng.u8(0..10) {
            0..=6 => Leases::Ttl,
            _ => Leases::Session {
                timeout: millis(rng, 600..=2000),
            },
        };
        let processes = rng.usize(3..=5);
        let keys = (0..rng.usize(2..=3)).map(|key| format!("k{key}")).collect();
        let faults = Faults {
            refused: 0.02,
            lost: 0.02,
            hung: 0.01,
            slow: 0.03,
            slow_delay: millis(rng, 50..=400),
            max_delay: Duration::from_micros(rng.u64(100..=3000)),
        };
        let announcements = AnnouncementFaults {
            lost: 0.05,
            late: 0.05,
            late_delay: millis(rng, 20..=500),
            max_delay: Duration::from_micros(rng.u64(100..=3000)),
        };
        let mut events = Vec::new();
        for _ in 0..rng.usize(3..=5) {
            let at = millis(rng, 0..=1500);
            let slot = rng.usize(0..processes);
            let event = match rng.bool() {
                true => Event::Pause {
                    slot,
                    pause: millis(rng, 100..=2500),
                },
                false => Event::Kill {
                    slot,
                    restart_after: millis(rng, 0..=500),
                },
            };
            events.push((at, event));
        }
        // Drawn apart, so that what a seed draws for a store that does not replicate stays what
        // it drew before failovers were simulated.
        let mut store_faults = Rng::with_seed(rng.get_seed() ^ 0xFA11_0BE5);
        let replica = (leases == Leases::Ttl && store_faults.bool()).then(|| ReplicaPlan {
            catches_up_every: millis(&mut store_faults, 5..=300),
            ack: Duration::from_micros(store_faults.u64(100..=2000)),
            short: 0.02,
        });
        if replica.is_some() {
            for _ in 0..store_faults.usize(1..=2) {
                let (stall, outage) = (
                    millis(&mut store_faults, 0..=500),
                    millis(&mut store_faults, 0..=1000),
                );
                let at = millis(&mut store_faults, 0..=1500);
                events.push((at, Event::FailOver { stall, outage }));
            }
        }
        events.sort_by_key(|(at, _)| *at);
        let stalls = Stalls {
            chance: 0.05,
            longest: millis(rng, 100..=2500),
        };
        Self {
            stalls,
            leases,
            replica,
            processes,
            keys,
            faults,
            announcements,
            events,
        }
    }
}

impl ProcessPlan {
    pub(crate) fn draw(rng: &mut Rng, leases: Leases) -> Self {
        let longest = match leases {
            Leases::Ttl => 1500,
            Leases::Session { timeout } => timeout.as_millis() as u64,
        };
        let ttl = millis(rng, 300.min(longest)..=longest);
        let policy = match rng.u8(0..4) {
            0 => Policy::Reject,
            1 => Policy::Notified(millis(rng, 100..=1500)),
            2 => Policy::Polling(millis(rng, 100..=1500)),
            _ => Policy::Fair(millis(rng, 100..=1500), millis(rng, 100..=3000)),
        };
        Self {
            ttl,
            store_timeout: millis(rng, 50..=300),
            policy,
            workers: rng.usize(1..=3),
            max_local_run: rng.u32(1..=8),
        }
    }
}
