//! Waking waiters: each waiter in line watches only the node just ahead of it (its
//! predecessor) — no herd, no polling. ZooKeeper sets a watch in the same request that reads
//! the node, so no deletion can slip between the read and the watch.
//!
//! When the predecessor is deleted, its successor's waiter hears it through the waiting room:
//! if nothing else was ahead of the waiter's place in line, nothing can be any more (the
//! server numbers nodes in creation order, so nodes are only ever added behind), so the lock is
//! the waiter's and is announced as handed to it, with its node's creation zxid as the fence;
//! otherwise the waiter asks again (which finds and watches its new predecessor). A waiting
//! reader or permit holder, which has no place in line, watches what keeps it out and asks
//! again when it goes.
//!
//! A waiter whose watch stands asks the store nothing when it asks again: the answer could only
//! have changed by the deletion its watch reports. When the client loses its connection, every
//! watch fires and every waiter asks the store again once it is back.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use futures_util::future::BoxFuture;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use zookeeper_client::{EventType, OneshotWatcher};

use super::ZookeeperLease;
use super::session::Session;
use crate::backend::FencingToken;
use crate::backend::waiting::{Announcement, Subscriptions, WaitingRoom};
use crate::token::OwnerToken;

/// The backend's waiters and their watches.
#[derive(Debug)]
pub(super) struct Watches {
    shared: Arc<WatchedNodes>,
    room: Weak<WaitingRoom>,
    session: Weak<Session>,
}

#[derive(Debug, Default)]
struct WatchedNodes {
    /// Waiters whose watch stands, by ticket.
    waiting: Mutex<HashMap<OwnerToken, NodeWatch>>,
    /// Places in line, by ticket: the node a queued waiter keeps while it waits.
    places: Mutex<HashMap<OwnerToken, ZookeeperLease>>,
    /// Lock names with waiters in this process.
    names: Mutex<HashSet<String>>,
    /// The client is connected: watches can be trusted.
    connected: Mutex<bool>,
    serials: AtomicU64,
}

/// What a waiter watches, and what its firing means.
#[derive(Debug)]
pub(super) struct Watch {
    /// The lock.
    pub(super) name: String,
    /// The waiter's ticket (its owner token).
    pub(super) ticket: OwnerToken,
    /// The waiter's place in line, if it has one.
    pub(super) place: Option<ZookeeperLease>,
    /// The deletion hands the lock to the waiter's ticket (see the module docs).
    pub(super) hands_over: bool,
    /// The watches the store set, at least one: the first to fire wakes the waiter.
    pub(super) watchers: Vec<OneshotWatcher>,
}

#[derive(Debug)]
struct NodeWatch {
    name: String,
    place: Option<ZookeeperLease>,
    serial: u64,
    /// Dropped when the waiter no longer needs the watch: its task removes it.
    _cancel: oneshot::Sender<()>,
}

impl Watches {
    /// The watches of a backend whose session is `session`, and the waiting room they feed.
    pub(super) fn start(session: &Arc<Session>) -> (Self, Arc<WaitingRoom>) {
        let shared = Arc::new(WatchedNodes {
            connected: Mutex::new(true),
            ..WatchedNodes::default()
        });
        let room = WaitingRoom::with_subscriptions(NodeWatchSubscriber(Arc::clone(&shared)));
        tokio::spawn(follow_connection(
            session.connection(),
            Arc::clone(&shared),
            Arc::downgrade(&room),
        ));
        let watches = Self {
            shared,
            room: Arc::downgrade(&room),
            session: Arc::downgrade(session),
        };
        (watches, room)
    }

    /// `ticket`'s place in `name`'s line while its watch stands: asking the store again would
    /// tell nothing new.
    pub(super) fn waiting(&self, name: &str, ticket: OwnerToken) -> Option<ZookeeperLease> {
        let waiting = self.shared.waiting();
        let entry = waiting.get(&ticket)?;
        entry.place.clone().filter(|_| entry.name == name)
    }

    /// `ticket`'s place in line, if it took one.
    pub(super) fn place(&self, ticket: OwnerToken) -> Option<ZookeeperLease> {
        self.shared.places().get(&ticket).cloned()
    }

    /// `ticket` took `place` in line.
    pub(super) fn took_place(&self, ticket: OwnerToken, place: ZookeeperLease) {
        self.shared.places().insert(ticket, place);
    }

