//! Where waiters for busy locks wait: one local queue per lock name, woken by release
//! announcements instead of polling.
//!
//! A backend that can announce releases owns a [`WaitingRoom`] (shared by its clones), feeds
//! it what the store announces ([`WaitingRoom::announce`]) and offers it through its
//! [`WaitQueue`](super::WaitQueue). The engine's waiters wait in it:
//!
//! * Inside one process, waiters for the same lock line up in arrival order and only the head
//!   of the line contends in the store; when it gets the lock, the next one becomes head. So N
//!   local waiters cost O(1) store commands per handoff, not O(N). A backend may go further
//!   (`local.rs`, the SQL backends): while a waiter of the line holds the lock, its release
//!   hands the lock to the head and wakes it here, and the head asks the store nothing.
//! * The head sleeps until a release of its lock is announced or until the holder's lease runs
//!   out, whichever comes first: a lost announcement costs at most one lease-bounded retry.
//! * The store keeps a queue of tickets per lock, and a release goes to the first ticket: only
//!   the waiter holding it is woken, and only it may take the lock — or already holds it, when
//!   the store handed the lock over in the release itself. In fair mode every waiter holds a
//!   ticket; in notified mode the head of each process's line does, so processes take turns.
//! * Announcements reach the room through a subscription per lock name (Redis pub/sub,
//!   PostgreSQL `LISTEN`), made when the first waiter arrives and dropped a while after the
//!   last one leaves. Until the store confirms it, and after a disconnection, waiters retry on
//!   timers.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use super::{BoxFuture, FencingToken};
use crate::{OwnerToken, background};

mod announcement;
#[cfg(any(feature = "postgres", feature = "mysql", test))]
mod local;
mod place;

pub use announcement::Announcement;
#[cfg(any(feature = "postgres", feature = "mysql", test))]
use local::Handoffs;
#[cfg(any(feature = "postgres", feature = "mysql", test))]
pub(crate) use local::ReadyHead;
use place::Member;
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
    next_id: AtomicU64,
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
    /// Local waiters in arrival order, with their owner tokens; the front one contends in the
    /// store.
    line: VecDeque<(u64, OwnerToken, Arc<Notify>)>,
    /// The head of the line holds a ticket in the store's queue: announcements naming other
    /// tickets need not wake it (it is named when its turn comes).
    head_enqueued: bool,
    /// Release announcements for the head (a stored permit is not lost between attempts).
    released: Arc<Notify>,
    /// Waiters with tickets of their own, by ticket.
    tickets: HashMap<OwnerToken, Arc<Notify>>,
    subscription: Subscription,
    /// Bumped whenever the last member leaves, so a lingering cleanup knows it is stale.
    generation: u64,
    /// The last ticket a release handed the lock to, with its fence, until its waiter hears;
    /// and when the handing write was sent, if it was sent from this process.
    handed: Option<Handed>,
    /// What releases in this process may hand over to the line (`local.rs`).
    #[cfg(any(feature = "postgres", feature = "mysql", test))]
    handoffs: Handoffs,
}

/// A lock a release handed to a ticket: to whom, with what fence, and when the handing write
/// was sent (when it was sent from this process).
#[derive(Clone, Copy, Debug)]
struct Handed {
    to: OwnerToken,
    fence: Option<FencingToken>,
    sent: Option<Instant>,
}

impl Waiters {
    fn new(subscription: Subscription) -> Self {
        Self {
            line: VecDeque::new(),
            head_enqueued: false,
            released: Arc::new(Notify::new()),
            tickets: HashMap::new(),
            subscription,
            generation: 0,
            handed: None,
            #[cfg(any(feature = "postgres", feature = "mysql", test))]
            handoffs: Handoffs::default(),
        }
    }

    fn members(&self) -> usize {
        self.line.len() + self.tickets.len()
    }

