//! Waking waiters: each waiter in line watches only the key just before it in its lock's
//! queue (its predecessor), on one watch stream per backend — no herd, no polling.
//!
//! When the predecessor is deleted, its successor's waiter hears it through the waiting room:
//! if the predecessor held the lock when the watch was set and the waiter's place is a queued
//! ticket, nothing can be ahead any more (keys are only ever added behind), so the lock is the
//! waiter's and is announced as handed to it, with its key's create revision as the fence;
//! otherwise the waiter asks again (which finds and watches its new predecessor). A waiting
//! reader or permit holder, which has no place in line, watches the keys that keep it out
//! (the exclusive ones, or the other permits) and asks again when one of them goes.
//!
//! A waiter whose watch is set asks the store nothing when it asks again: the answer could
//! only have changed by the deletion its watch reports. A predecessor's watch starts when it
//! is created, so that its deletion is reported at once (a watch that starts in the past is
//! caught up by etcd's sync loop, up to 100 ms late); if the store changed between the read
//! and the watch, the predecessor is read again once the watch stands, and a deletion in
//! between is reported then. Prefix watches start at the revision they were read at.
//! When the stream fails, every waiter is woken to ask the store (which sets its watch again on
//! a new stream), and the names it waits for are confirmed live once the new stream is up.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use etcd_client::{
    EventType, KeyValue, WatchFilterType, WatchOptions, WatchRequestSender, WatchResponse,
    WatchResponseStream,
};
use futures_util::future::BoxFuture;
use tokio::sync::mpsc;

use super::EtcdLease;
use super::members::Members;
use super::session::Session;
use crate::backend::FencingToken;
use crate::backend::waiting::{Announcement, Subscriptions, WaitingRoom};
use crate::token::OwnerToken;

/// The backend's end of the watch stream.
#[derive(Debug)]
pub(super) struct Watches {
    shared: Arc<WatchedPredecessors>,
    commands: mpsc::UnboundedSender<Command>,
    serials: AtomicU64,
}

/// What the stream's task, the backend and the room's subscriptions share.
#[derive(Debug, Default)]
struct WatchedPredecessors {
    /// Waiters whose predecessor is watched (or about to be), by ticket.
    waiting: Mutex<HashMap<OwnerToken, PredecessorWatch>>,
    /// Lock names with waiters in this process.
    names: Mutex<HashSet<String>>,
    /// The stream failed and no new one is up yet.
    down: AtomicBool,
}

/// What a waiter watches, and what the deletion it waits for means.
#[derive(Debug)]
pub(super) struct Watch {
    /// The lock.
    pub(super) name: String,
    /// The waiter's ticket (its owner token).
    pub(super) ticket: OwnerToken,
    /// The key whose deletion it waits for — or, with `whole_prefix`, any key under it.
    pub(super) target: Vec<u8>,
    pub(super) whole_prefix: bool,
    /// The revision the target was read at: deletions after it are reported.
    pub(super) read_at: i64,
    /// A key of the waiter's own under `target`, whose deletion is not reported: a permit
    /// waiter's, which each of its attempts puts and, over the permits, deletes again. Its
    /// last watch, still standing, would otherwise wake it at once, every time.
    pub(super) own: Option<Vec<u8>>,
    /// The waiter's place in line, if it has one: asking again tells nothing new while the
    /// watch stands.
    pub(super) place: Option<EtcdLease>,
    /// The deletion hands the lock to the waiter's ticket (see the module docs).
    pub(super) hands_over: bool,
}

/// One waiter's watch, as the stream keeps it.
#[derive(Debug)]
struct PredecessorWatch {
    name: String,
    place: Option<EtcdLease>,
    hands_over: bool,
    own: Option<Vec<u8>>,
    /// A predecessor watched from its creation on: the key, and the revision it was read at.
    predecessor: Option<(Vec<u8>, i64)>,
    /// Which watch request this is, of all the stream's.
    serial: u64,
    /// The watch's id, once the cluster created it.
    id: Option<i64>,
}

