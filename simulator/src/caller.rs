//! A simulated process's callers: each takes locks one after another while the run goes on,
//! and works under them; a stall point in the engine may stall one while it asks.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use fastrand::Rng;
use tokio::time::{Instant, sleep};
use tower_lock::Locker;

use crate::link::Link;
use crate::plan::{ProcessPlan, Stalls};
use crate::store::SimBackend;
use crate::workload::{self, Call, Op};
use crate::world::{Shared, lock};

/// One caller of a process: takes locks one after another while the run goes on.
pub(crate) struct Caller {
    pub(crate) shared: Arc<Shared>,
    pub(crate) locker: Arc<Locker<SimBackend>>,
    pub(crate) link: Arc<Link>,
    pub(crate) backend: SimBackend,
    pub(crate) pid: u64,
    pub(crate) plan: ProcessPlan,
    pub(crate) rng: Rng,
}

impl Caller {
    pub(crate) async fn run(mut self) {
        while self.shared.more() {
            self.link.reachable().await;
            let op = Op::draw(&mut self.rng, &self.shared.keys);
            let started = Instant::now();
            let asking = Asking {
                backend: self.backend.clone(),
                stalled: Cell::default(),
                deadline: started + self.plan.policy.wait(),
            };
            let (taken, stalled) = ASKING
                .scope(asking, async {
                    let taken = op.take(&self.locker).await;
                    (taken, ASKING.with(|asking| asking.stalled.get()))
                })
                .await;
            let bound = self.plan.policy.wait() + self.plan.store_timeout + stalled;
            let call = Call::new(self.pid, &op, &taken, (self.shared.epoch, started), bound);
            lock(&self.shared.calls).push(call);
            let Ok(held) = taken else {
                sleep(Duration::from_millis(self.rng.u64(0..=20))).await;
                continue;
            };
            self.shared.granted.fetch_add(1, Ordering::Relaxed);
            let fences = workload::fences(&op, &held);
            let time = Duration::from_millis(self.rng.u64(0..=30));
            let work = workload::work(&fences, &self.shared.registers, &self.link, time);
            let release = self.rng.bool();
            if let Ok(((), held)) = held.run(work).await {
                match release {
                    true => drop(held.release().await),
                    false => drop(held),
                }
            }
        }
    }
}

tokio::task_local! {
    /// The request a caller's task asks for, while it asks.
    pub(crate) static ASKING: Asking;
}

/// A caller's request for a lock, while it asks.
pub(crate) struct Asking {
    /// Its process's backend: what a stall holds back too.
    backend: SimBackend,
    /// How long it stalled, in all.
    stalled: Cell<Duration>,
    /// When its wait ends.
    pub(crate) deadline: Instant,
}

/// Stalls callers at the engine's stall points as `stalls` says, drawn from `seed`: a stalled
/// process (a GC pause) also holds back its link, and its session, if it lives that long. How
/// many stalled.
pub(crate) fn stall_callers(stalls: Stalls, seed: u64) -> Rc<Cell<u64>> {
    let rng = RefCell::new(Rng::with_seed(seed));
    let count = Rc::new(Cell::new(0));
    let counted = count.clone();
    tower_lock::testing::stalls::on_stall(Some(move |_point| {
        let mut rng = rng.borrow_mut();
        if rng.f64() >= stalls.chance {
            return None;
        }
        let stall = Duration::from_millis(rng.u64(0..=stalls.longest.as_millis() as u64));
        let stalled = ASKING.try_with(|asking| {
            asking.backend.freeze(stall);
            asking.stalled.set(asking.stalled.get() + stall);
        });
        stalled.ok()?;
        counted.set(counted.get() + 1);
        Some(stall)
    }));
    count
}