    /// Sets `watch` (replacing the ticket's earlier one); its firing is announced to the room.
    /// Without a watcher, the waiter is woken at once.
    pub(super) fn watch(&self, watch: Watch) {
        if watch.watchers.is_empty() {
            self.wake(&watch.name, watch.ticket);
            return;
        }
        let serial = self.shared.serials.fetch_add(1, Ordering::Relaxed);
        let (cancel, cancelled) = oneshot::channel();
        let waiting = NodeWatch {
            name: watch.name.clone(),
            place: watch.place.clone(),
            serial,
            _cancel: cancel,
        };
        self.shared.waiting().insert(watch.ticket, waiting);
        let fired = Fired {
            shared: Arc::downgrade(&self.shared),
            room: self.room.clone(),
            session: self.session.clone(),
            serial,
            name: watch.name,
            ticket: watch.ticket,
            place: watch.place,
            hands_over: watch.hands_over,
        };
        let changed = (watch.watchers.into_iter()).map(|watcher| Box::pin(watcher.changed()));
        let changed = futures_util::future::select_all(changed);
        tokio::spawn(async move {
            tokio::select! {
                (event, _, _) = changed => {
                    fired.announce(event.event_type == EventType::NodeDeleted);
                }
                _ = cancelled => {}
            }
        });
    }

    /// What `ticket`'s waiter for `name` waits for has happened already: it asks again.
    pub(super) fn wake(&self, name: &str, ticket: OwnerToken) {
        if let Some(room) = self.room.upgrade() {
            room.announce(name, Announcement::Next(ticket));
        }
    }

    /// The place at `path` was released (its lock handed to it and taken): it goes.
    pub(super) fn forget_place(&self, path: &str) {
        self.shared.places().retain(|_, place| place.path != path);
    }

    /// `ticket`'s waiter left the line or took the lock: its watch and its place go.
    pub(super) fn forget(&self, ticket: OwnerToken) {
        self.shared.waiting().remove(&ticket);
        self.shared.places().remove(&ticket);
    }
}

impl WatchedNodes {
    fn waiting(&self) -> MutexGuard<'_, HashMap<OwnerToken, NodeWatch>> {
        lock(&self.waiting)
    }

    fn places(&self) -> MutexGuard<'_, HashMap<OwnerToken, ZookeeperLease>> {
        lock(&self.places)
    }

    fn names(&self) -> MutexGuard<'_, HashSet<String>> {
        lock(&self.names)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update leaves the data consistent between statements.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What a watch's task needs to announce its firing.
struct Fired {
    shared: Weak<WatchedNodes>,
    room: Weak<WaitingRoom>,
    session: Weak<Session>,
    serial: u64,
    name: String,
    ticket: OwnerToken,
    place: Option<ZookeeperLease>,
    hands_over: bool,
}

impl Fired {
    /// The watched node was `deleted` (or the connection changed): tells the waiter.
    fn announce(self, deleted: bool) {
        let (Some(shared), Some(room), Some(session)) = (
            self.shared.upgrade(),
            self.room.upgrade(),
            self.session.upgrade(),
        ) else {
            return;
        };
        {
            let mut waiting = shared.waiting();
            match waiting.get(&self.ticket) {
                Some(entry) if entry.serial == self.serial => waiting.remove(&self.ticket),
                _ => return,
            };
        }
        let term = session.term();
        let handed = self.place.filter(|place| {
            deleted
                && self.hands_over
                && term.session == place.session
                && term.until >= Instant::now() + session.max_ttl()
        });
        // A handed place is kept until its lock is released: the waiter may ask again before
        // it hears this, and must then find the place that holds the lock.
        let announcement = match handed {
            Some(place) => Announcement::Handed {
                to: self.ticket,
                fence: Some(FencingToken::new(place.fence())),
            },
            None => Announcement::Next(self.ticket),
        };
        room.announce(&self.name, announcement);
    }
}

/// Tells the room when the connection goes (waiters then retry on timers) and when it is back
/// (the names waited for are live again).
async fn follow_connection(
    mut connection: watch::Receiver<bool>,
    shared: Arc<WatchedNodes>,
    room: Weak<WaitingRoom>,
) {
    while connection.changed().await.is_ok() {
        let connected = *connection.borrow_and_update();
        let was = std::mem::replace(&mut *lock(&shared.connected), connected);
        let Some(room) = room.upgrade() else {
            return;
        };
        if was && !connected {
            room.disconnected();
        } else if !was && connected {
            let names: Vec<String> = shared.names().iter().cloned().collect();
            for name in names {
                room.subscription_confirmed(&name);
            }
        }
    }
}

/// The room's end: names come and go; watches are set per waiter by the backend.
#[derive(Debug)]
struct NodeWatchSubscriber(Arc<WatchedNodes>);

impl Subscriptions for NodeWatchSubscriber {
    fn subscribe(&mut self, name: &str) -> BoxFuture<'static, bool> {
        self.0.names().insert(name.to_owned());
        let live = *lock(&self.0.connected);
        Box::pin(async move { live })
    }

    fn unsubscribe(&mut self, name: &str) -> BoxFuture<'static, ()> {
        self.0.names().remove(name);
        Box::pin(async {})
    }
}