#[derive(Debug)]
enum Command {
    Watch {
        ticket: OwnerToken,
        serial: u64,
        target: Vec<u8>,
        whole_prefix: bool,
        /// `None`: from the watch's creation on.
        from_revision: Option<i64>,
    },
    Cancel(i64),
}

impl Watches {
    /// Starts the stream's task (the stream itself opens with the first watch) and returns the
    /// waiting room it feeds.
    pub(super) fn start(members: Arc<Members>, session: Arc<Session>) -> (Self, Arc<WaitingRoom>) {
        let shared = Arc::new(WatchedPredecessors::default());
        let room = WaitingRoom::with_subscriptions(PredecessorWatchSubscriber(Arc::clone(&shared)));
        let (commands, queue) = mpsc::unbounded_channel();
        let stream = Stream {
            members,
            shared: Arc::clone(&shared),
            room: Arc::downgrade(&room),
            session,
            open: None,
            pending: VecDeque::new(),
            by_id: HashMap::new(),
            cancels: Vec::new(),
            gone: mpsc::unbounded_channel(),
        };
        tokio::spawn(stream.run(queue));
        let serials = AtomicU64::new(0);
        (
            Self {
                shared,
                commands,
                serials,
            },
            room,
        )
    }

    /// The place `ticket` holds in `name`'s line, while its watch stands: asking the store
    /// again would tell nothing new.
    pub(super) fn waiting(&self, name: &str, ticket: OwnerToken) -> Option<EtcdLease> {
        let waiting = self.shared.waiting();
        let entry = waiting.get(&ticket)?;
        entry.place.clone().filter(|_| entry.name == name)
    }

    /// Sets `watch` (replacing the ticket's earlier one).
    pub(super) fn watch(&self, watch: Watch) {
        let serial = self.serials.fetch_add(1, Ordering::Relaxed);
        let from_creation = !watch.whole_prefix;
        let waiting = PredecessorWatch {
            name: watch.name,
            place: watch.place,
            hands_over: watch.hands_over,
            own: watch.own,
            predecessor: from_creation.then(|| (watch.target.clone(), watch.read_at)),
            serial,
            id: None,
        };
        if let Some(earlier) = self.shared.waiting().insert(watch.ticket, waiting) {
            self.cancel(earlier.id);
        }
        let command = Command::Watch {
            ticket: watch.ticket,
            serial,
            target: watch.target,
            whole_prefix: watch.whole_prefix,
            from_revision: (!from_creation).then_some(watch.read_at + 1),
        };
        self.commands.send(command).ok();
    }

    /// `ticket`'s waiter left the queue (or took the lock): its watch goes.
    pub(super) fn forget(&self, ticket: OwnerToken) {
        let removed = self.shared.waiting().remove(&ticket);
        if let Some(waiting) = removed {
            self.cancel(waiting.id);
        }
    }

    fn cancel(&self, id: Option<i64>) {
        if let Some(id) = id {
            self.commands.send(Command::Cancel(id)).ok();
        }
    }
}

