//! Where waiters for busy locks wait: one local queue per lock name, woken by release
//! announcements instead of polling.
//!
//! Inside one process, waiters for the same lock line up in arrival order and only the head
//! of the line contends in the store; when it gets the lock, the next one becomes head. So N
//! local waiters cost O(1) store commands per handoff, not O(N). The head sleeps until a
//! release of its lock is announced (a Redis `PUBLISH` from the release script, routed here by
//! the backend's one subscriber connection) or until the holder's lease runs out, whichever
//! comes first: a lost announcement costs at most one lease-bounded retry.
//!
//! The store keeps a queue of tickets per lock, and a release goes to the first ticket: only
//! the waiter holding it is woken, and only it may take the lock — or already holds it, when
//! the store handed the lock over in the release itself. In fair mode every waiter
//! holds a ticket; in notified mode the head of each process's line does, so processes take
//! turns instead of the busiest one winning every race.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};

use crate::OwnerToken;

/// How long a lock name's subscription outlives its last waiter, so that a burst of
/// contention does not subscribe and unsubscribe on every handoff.
const LINGER: Duration = Duration::from_secs(2);

/// A boxed future, for the subscription commands a backend sends.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Subscribes to and unsubscribes from release announcements of one lock name in the store.
pub(crate) trait Subscriptions: Send + 'static {
    fn subscribe(&mut self, name: &str) -> BoxFuture<bool>;
    fn unsubscribe(&mut self, name: &str) -> BoxFuture<()>;
}

/// The waiting room of one backend: local queues per lock name, and release announcements.
///
/// Backends that can announce releases own one and return it from
/// [`LockBackend::waiting_room`](crate::LockBackend::waiting_room); the layer's waiters use it.
/// Clones of a backend share it.
#[derive(Debug)]
pub struct WaitingRoom {
    names: Mutex<HashMap<String, Waiters>>,
    commands: Option<mpsc::UnboundedSender<Command>>,
    next_id: AtomicU64,
}

/// What a release announcement says about the lock's next holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Announcement {
    /// Anybody may take it.
    Free,
    /// Only the waiter holding this ticket may take it.
    Next(OwnerToken),
    /// The release handed it to this ticket, with this fence: its waiter holds it.
    Handed { to: OwnerToken, fence: u64 },
}

impl From<Option<OwnerToken>> for Announcement {
    /// The first ticket of the lock's queue, if it has one.
    fn from(next: Option<OwnerToken>) -> Self {
        next.map_or(Self::Free, Self::Next)
    }
}

impl Announcement {
    /// Reads a release announcement's message: `''`, `'<ticket>'` or `'<ticket> <fence>'`.
    /// `None` when it is none of these.
    pub(crate) fn parse(message: &str) -> Option<Self> {
        match message.split_once(' ') {
            None if message.is_empty() => Some(Self::Free),
            None => OwnerToken::parse(message).map(Self::Next),
            Some((to, fence)) => Some(Self::Handed {
                to: OwnerToken::parse(to)?,
                fence: fence.parse().ok()?,
            }),
        }
    }
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
    /// Fair-mode waiters by ticket.
    tickets: HashMap<OwnerToken, Arc<Notify>>,
    subscription: Subscription,
    /// Bumped whenever the last member leaves, so a lingering cleanup knows it is stale.
    generation: u64,
    /// The last ticket a release handed the lock to, with its fence, until its waiter hears.
    handed: Option<(OwnerToken, u64)>,
}

impl Waiters {
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
    /// A room for an in-process backend: releases are announced locally, always live.
    pub(crate) fn local() -> Arc<Self> {
        Arc::new(Self {
            names: Mutex::default(),
            commands: None,
            next_id: AtomicU64::new(0),
        })
    }

