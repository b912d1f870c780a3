//! Where waiters for busy locks hear that a lock may be free: release announcements instead of
//! polling, per lock name and waiter.
//!
//! A backend that can announce releases owns a [`WaitingRoom`] (shared by its clones), feeds
//! it what the store announces ([`WaitingRoom::announce`]) and offers it through its
//! [`WaitQueue`](super::WaitQueue). The engine decides who waits how — its per-process line
//! lets one task per lock ask the store at a time, and hands a lock on within the process —
//! and registers each waiter that asks the store here, by its owner token (its *ticket*):
//!
//! * A waiter sleeps until a release of its lock is announced or until the holder's lease runs
//!   out, whichever comes first: a lost announcement costs at most one lease-bounded retry.
//! * The store keeps a queue of tickets per lock, and a release goes to the first ticket: only
//!   the waiter holding it is woken, and only it may take the lock — or already holds it, when
//!   the store handed the lock over in the release itself. A process's head of line (the one
//!   task of a locker that asks the store) is also woken by announcements naming others until
//!   its ticket is in the store's queue, so that it takes one.
//! * Announcements reach the room through a subscription per lock name (Redis pub/sub,
//!   PostgreSQL `LISTEN`), made when the first waiter arrives and dropped a while after the
//!   last one leaves. Until the store confirms it, and after a disconnection, waiters retry on
//!   timers. A silent room (a store that cannot announce) hears only what the backend
//!   announces from releases in this process.
//! * A waiter that polls leaves no mark in the store, so no release it waits for is announced:
//!   it asks again after its backoff, or when the engine tells the room that this process
//!   released the lock.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::{Notify, mpsc};

use super::FencingToken;
use crate::background;
use crate::token::OwnerToken;

mod announcement;
mod place;

pub use announcement::Announcement;
pub(crate) use place::Place;

/// How long a lock name's subscription outlives its last waiter, so that a burst of
/// contention does not subscribe and unsubscribe on every handoff.
const LINGER: Duration = Duration::from_secs(2);

/// Subscribes to and unsubscribes from the release announcements of one lock name in the
/// store. The room calls these one at a time, in order, on one task of its own.
pub trait Subscriptions: Send + 'static {
    /// Starts delivering `name`'s announcements to the room; resolves to whether the store
    /// confirmed it (then waiters trust announcements and sleep until one arrives).
    fn subscribe(&mut self, name: &str) -> BoxFuture<'static, bool>;

    /// Stops delivering `name`'s announcements.
    fn unsubscribe(&mut self, name: &str) -> BoxFuture<'static, ()>;
}

/// The waiting room of one backend: local queues per lock name, and release announcements.
///
/// # Example
///
/// A backend whose releases are seen in this process (as the memory backend's are) announces
/// them itself:
///
/// ```
/// use tower_lock::backend::waiting::{Announcement, WaitingRoom};
///
/// let room = WaitingRoom::in_process();
/// // ... on every release of lock `name`:
/// room.announce("lock:coupon:42", Announcement::Free);
/// assert!(!room.has_waiters("lock:coupon:42"));
/// ```
#[derive(Debug)]
pub struct WaitingRoom {
    names: Mutex<HashMap<String, Waiters>>,
    delivery: Delivery,
}

/// How announcements reach the room.
#[derive(Debug)]
enum Delivery {
    /// Directly, from releases in this process: always live.
    InProcess,
    /// Through a subscription per name, made by the room's task on these commands.
    Subscribed(mpsc::UnboundedSender<Command>),
    /// Never: waiters wait on timers.
    Silent,
}

#[derive(Debug)]
enum Command {
    Subscribe(String),
    Unsubscribe(String),
}

/// Whether release announcements for a name reach this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Subscription {
    /// Being set up, or the connection is down: waiters retry on timers.
    Pending,
    /// Confirmed: waiters may sleep until announced.
    Live,
}

#[derive(Debug)]
struct Waiters {
    /// The waiters, by ticket.
    /// In token order: a release wakes them in an order a seed decides (a simulation replays).
    tickets: BTreeMap<OwnerToken, Waiter>,
    subscription: Subscription,
    /// Bumped whenever the last waiter leaves, so a lingering cleanup knows it is stale.
    generation: u64,
    /// The last ticket a release handed the lock to, with its fence, until its waiter hears.
    handed: Option<(OwnerToken, Option<FencingToken>)>,
}

/// One waiter: how it is woken, and by what.
#[derive(Debug)]
struct Waiter {
    wake: Arc<Notify>,
    wakes: Wakes,
}

/// What wakes a waiter besides an announcement naming its ticket, or the lock free to anybody.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wakes {
    /// Nothing else.
    Named,
    /// A process's head of line whose ticket is not in the store's wait queue yet: any
    /// announcement, so that it asks (and takes its place) at once.
    Head,
    /// A waiter that polls: its busy answers leave no mark, so the store announces no release
    /// it waits for. Only this process's releases wake it ([`WaitingRoom::released_here`]);
    /// it asks again after its backoff otherwise.
    Polling,
}