impl WatchedPredecessors {
    fn waiting(&self) -> MutexGuard<'_, HashMap<OwnerToken, PredecessorWatch>> {
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn names(&self) -> MutexGuard<'_, HashSet<String>> {
        self.names
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The stream's task: sets and cancels watches, and routes deletions to the room.
struct Stream {
    members: Arc<Members>,
    shared: Arc<WatchedPredecessors>,
    room: Weak<WaitingRoom>,
    session: Arc<Session>,
    /// The stream, and the member it is open on.
    open: Option<(WatchRequestSender, WatchResponseStream, usize)>,
    /// Watches asked for and not yet created, in the order asked: for which ticket, and
    /// which request.
    pending: VecDeque<(OwnerToken, u64)>,
    /// Tickets by watch id.
    by_id: HashMap<i64, OwnerToken>,
    /// Watches to cancel before the stream is read again.
    cancels: Vec<i64>,
    /// Predecessors found gone once their watch stood.
    gone: (mpsc::UnboundedSender<Gone>, mpsc::UnboundedReceiver<Gone>),
}

/// A predecessor found gone once its watch stood: whose ticket, which watch.
type Gone = (OwnerToken, u64);

impl Stream {
    async fn run(mut self, mut queue: mpsc::UnboundedReceiver<Command>) {
        loop {
            self.send_cancels().await;
            let gone = &mut self.gone.1;
            let answer = match &mut self.open {
                Some((_, answers, _)) => tokio::select! {
                    command = queue.recv() => Err(command),
                    answer = answers.message() => Ok(answer),
                    Some((ticket, serial)) = gone.recv() => {
                        self.predecessor_gone(ticket, serial);
                        continue;
                    }
                },
                None => Err(queue.recv().await),
            };
            match answer {
                Err(None) => return,
                Err(Some(command)) => self.command(command).await,
                Ok(Ok(Some(answer))) => self.answer(&answer),
                Ok(Ok(None) | Err(_)) => self.failed(),
            }
        }
    }

    async fn command(&mut self, command: Command) {
        match command {
            Command::Watch {
                ticket,
                serial,
                target,
                whole_prefix,
                from_revision,
            } => {
                let mut options = WatchOptions::new().with_filters([WatchFilterType::NoPut]);
                if let Some(from_revision) = from_revision {
                    options = options.with_start_revision(from_revision);
                }
                if whole_prefix {
                    options = options.with_prefix();
                }
                let sent = match &mut self.open {
                    Some((requests, ..)) => requests.watch(target, Some(options)).await.is_ok(),
                    None => self.open_with(target, options).await,
                };
                if sent {
                    self.pending.push_back((ticket, serial));
                } else {
                    self.failed();
                }
            }
            Command::Cancel(id) => {
                self.by_id.remove(&id);
                self.cancels.push(id);
            }
        }
    }

    fn answer(&mut self, answer: &WatchResponse) {
        let id = answer.watch_id();
        if answer.created() {
            let Some((ticket, serial)) = self.pending.pop_front() else {
                return;
            };
            let mut waiting = self.shared.waiting();
            match waiting.get_mut(&ticket) {
                Some(entry) if entry.serial == serial => {
                    entry.id = Some(id);
                    self.by_id.insert(id, ticket);
                    let created_at = answer.header().map_or(i64::MAX, |header| header.revision());
                    if let Some((key, read_at)) = &entry.predecessor
                        && created_at > *read_at
                    {
                        self.check_predecessor(ticket, serial, key.clone());
                    }
                }
                // Forgotten (or watched anew) before the cluster created it.
                _ => self.cancels.push(id),
            }
            return;
        }
        let own =
            (self.by_id.get(&id)).and_then(|ticket| self.shared.waiting().get(ticket)?.own.clone());
        let deleted = answer.events().iter().any(|event| {
            event.event_type() == EventType::Delete
                && event.kv().map(KeyValue::key) != own.as_deref()
        });
        if deleted || answer.canceled() {
            if let Some(ticket) = self.by_id.remove(&id) {
                self.wake(ticket, deleted);
            }
            if !answer.canceled() {
                self.cancels.push(id);
            }
        }
    }

    /// What `ticket`'s waiter watched is `deleted` (or its watch was cancelled by the
    /// cluster): tells the waiter.
    fn wake(&self, ticket: OwnerToken, deleted: bool) {
        let Some(waiting) = self.shared.waiting().remove(&ticket) else {
            return;
        };
        let Some(room) = self.room.upgrade() else {
            return;
        };
        let term = self.session.term();
        let handed = waiting.place.filter(|place| {
            deleted
                && waiting.hands_over
                && term.session == place.session
                && term.until >= tokio::time::Instant::now() + self.session.max_ttl()
        });
        let announcement = match handed {
            Some(place) => Announcement::Handed {
                to: ticket,
                fence: Some(FencingToken::new(place.fence())),
            },
            None => Announcement::Next(ticket),
        };
        room.announce(&waiting.name, announcement);
    }

