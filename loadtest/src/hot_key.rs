//! Scenario `hot-key`: contenders fight for one key, hold it, release it, and want it again.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::net::UdpSocket;
use tokio::sync::Notify;
use tokio::time::{Instant, sleep_until};

use crate::lockers::{Contender, Impl};
use crate::shape::Shape;

/// What one process runs.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Plan {
    pub which: Impl,
    /// The store of `which`: Redis, or the SQL database.
    pub url: String,
    /// The hot key: fresh for every run, so a holder dropped at the end of one run does not
    /// block the next.
    pub key: String,
    pub handoff: bool,
    /// The shape of lock taken.
    pub shape: Shape,
    /// Contenders in this process.
    pub contenders: usize,
    /// Numbering of this process's contenders starts here.
    pub first_contender: usize,
    /// This process's number, from 0.
    pub process: usize,
    pub hold: Duration,
    pub duration: Duration,
    /// When all processes start contending, in µs since the Unix epoch.
    pub start_us: u64,
    /// UDP address this process hears other processes' acquisitions on.
    pub listen: Option<SocketAddr>,
    /// UDP addresses of the other processes.
    pub peers: Vec<SocketAddr>,
}

/// One acquisition, in µs since the Unix epoch (comparable across processes).
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct Acquisition {
    pub contender: usize,
    /// The process it ran in.
    pub process: usize,
    /// Whether it held the lock shared (a reader, a permit).
    pub shared: bool,
    /// When the contender started to want the lock.
    pub want_us: u64,
    /// When its work under the lock began.
    pub acquired_us: u64,
    /// When its work under the lock ended (the release starts here).
    pub hold_end_us: u64,
}

/// What one process measured.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Measured {
    pub acquisitions: Vec<Acquisition>,
    /// Round trips counted by the clients.
    pub round_trips: u64,
}

pub fn now_us() -> u64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970");
    u64::try_from(since_epoch.as_micros()).expect("µs fit in u64 until the year 586524")
}

/// The tokio instant at `unix_us`.
pub fn instant_at(unix_us: u64) -> Instant {
    let now = now_us();
    if unix_us >= now {
        Instant::now() + Duration::from_micros(unix_us - now)
    } else {
        Instant::now() - Duration::from_micros(now - unix_us)
    }
}

/// Counts acquisitions by anybody, in this process and (over UDP) the other ones, so that in
/// the handoff variant a contender can wait until someone else has had the lock.
struct Acquisitions {
    count: AtomicU64,
    changed: Notify,
    socket: Option<(UdpSocket, Vec<SocketAddr>)>,
}

impl Acquisitions {
    /// Records one acquisition here; returns the count including it.
    fn record(&self) -> u64 {
        let count = self.count.fetch_add(1, Ordering::SeqCst) + 1;
        self.changed.notify_waiters();
        if let Some((socket, peers)) = &self.socket {
            for peer in peers {
                socket.try_send_to(&[1], *peer).ok();
            }
        }
        count
    }

    /// Waits until the count passes `seen`.
    async fn after(&self, seen: u64) {
        loop {
            let changed = self.changed.notified();
            if self.count.load(Ordering::SeqCst) > seen {
                return;
            }
            changed.await;
        }
    }

    /// Counts the other processes' acquisitions as they are announced.
    async fn hear_peer(self: Arc<Self>) {
        let Some((socket, _)) = &self.socket else {
            return;
        };
        let mut buf = [0; 16];
        while socket.recv_from(&mut buf).await.is_ok() {
            self.count.fetch_add(1, Ordering::SeqCst);
            self.changed.notify_waiters();
        }
    }
}

/// Runs this process's contenders and returns what they measured.
pub async fn run(plan: Plan) -> Measured {
    let socket = match plan.listen {
        Some(listen) => Some((
            UdpSocket::bind(listen).await.expect("a free UDP port"),
            plan.peers.clone(),
        )),
        None => None,
    };
    let acquisitions = Arc::new(Acquisitions {
        count: AtomicU64::new(0),
        changed: Notify::new(),
        socket,
    });
    let listener = tokio::spawn(Arc::clone(&acquisitions).hear_peer());
    let calls = Arc::new(AtomicU64::new(0));
    let locker = Arc::new(Contender::connect(plan.which, &plan.url).await);
    let (start, end) = (
        instant_at(plan.start_us),
        instant_at(plan.start_us) + plan.duration,
    );
    let end_us = plan.start_us + u64::try_from(plan.duration.as_micros()).expect("a short run");

    let contenders: Vec<_> = (0..plan.contenders)
        .map(|i| {
            let (locker, acquisitions, calls) = (
                Arc::clone(&locker),
                Arc::clone(&acquisitions),
                Arc::clone(&calls),
            );
            let (contender, hold, handoff) = (plan.first_contender + i, plan.hold, plan.handoff);
            let process = plan.process;
            let taking = plan.shape.taken_by(contender);
            let key = plan.key.clone();
            tokio::spawn(async move {
                sleep_until(start).await;
                let mut records = Vec::new();
                // The count when this contender last acquired: in the handoff variant it wants
                // the lock again only once somebody else has had it since.
                let mut mine = None;
                loop {
                    if let (true, Some(mine)) = (handoff, mine) {
                        tokio::select! {
                            () = sleep_until(end) => break,
                            () = acquisitions.after(mine) => {}
                        }
                    }
                    let want_us = now_us();
                    if want_us >= end_us {
                        break;
                    }
                    let work = {
                        let acquisitions = Arc::clone(&acquisitions);
                        async move {
                            let acquired_us = now_us();
                            let count = acquisitions.record();
                            // Tokio's timers tick in whole milliseconds: even a zero
                            // sleep would hold the lock until the next tick.
                            if !hold.is_zero() {
                                tokio::time::sleep(hold).await;
                            }
                            (acquired_us, now_us(), count)
                        }
                    };
                    let (acquired_us, hold_end_us, count) = tokio::select! {
                        () = sleep_until(end) => break,
                        held = locker.with_lock(&key, taking, work, &calls) => held,
                    };
                    mine = Some(count);
                    if acquired_us < end_us {
                        records.push(Acquisition {
                            contender,
                            process,
                            shared: taking.is_shared(),
                            want_us,
                            acquired_us,
                            hold_end_us: hold_end_us.min(end_us),
                        });
                    }
                }
                records
            })
        })
        .collect();

    let mut measured = Measured::default();
    for contender in contenders {
        measured
            .acquisitions
            .extend(contender.await.expect("a contender finished"));
    }
    listener.abort();
    // Let dropped waiters give their tickets and locks back before the next run.
    tokio::time::sleep(Duration::from_millis(200)).await;
    measured.round_trips = calls.load(Ordering::Relaxed) + locker.backend_round_trips();
    measured
}
