//! How the store's announcements reach the processes' rooms: each process hears each one on
//! its own, after its own delay (so two may arrive in either order), late, or never — as a
//! pub/sub channel delivers them.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::{Instant, sleep};
use tower_lock::backend::waiting::{Announcement, WaitingRoom};

use crate::link::Link;

/// How often an announcement is lost or late on its way to one process.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AnnouncementFaults {
    pub(crate) lost: f64,
    pub(crate) late: f64,
    pub(crate) late_delay: Duration,
    pub(crate) max_delay: Duration,
}

#[derive(Debug)]
struct Listeners {
    rng: fastrand::Rng,
    rooms: Vec<(Weak<WaitingRoom>, Arc<Link>, u64)>,
    lost: u64,
    late: u64,
    /// Every announcement: when, what, and how it went to each process.
    log: Vec<(Duration, String)>,
}

/// The announcements' way to every process.
#[derive(Clone, Debug)]
pub(crate) struct Delivery {
    faults: AnnouncementFaults,
    epoch: Instant,
    logs: bool,
    listeners: Arc<Mutex<Listeners>>,
}

impl Delivery {
    /// A delivery whose fates follow `seed`, keeping a log (timed from `epoch`) if it `logs`.
    pub(crate) fn new(
        seed: u64,
        faults: AnnouncementFaults,
        (epoch, logs): (Instant, bool),
    ) -> Self {
        Self {
            faults,
            epoch,
            logs,
            listeners: Arc::new(Mutex::new(Listeners {
                rng: fastrand::Rng::with_seed(seed),
                rooms: Vec::new(),
                lost: 0,
                late: 0,
                log: Vec::new(),
            })),
        }
    }

    /// From now on, `room` hears announcements, while its process runs.
    pub(crate) fn listen(&self, room: &Arc<WaitingRoom>, link: Arc<Link>, pid: u64) {
        lock(&self.listeners)
            .rooms
            .push((Arc::downgrade(room), link, pid));
    }

    /// Sends `announcement` of `name` on its way to every room.
    pub(crate) fn announce(&self, name: &str, announcement: Announcement) {
        let faults = self.faults;
        let mut listeners = lock(&self.listeners);
        let Listeners {
            rng,
            rooms,
            lost,
            late,
            log,
        } = &mut *listeners;
        let mut fates = Vec::new();
        for (room, link, pid) in rooms.iter() {
            let roll = rng.f64();
            let mut delay = Duration::from_micros(rng.u64(0..=faults.max_delay.as_micros() as u64));
            if roll < faults.lost {
                *lost += 1;
                if self.logs {
                    fates.push(format!("p{pid} lost"));
                }
                continue;
            }
            if roll < faults.lost + faults.late {
                *late += 1;
                delay += faults.late_delay;
            }
            if self.logs {
                fates.push(format!("p{pid} in {delay:?}"));
            }
            let (room, link, name) = (room.clone(), link.clone(), name.to_owned());
            tokio::spawn(async move {
                sleep(delay).await;
                link.reachable().await;
                if let Some(room) = room.upgrade() {
                    room.announce(&name, announcement);
                }
            });
        }
        if self.logs {
            let at = Instant::now() - self.epoch;
            log.push((
                at,
                format!(
                    "store announces {name} {announcement:?}: {}",
                    fates.join(", ")
                ),
            ));
        }
    }

    /// Every announcement so far: when, what, and how it went to each process.
    pub(crate) fn log(&self) -> Vec<(Duration, String)> {
        lock(&self.listeners).log.clone()
    }

    /// How many announcements were lost, and how many were late.
    pub(crate) fn faults_dealt(&self) -> u64 {
        let listeners = lock(&self.listeners);
        listeners.lost + listeners.late
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