    /// A room whose announcements arrive through `subscriptions` (e.g. Redis pub/sub). The
    /// commands run in order on one task, which ends when the room is dropped.
    pub(crate) fn remote(mut subscriptions: impl Subscriptions) -> Arc<Self> {
        let (commands, mut queue) = mpsc::unbounded_channel();
        let room = Arc::new(Self {
            names: Mutex::default(),
            commands: Some(commands),
            next_id: AtomicU64::new(0),
        });
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

    /// How many lock names have waiters (or a lingering subscription) right now. For metrics,
    /// and for tests that show nothing is left behind.
    pub fn waiting_names(&self) -> usize {
        self.names().len()
    }

    fn names(&self) -> MutexGuard<'_, HashMap<String, Waiters>> {
        // Every update below leaves the map consistent between statements.
        self.names
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Lock `name` was released: wakes whoever it concerns.
    ///
    /// A named ticket's holder is woken; so is the head of the line when it holds no ticket
    /// yet, so that it takes one instead of sleeping through the other processes' turns.
    pub(crate) fn announce(&self, name: &str, announcement: Announcement) {
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
                waiters.handed = Some((to, fence));
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

    /// The fence of the lock a release handed to `token`, once (`None` if it was not).
    fn take_handed(&self, name: &str, token: OwnerToken) -> Option<u64> {
        let mut names = self.names();
        let handed = &mut names.get_mut(name)?.handed;
        handed
            .take_if(|(to, _)| *to == token)
            .map(|(_, fence)| fence)
    }

    /// The store confirmed (again) that announcements for `name` reach us.
    pub(crate) fn subscription_confirmed(&self, name: &str) {
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
    pub(crate) fn disconnected(&self) {
        for waiters in self.names().values_mut() {
            waiters.subscription = Subscription::Pending;
            waiters.wake_everyone();
        }
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

    /// Registers a fair-mode waiter holding `ticket` for `name`.
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

    /// Adds a member to `name`'s waiters, creating them (and subscribing) for the first one.
    fn enter(&self, name: &str, add: impl FnOnce(&mut Waiters)) -> Arc<Notify> {
        let mut names = self.names();
        let waiters = names.entry(name.to_owned()).or_insert_with(|| {
            let subscription = match &self.commands {
                Some(commands) => {
                    commands.send(Command::Subscribe(name.to_owned())).ok();
                    Subscription::Pending
                }
                None => Subscription::Live,
            };
            Waiters {
                line: VecDeque::new(),
                head_enqueued: false,
                released: Arc::new(Notify::new()),
                tickets: HashMap::new(),
                subscription,
                generation: 0,
                handed: None,
            }
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
        waiters.generation += 1;
        let generation = waiters.generation;
        drop(names);
        let (room, name) = (Arc::downgrade(self), name.to_owned());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                tokio::time::sleep(LINGER).await;
                forget_if_idle(&room, &name, generation);
            });
        }
    }

    /// Whether local waiters are lined up for `name`: a newcomer joins them instead of
    /// jumping the line.
    pub(crate) fn has_line(&self, name: &str) -> bool {
        self.names()
            .get(name)
            .is_some_and(|waiters| !waiters.line.is_empty())
    }

    /// Whether any waiter of this process waits for `name` now (in line or with a ticket).
    pub(crate) fn has_waiters(&self, name: &str) -> bool {
        self.names()
            .get(name)
            .is_some_and(|waiters| waiters.members() > 0)
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
        if let Some(commands) = &room.commands {
            commands.send(Command::Unsubscribe(name.to_owned())).ok();
        }
    }
}

#[derive(Debug)]
enum Member {
    InLine { id: u64, turn: Arc<Notify> },
    Ticket(OwnerToken),
}

/// A waiter's place in the room; leaving it (drop) passes the turn on at once.
#[derive(Debug)]
pub(crate) struct Place {
    room: Arc<WaitingRoom>,
    name: String,
    member: Member,
    released: Arc<Notify>,
}

impl Place {
    /// Resolves when this waiter is at the head of its local line (at once in fair mode).
    pub(crate) async fn turn(&self) {
        let Member::InLine { id, turn } = &self.member else {
            return;
        };
        while !self.room.is_head(&self.name, *id) {
            turn.notified().await;
        }
    }

    /// The store answered busy to this waiter's ticketed attempt, so its ticket is in the
    /// store's queue: as head of its line, it sleeps through announcements naming others.
    pub(crate) fn enqueued(&self) {
        if let Member::InLine { id, .. } = &self.member {
            self.room.head_enqueued(&self.name, *id);
        }
    }

    /// The announcements this waiter listens to. Arm the `notified()` future (with `enable`)
    /// before asking the store, so an announcement in between is not missed.
    pub(crate) fn released(&self) -> &Notify {
        &self.released
    }

    /// The fence of the lock, if a release handed it to this waiter's `token` (then it holds
    /// the lock, and must release it).
    pub(crate) fn handed(&self, token: OwnerToken) -> Option<u64> {
        self.room.take_handed(&self.name, token)
    }

    /// Whether announcements for this lock currently reach us; if not, retry on a timer.
    pub(crate) fn announcements_live(&self) -> bool {
        self.room.is_live(&self.name)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.room.leave(&self.name, &self.member);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `place` is woken by an announcement within `within`.
    async fn woken(place: &Place, within: Duration) -> bool {
        tokio::time::timeout(within, place.released().notified())
            .await
            .is_ok()
    }

    /// Long enough for a wake-up that is due; short enough to wait out one that is not.
    const DUE: Duration = Duration::from_secs(1);
    const NOT_DUE: Duration = Duration::from_millis(50);

    #[tokio::test]
    async fn the_first_waiter_is_head_and_hands_over_in_arrival_order() {
        let room = WaitingRoom::local();
        let first = room.join_line("k", OwnerToken::new());
        let second = room.join_line("k", OwnerToken::new());
        let third = room.join_line("k", OwnerToken::new());
        first.turn().await;
        let second_turn = tokio::spawn(async move {
            second.turn().await;
            second
        });
        tokio::task::yield_now().await;
        assert!(!second_turn.is_finished());

        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(1), second_turn)
            .await
            .unwrap()
            .unwrap();

        assert!(!room.is_head("k", 2), "the third waits behind the second");
        drop(second);
        tokio::time::timeout(Duration::from_secs(1), third.turn())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_lock_handed_to_a_ticket_is_known_to_that_waiter_only_and_once() {
        let room = WaitingRoom::local();
        let (head_token, other_token) = (OwnerToken::new(), OwnerToken::new());
        let head = room.join_line("k", head_token);
        let other = room.take_ticket("k", other_token);
        head.turn().await;
        head.enqueued();

        room.announce(
            "k",
            Announcement::Handed {
                to: head_token,
                fence: 7,
            },
        );

        assert!(woken(&head, DUE).await);
        assert_eq!(other.handed(other_token), None);
        assert_eq!(head.handed(head_token), Some(7));
        assert_eq!(head.handed(head_token), None, "told once");
    }

    #[test]
    fn announcements_are_read_from_their_messages() {
        let token = OwnerToken::new();
        let mut buf = [0; 32];
        let text = token.encode(&mut buf).to_owned();

        assert_eq!(Announcement::parse(""), Some(Announcement::Free));
        assert_eq!(Announcement::parse(&text), Some(Announcement::Next(token)));
        assert_eq!(
            Announcement::parse(&format!("{text} 42")),
            Some(Announcement::Handed {
                to: token,
                fence: 42
            })
        );
        assert_eq!(Announcement::parse("not-a-token"), None);
        assert_eq!(Announcement::parse(&format!("{text} -1")), None);
    }

    #[tokio::test]
    async fn a_waiter_that_leaves_the_middle_of_the_line_does_not_disturb_it() {
        let room = WaitingRoom::local();
        let head = room.join_line("k", OwnerToken::new());
        let middle = room.join_line("k", OwnerToken::new());
        let last = room.join_line("k", OwnerToken::new());

        drop(middle);
        drop(head);

        tokio::time::timeout(Duration::from_secs(1), last.turn())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn an_announcement_before_the_wait_is_not_lost() {
        let room = WaitingRoom::local();
        let place = room.join_line("k", OwnerToken::new());

        room.announce("k", Announcement::Free);

        assert!(woken(&place, DUE).await);
    }

    #[tokio::test]
    async fn fair_announcements_wake_only_the_named_ticket() {
        let room = WaitingRoom::local();
        let (a, b) = (OwnerToken::new(), OwnerToken::new());
        let first = room.take_ticket("k", a);
        let second = room.take_ticket("k", b);

        room.announce("k", Announcement::Next(b));

        assert!(woken(&second, DUE).await);
        assert!(!woken(&first, NOT_DUE).await, "the other ticket sleeps on");
    }

    #[tokio::test]
    async fn a_head_without_a_ticket_wakes_for_another_processs_ticket_to_take_its_own() {
        let room = WaitingRoom::local();
        let head = room.join_line("k", OwnerToken::new());

        room.announce("k", Announcement::Next(OwnerToken::new()));

        assert!(woken(&head, DUE).await);
    }

    #[tokio::test]
    async fn an_enqueued_head_sleeps_through_other_tickets_and_wakes_when_named() {
        let room = WaitingRoom::local();
        let token = OwnerToken::new();
        let head = room.join_line("k", token);
        head.turn().await;
        head.enqueued();

        room.announce("k", Announcement::Next(OwnerToken::new()));
        assert!(!woken(&head, NOT_DUE).await, "another process's turn");

        room.announce("k", Announcement::Next(token));
        assert!(woken(&head, DUE).await);
    }

    #[tokio::test]
    async fn the_next_head_holds_no_ticket_until_it_asks() {
        let room = WaitingRoom::local();
        let first = room.join_line("k", OwnerToken::new());
        let second = room.join_line("k", OwnerToken::new());
        first.turn().await;
        first.enqueued();

        drop(first);
        second.turn().await;
        room.announce("k", Announcement::Next(OwnerToken::new()));

        assert!(woken(&second, DUE).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_name_is_forgotten_after_its_last_waiter_leaves_and_the_linger_passes() {
        let room = WaitingRoom::local();
        drop(room.join_line("k", OwnerToken::new()));
        assert_eq!(room.waiting_names(), 1);

        tokio::time::sleep(LINGER + Duration::from_millis(1)).await;

        assert_eq!(room.waiting_names(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_who_returns_within_the_linger_keeps_the_name() {
        let room = WaitingRoom::local();
        drop(room.join_line("k", OwnerToken::new()));
        tokio::time::sleep(LINGER / 2).await;
        let again = room.join_line("k", OwnerToken::new());

        tokio::time::sleep(LINGER).await;

        assert_eq!(room.waiting_names(), 1);
        drop(again);
    }
}