impl Waiters {
    fn new(subscription: Subscription) -> Self {
        Self {
            tickets: BTreeMap::new(),
            subscription,
            generation: 0,
            handed: None,
        }
    }

    /// Wakes every waiter that listens to announcements: one that polls asks again on its own.
    fn wake_listeners(&self) {
        for waiter in self.tickets.values() {
            if waiter.wakes != Wakes::Polling {
                waiter.wake.notify_one();
            }
        }
    }
}

impl WaitingRoom {
    /// A room for a backend whose releases happen in this process (or reach it without a
    /// subscription step): announcements are always live.
    pub fn in_process() -> Arc<Self> {
        Self::with_delivery(Delivery::InProcess)
    }

    /// A room that hears no announcements, for a backend that queues waiters but cannot tell
    /// them of releases: its waiters wait on timers (backoff), in order all the same.
    pub fn silent() -> Arc<Self> {
        Self::with_delivery(Delivery::Silent)
    }

    fn with_delivery(delivery: Delivery) -> Arc<Self> {
        Arc::new(Self {
            names: Mutex::default(),
            delivery,
        })
    }

    /// A room whose announcements arrive through `subscriptions` (e.g. Redis pub/sub): the
    /// first waiter for a name subscribes to it, and the subscription is dropped a while after
    /// the last one left. The commands run in order on one task, spawned here (so call this
    /// inside a Tokio runtime), which ends when the room is dropped.
    pub fn with_subscriptions(mut subscriptions: impl Subscriptions) -> Arc<Self> {
        let (commands, mut queue) = mpsc::unbounded_channel();
        let room = Self::with_delivery(Delivery::Subscribed(commands));
        let weak = Arc::downgrade(&room);
        tokio::spawn(async move {
            while let Some(command) = queue.recv().await {
                match command {
                    Command::Subscribe(name) => {
                        let live = subscriptions.subscribe(&name).await;
                        match weak.upgrade() {
                            Some(room) if live => room.subscription_confirmed(&name),
                            Some(_) => {}
                            None => return,
                        }
                    }
                    Command::Unsubscribe(name) => subscriptions.unsubscribe(&name).await,
                }
            }
        });
        room
    }

    /// Whether releases are announced to this room at all (a [`silent`](Self::silent) room's
    /// waiters poll, so they need not mark locks as waited for).
    pub fn hears_announcements(&self) -> bool {
        !matches!(self.delivery, Delivery::Silent)
    }

    /// How many lock names have waiters (or a lingering subscription) right now. For metrics,
    /// and for tests that show nothing is left behind.
    pub fn waiting_names(&self) -> usize {
        self.names().len()
    }

    /// Whether any waiter of this process waits for `name` now: a backend may then announce a
    /// release without asking the store whether anybody waits.
    pub fn has_waiters(&self, name: &str) -> bool {
        self.names()
            .get(name)
            .is_some_and(|waiters| !waiters.tickets.is_empty())
    }

    /// Lock `name` was released: wakes whoever it concerns.
    ///
    /// A named ticket's holder is woken; so is every head of line whose ticket is not in the
    /// store's wait queue yet, so that it takes a place instead of sleeping through the other
    /// processes' turns. Waiters that poll are not: only the engine's word that this process
    /// released the lock wakes them.
    pub fn announce(&self, name: &str, announcement: Announcement) {
        let mut names = self.names();
        let Some(waiters) = names.get_mut(name) else {
            return;
        };
        let next = match announcement {
            Announcement::Free => {
                waiters.wake_listeners();
                return;
            }
            Announcement::Next(next) => next,
            Announcement::Handed { to, fence } => {
                waiters.handed = Some((to, fence));
                to
            }
        };
        for (ticket, waiter) in &waiters.tickets {
            if *ticket == next || waiter.wakes == Wakes::Head {
                waiter.wake.notify_one();
            }
        }
    }

    /// This process released lock `name` in the store: wakes its waiters that poll, which no
    /// announcement reaches (the engine tells the room of every release it makes).
    pub(crate) fn released_here(&self, name: &str) {
        let names = self.names();
        let Some(waiters) = names.get(name) else {
            return;
        };
        for waiter in waiters.tickets.values() {
            if waiter.wakes == Wakes::Polling {
                waiter.wake.notify_one();
            }
        }
    }

    /// The store confirmed (again) that announcements for `name` reach this room.
    pub fn subscription_confirmed(&self, name: &str) {
        let mut names = self.names();
        let Some(waiters) = names.get_mut(name) else {
            return;
        };
        if waiters.subscription == Subscription::Pending {
            waiters.subscription = Subscription::Live;
            // Anything announced while we were not listening is lost: look again.
            waiters.wake_listeners();
        }
    }