    /// The store changed between the read of `ticket`'s predecessor `key` and its watch:
    /// reads it again, and reports it gone if it is.
    fn check_predecessor(&self, ticket: OwnerToken, serial: u64, key: Vec<u8>) {
        let (members, gone) = (Arc::clone(&self.members), self.gone.0.clone());
        tokio::spawn(async move {
            let read = |client: etcd_client::Client| {
                let key = key.clone();
                async move { client.kv_client().get(key, None).await }
            };
            // A failed read leaves the watch to report it.
            if let Ok(read) = members.call_idempotent(read).await.map(|read| read.answer)
                && read.kvs().is_empty()
            {
                gone.send((ticket, serial)).ok();
            }
        });
    }

    /// `ticket`'s predecessor was found gone once watch `serial` stood.
    fn predecessor_gone(&mut self, ticket: OwnerToken, serial: u64) {
        let id = match self.shared.waiting().get(&ticket) {
            Some(entry) if entry.serial == serial => entry.id,
            _ => return,
        };
        if let Some(id) = id {
            self.by_id.remove(&id);
            self.cancels.push(id);
        }
        self.wake(ticket, true);
    }

    /// Cancels the watches no waiter needs any more.
    async fn send_cancels(&mut self) {
        let cancels = std::mem::take(&mut self.cancels);
        if let Some((requests, ..)) = &mut self.open {
            for id in cancels {
                requests.cancel(id).await.ok();
            }
        }
    }

    /// The stream is up (again): the names waited for are live.
    fn reconnected(&self) {
        if !self.shared.down.swap(false, Ordering::SeqCst) {
            return;
        }
        let Some(room) = self.room.upgrade() else {
            return;
        };
        let names: Vec<String> = self.shared.names().iter().cloned().collect();
        for name in names {
            room.subscription_confirmed(&name);
        }
    }

    /// Opens a stream on the pinned member with its first watch; whether it opened.
    async fn open_with(&mut self, key: Vec<u8>, options: WatchOptions) -> bool {
        let (member, client) = self.members.pinned();
        match client.watch_client().watch(key, Some(options)).await {
            Ok(stream) => {
                let (requests, answers) = stream.split();
                self.open = Some((requests, answers, member));
                self.reconnected();
                true
            }
            Err(error) => {
                tracing::debug!(%error, "etcd watch stream: cannot open");
                self.members.failed(member);
                false
            }
        }
    }

    /// The stream failed: every watch is gone, and every waiter asks the store again.
    fn failed(&mut self) {
        if let Some((.., member)) = self.open.take() {
            self.members.failed(member);
        }
        self.pending.clear();
        self.by_id.clear();
        self.cancels.clear();
        self.shared.waiting().clear();
        self.shared.down.store(true, Ordering::SeqCst);
        if let Some(room) = self.room.upgrade() {
            room.disconnected();
        }
    }
}

/// The room's end: names come and go; watches are set per waiter by the backend.
#[derive(Debug)]
struct PredecessorWatchSubscriber(Arc<WatchedPredecessors>);

impl Subscriptions for PredecessorWatchSubscriber {
    fn subscribe(&mut self, name: &str) -> BoxFuture<'static, bool> {
        self.0.names().insert(name.to_owned());
        let live = !self.0.down.load(Ordering::SeqCst);
        Box::pin(async move { live })
    }

    fn unsubscribe(&mut self, name: &str) -> BoxFuture<'static, ()> {
        self.0.names().remove(name);
        Box::pin(async {})
    }
}