    fn wake_everyone(&self) {
        self.released.notify_one();
        for ticket in self.tickets.values() {
            ticket.notify_one();
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
            next_id: AtomicU64::new(0),
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

    /// Whether any waiter of this process waits for `name` now (in line or with a ticket): a
    /// backend may then announce a release without asking the store whether anybody waits.
    pub fn has_waiters(&self, name: &str) -> bool {
        self.names()
            .get(name)
            .is_some_and(|waiters| waiters.members() > 0)
    }

    /// Lock `name` was released: wakes whoever it concerns.
    ///
    /// A named ticket's holder is woken; so is the head of the line when it holds no ticket
    /// yet, so that it takes one instead of sleeping through the other processes' turns.
    pub fn announce(&self, name: &str, announcement: Announcement) {
        let mut names = self.names();
        let Some(waiters) = names.get_mut(name) else {
            return;
        };
        let next = match announcement {
            Announcement::Free => {
                waiters.wake_everyone();
                return;
            }
            Announcement::Next(next) => next,
            Announcement::Handed { to, fence } => {
                waiters.handed = Some(Handed {
                    to,
                    fence,
                    sent: None,
                });
                to
            }
        };
        if let Some(ticket) = waiters.tickets.get(&next) {
            ticket.notify_one();
        } else if waiters
            .line
            .front()
            .is_some_and(|(_, head, _)| *head == next || !waiters.head_enqueued)
        {
            waiters.released.notify_one();
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
            waiters.wake_everyone();
        }
    }

    /// The announcement connection dropped: every waiter falls back to timed retries (and is
    /// woken now to retry) until its subscription is confirmed again.
    pub fn disconnected(&self) {
        for waiters in self.names().values_mut() {
            waiters.subscription = Subscription::Pending;
            waiters.wake_everyone();
        }
    }

    fn names(&self) -> MutexGuard<'_, HashMap<String, Waiters>> {
        // Every update below leaves the map consistent between statements.
        self.names
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Joins the local line for `name`, as the waiter owning `token`.
    pub(crate) fn join_line(self: &Arc<Self>, name: &str, token: OwnerToken) -> Place {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let turn = Arc::new(Notify::new());
        let released = self.enter(name, |waiters| {
            waiters.line.push_back((id, token, turn.clone()));
        });
        Place {
            room: Arc::clone(self),
            name: name.to_owned(),
            member: Member::InLine { id, turn },
            released,
        }
    }

    /// Registers a waiter holding `ticket` for `name`, woken when its ticket is named (or the
    /// lock announced free to anybody).
    pub(crate) fn take_ticket(self: &Arc<Self>, name: &str, ticket: OwnerToken) -> Place {
        let notify = Arc::new(Notify::new());
        self.enter(name, |waiters| {
            waiters.tickets.insert(ticket, notify.clone());
        });
        Place {
            room: Arc::clone(self),
            name: name.to_owned(),
            member: Member::Ticket(ticket),
            released: notify,
        }
    }

    /// Whether local waiters are lined up for `name`: a newcomer joins them instead of
    /// jumping the line.
    pub(crate) fn has_line(&self, name: &str) -> bool {
        self.names()
            .get(name)
            .is_some_and(|waiters| !waiters.line.is_empty())
    }

    /// Adds a member to `name`'s waiters, creating them (and subscribing) for the first one.
    fn enter(&self, name: &str, add: impl FnOnce(&mut Waiters)) -> Arc<Notify> {
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
        add(waiters);
        waiters.released.clone()
    }

    fn leave(self: &Arc<Self>, name: &str, member: &Member) {
        let mut names = self.names();
        let Some(waiters) = names.get_mut(name) else {
            return;
        };
        match member {
            Member::InLine { id, .. } => {
                let was_head = waiters.line.front().is_some_and(|(head, ..)| head == id);
                waiters.line.retain(|(other, ..)| other != id);
                if was_head {
                    waiters.head_enqueued = false;
                    #[cfg(any(feature = "postgres", feature = "mysql", test))]
                    {
                        waiters.handoffs.ready = None;
                    }
                    if let Some((.., next)) = waiters.line.front() {
                        next.notify_one();
                    }
                }
            }
            Member::Ticket(ticket) => {
                waiters.tickets.remove(ticket);
            }
        }
        if waiters.members() > 0 {
            return;
        }
        #[cfg(any(feature = "postgres", feature = "mysql", test))]
        {
            waiters.handoffs.local = None;
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

    /// The fence of the lock a release handed to `token`, and when the handing write was sent
    /// if this process sent it; once (`None` if it was not handed).
    fn take_handed(
        &self,
        name: &str,
        token: OwnerToken,
    ) -> Option<(Option<FencingToken>, Option<Instant>)> {
        let mut names = self.names();
        let handed = &mut names.get_mut(name)?.handed;
        handed
            .take_if(|handed| handed.to == token)
            .map(|handed| (handed.fence, handed.sent))
    }

    /// `id`, heading its line, holds a ticket in the store's queue.
    fn head_enqueued(&self, name: &str, id: u64) {
        if let Some(waiters) = self.names().get_mut(name)
            && waiters.line.front().is_some_and(|(head, ..)| *head == id)
        {
            waiters.head_enqueued = true;
        }
    }

    fn is_head(&self, name: &str, id: u64) -> bool {
        self.names()
            .get(name)
            .is_some_and(|waiters| waiters.line.front().is_some_and(|(head, ..)| *head == id))
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
        .is_some_and(|waiters| waiters.members() == 0 && waiters.generation == generation);
    if idle {
        names.remove(name);
        if let Delivery::Subscribed(commands) = &room.delivery {
            commands.send(Command::Unsubscribe(name.to_owned())).ok();
        }
    }
}

#[cfg(test)]
mod tests;