    /// The store dropped `name`'s subscription by itself (Redis Cluster does, when the lock's
    /// hash slot moves to another node): while the room still wants `name`'s announcements,
    /// its waiters fall back to timed retries (woken now to retry) and the room subscribes
    /// again.
    pub fn subscription_lost(&self, name: &str) {
        let mut names = self.names();
        let Some(waiters) = names.get_mut(name) else {
            return;
        };
        waiters.subscription = Subscription::Pending;
        waiters.wake_listeners();
        if let Delivery::Subscribed(commands) = &self.delivery {
            commands.send(Command::Subscribe(name.to_owned())).ok();
        }
    }

    /// The backend subscribes on another connection now (its store named another server, a
    /// failover): every name's subscription is made again there, its waiters on timed retries
    /// (woken now) until it is confirmed.
    pub fn subscribe_again(&self) {
        let names: Vec<String> = self.names().keys().cloned().collect();
        for name in names {
            self.subscription_lost(&name);
        }
    }

    /// The announcement connection dropped: every waiter falls back to timed retries (and is
    /// woken now to retry) until its subscription is confirmed again.
    pub fn disconnected(&self) {
        for waiters in self.names().values_mut() {
            waiters.subscription = Subscription::Pending;
            waiters.wake_listeners();
        }
    }

    fn names(&self) -> MutexGuard<'_, HashMap<String, Waiters>> {
        // Every update below leaves the map consistent between statements.
        self.names
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a waiter holding `ticket` for `name`, woken when its ticket is named (or the
    /// lock announced free to anybody), and by what else it `wakes` by — a head of line until
    /// it is [`enqueued`](Place::enqueued).
    pub(crate) fn take_ticket(
        self: &Arc<Self>,
        name: &str,
        ticket: OwnerToken,
        wakes: Wakes,
    ) -> Place {
        let wake = Arc::new(Notify::new());
        let waiter = Waiter {
            wake: Arc::clone(&wake),
            wakes,
        };
        self.enter(name, ticket, waiter);
        Place {
            room: Arc::clone(self),
            name: name.to_owned(),
            ticket,
            wake,
        }
    }

    /// Adds a waiter to `name`'s, creating them (and subscribing) for the first one.
    fn enter(&self, name: &str, ticket: OwnerToken, waiter: Waiter) {
        let mut names = self.names();
        let waiters = names.entry(name.to_owned()).or_insert_with(|| {
            let subscription = match &self.delivery {
                Delivery::Subscribed(commands) => {
                    commands.send(Command::Subscribe(name.to_owned())).ok();
                    Subscription::Pending
                }
                Delivery::InProcess => Subscription::Live,
                Delivery::Silent => Subscription::Pending,
            };
            Waiters::new(subscription)
        });
        waiters.tickets.insert(ticket, waiter);
    }

    fn leave(self: &Arc<Self>, name: &str, ticket: OwnerToken) {
        let mut names = self.names();
        let Some(waiters) = names.get_mut(name) else {
            return;
        };
        waiters.tickets.remove(&ticket);
        if !waiters.tickets.is_empty() {
            return;
        }
        waiters.generation += 1;
        let generation = waiters.generation;
        drop(names);
        let (room, name) = (Arc::downgrade(self), name.to_owned());
        background::spawn("forget an idle waiting line", async move {
            tokio::time::sleep(LINGER).await;
            forget_if_idle(&room, &name, generation);
        });
    }

    /// The fence of the lock a release handed to `ticket`; once (`None` if it was not handed).
    fn take_handed(&self, name: &str, ticket: OwnerToken) -> Option<Option<FencingToken>> {
        let mut names = self.names();
        let handed = &mut names.get_mut(name)?.handed;
        handed
            .take_if(|(to, _)| *to == ticket)
            .map(|(_, fence)| fence)
    }

    /// `ticket`'s place is in the store's queue: announcements naming others need not wake it.
    fn enqueued(&self, name: &str, ticket: OwnerToken) {
        if let Some(waiter) = (self.names().get_mut(name)).and_then(|w| w.tickets.get_mut(&ticket))
            && waiter.wakes == Wakes::Head
        {
            waiter.wakes = Wakes::Named;
        }
    }

    fn is_live(&self, name: &str) -> bool {
        self.names()
            .get(name)
            .is_some_and(|waiters| waiters.subscription == Subscription::Live)
    }
}

/// Drops `name`'s waiters if nobody joined since `generation`, and unsubscribes.
fn forget_if_idle(room: &Weak<WaitingRoom>, name: &str, generation: u64) {
    let Some(room) = room.upgrade() else {
        return;
    };
    let mut names = room.names();
    let idle = names
        .get(name)
        .is_some_and(|waiters| waiters.tickets.is_empty() && waiters.generation == generation);
    if idle {
        names.remove(name);
        if let Delivery::Subscribed(commands) = &room.delivery {
            commands.send(Command::Unsubscribe(name.to_owned())).ok();
        }
    }
}

#[cfg(test)]
mod tests;
