//! Points in the engine where a simulation may stall the task that reaches one (feature
//! `simulation`), as a GC pause or a descheduled thread stalls a real process there: the
//! simulator draws, at each, whether and for how long.
//!
//! The points: `granted`, after the store's answer granted a lock and before the holder has it
//! in hand — stalled past its lease, a holder takes a lock another may hold by then, and must
//! learn at once that its lease is gone; `busy`, after a busy answer in a wait — a waiter
//! stalled there misses what the store does meanwhile (a lock handed to its ticket, lapsed).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

type Hook = Rc<dyn Fn(&'static str) -> Option<Duration>>;

thread_local! {
    static HOOK: RefCell<Option<Hook>> = const { RefCell::new(None) };
}

/// Asks `hook`, at every stall point a task of this thread reaches from now on, how long to
/// stall there (`None`: not at all); `None` for no hook.
pub fn on_stall(hook: Option<impl Fn(&'static str) -> Option<Duration> + 'static>) {
    let hook = hook.map(|hook| Rc::new(hook) as Hook);
    HOOK.with(|current| *current.borrow_mut() = hook);
}

/// Stalls at `point` as long as this thread's hook says.
pub(crate) async fn at(point: &'static str) {
    if let Some(stall) = stall_for(point) {
        tokio::time::sleep(stall).await;
    }
}

fn stall_for(point: &'static str) -> Option<Duration> {
    let hook = HOOK.with(|current| current.borrow().clone())?;
    hook(point)
}
