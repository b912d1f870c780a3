//! One set of rules for every store's wait queue: random sequences of tickets asking for a
//! lock, holders releasing it and waiters leaving the line get the same answers from the store
//! as from a model of the rules (`backend::store_support::ticket_rules`, which the memory and SQL backends run;
//! Redis's scripts and etcd's and ZooKeeper's key orders follow them on their own).

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::sleep;

use super::Store;
use super::support::LONG;
use crate::backend::{FencingToken, LockBackend, LockRequest, QueuedAttempt, WaitQueue};
use crate::token::OwnerToken;

/// Tickets that outlive every lease asked for: a release always hands the lock to the first.
const TICKETS: Duration = Duration::from_secs(60);
/// Waiters in each sequence.
const WAITERS: usize = 4;
/// How many times a ticket the lock went to asks before its store must say so (10 ms apart).
const ASKS: usize = 200;

/// Eight sequences of forty steps, each on a lock of its own: every answer of the store's queue
/// is the model's — a ticket the lock went to is told so within two seconds (at once where
/// the store decides it on asking; when its watch fires on etcd and ZooKeeper), and one the
/// model keeps waiting is never given the lock — and every fence issued is above the ones
/// before it.
pub async fn a_queue_follows_the_ticket_rules<S: Store>(store: &S) {
    let backend = store.backend().await;
    let queue = backend
        .wait_queue()
        .expect("a store with a wait queue offers one");
    for seed in 1..=8 {
        let name = format!("lock:rules-{seed}");
        follow_the_rules(&backend, queue, &name, seed).await;
    }
}

/// One step of a sequence.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// Waiter `n` asks for the lock with its ticket.
    Ask(usize),
    /// Waiter `n`, which was told it holds the lock, releases it.
    Release(usize),
    /// Waiter `n`, in line (or handed the lock unawares), gives up; it asks again, if it
    /// does, with a new ticket (as every attempt of the engine has its own).
    Leave(usize),
}

/// The rules for tickets that never expire: who holds the lock, and who waits in what order.
#[derive(Debug, Default)]
struct Model {
    holder: Option<usize>,
    line: VecDeque<usize>,
}

impl Model {
    /// Waiter `n` asks: whether it holds the lock now.
    fn ask(&mut self, n: usize) -> bool {
        if self.holder == Some(n) {
            return true;
        }
        if self.holder.is_none() && self.line.front().is_none_or(|&first| first == n) {
            self.line.retain(|&waiter| waiter != n);
            self.holder = Some(n);
            return true;
        }
        if !self.line.contains(&n) {
            self.line.push_back(n);
        }
        false
    }

    /// The holder releases: the first in line holds the lock now.
    fn release(&mut self) {
        self.holder = self.line.pop_front();
    }

    /// Waiter `n` leaves: a lock handed to it goes on to the next.
    fn leave(&mut self, n: usize) {
        self.line.retain(|&waiter| waiter != n);
        if self.holder == Some(n) {
            self.release();
        }
    }

    fn waits(&self, n: usize) -> bool {
        self.line.contains(&n) || self.holder == Some(n)
    }
}

/// Runs the sequence of `seed` on lock `name`, checking every answer against the model, and
/// leaves the lock free.
async fn follow_the_rules<B: LockBackend>(
    backend: &B,
    queue: &dyn WaitQueue<B::Lease>,
    name: &str,
    seed: u64,
) {
    let mut tokens: Vec<OwnerToken> = (0..WAITERS).map(|_| OwnerToken::new()).collect();
    let mut leases: Vec<Option<B::Lease>> = (0..WAITERS).map(|_| None).collect();
    let (mut model, mut random, mut fences) = (Model::default(), Random(seed), Fences::default());
    let mut steps = Vec::new();
    for _ in 0..40 {
        let n = random.below(WAITERS);
        let step = match (&leases[n], model.waits(n)) {
            (Some(_), _) => Step::Release(n),
            (None, true) if random.below(2) == 0 => Step::Leave(n),
            (None, _) => Step::Ask(n),
        };
        steps.push(step);
        let context = || format!("seed {seed}, steps {steps:?}");
        match step {
            Step::Ask(n) => {
                let expected = model.ask(n);
                let request = LockRequest::new(tokens[n], LONG);
                let mut asked = 0;
                let acquired = loop {
                    let answer = queue.acquire_queued(name, request, TICKETS).await;
                    match answer.unwrap_or_else(|error| panic!("{}: {error}", context())) {
                        QueuedAttempt::Acquired(grant) => {
                            fences.issued(grant.fence, &context);
                            leases[n] = Some(grant.lease);
                            break true;
                        }
                        // A store whose waiters learn of a handoff from a watch may answer
                        // from the watch until it fires: ask again, for a while.
                        QueuedAttempt::Queued { .. } if expected && asked < ASKS => {}
                        QueuedAttempt::Queued { .. } => break false,
                    }
                    asked += 1;
                    sleep(Duration::from_millis(10)).await;
                };
                assert_eq!(acquired, expected, "acquired? {}", context());
            }
            Step::Release(n) => {
                let lease = leases[n].take().expect("a holder's lease");
                let released = backend.release(name, &lease).await;
                let released = released.unwrap_or_else(|error| panic!("{}: {error}", context()));
                assert!(released, "the holder's release: {}", context());
                model.release();
            }
            Step::Leave(n) => {
                let left = queue.leave_queue(name, tokens[n]).await;
                left.unwrap_or_else(|error| panic!("{}: {error}", context()));
                model.leave(n);
                tokens[n] = OwnerToken::new();
            }
        }
    }
    for n in 0..WAITERS {
        if let Some(lease) = leases[n].take() {
            backend.release(name, &lease).await.expect("released");
        } else if model.waits(n) {
            queue.leave_queue(name, tokens[n]).await.expect("left");
        }
    }
}

/// The fences issued so far: each must be above the last.
#[derive(Debug, Default)]
struct Fences(Option<FencingToken>);

impl Fences {
    fn issued(&mut self, fence: Option<FencingToken>, context: &impl Fn() -> String) {
        let Some(fence) = fence else {
            return;
        };
        if let Some(last) = self.0 {
            assert!(last < fence, "fence {fence} after {last}: {}", context());
        }
        self.0 = Some(fence);
    }
}

/// A small deterministic generator (xorshift64), so that a failing sequence can be run again.
struct Random(u64);

impl Random {
    /// A number below `bound`.
    fn below(&mut self, bound: usize) -> usize {
        let mut x = self.0.max(1);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        usize::try_from(x % bound as u64).unwrap_or(0)
    }
}
