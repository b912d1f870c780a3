//! A store gone away, proven the same way on every store: bursts of tasks asking for locks of
//! every shape the store has, in every way of waiting it offers, while another process holds
//! the locks (the twin: busy, after the wait), while the store is silent and after it was
//! killed (a failure for every task, within the store timeout or at once), and once it is
//! back (served again).

use std::fmt;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tower_lock::backend::{LockBackend, Semaphores, SharedLocks};
use tower_lock::{LockError, Locker, LockerBuilder};

use crate::{MariadbServer, PostgresServer, RedisServer};

/// The shape a task asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Mutex,
    Read,
    Write,
    Permit,
    /// Two keys at once.
    TwoKeys,
}

/// How a locker waits for a busy lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// Woken by releases (or polling, where the store has no announcements), holds handed on
    /// within the locker: the defaults.
    HandedOn,
    /// The same, every hold from the store (`max_local_run(1)`).
    Notified,
    /// In the store's queue, in arrival order (stores with a wait queue).
    Fair,
    /// Asking again after a backoff.
    Polling,
}

/// Tasks asking for each lock at once, as the claims of a burst do.
const TASKS: usize = 8;
/// How long a task waits for a busy lock.
const WAIT: Duration = Duration::from_secs(3);
/// How long the other process may take to take its free locks (one of each shape, one after
/// the other) before a twin's burst: a test's set-up, given room for a loaded machine.
const TAKEN_WITHIN: Duration = Duration::from_secs(30);
/// The store timeout of the lockers that find the store silent.
pub const STORE_TIMEOUT: Duration = Duration::from_millis(500);
/// The store timeout of the lockers that find the store killed: long, so that an answer far
/// below it cannot be the timeout.
const LONG_STORE_TIMEOUT: Duration = Duration::from_secs(5);
/// What "at once" allows: a refused connection, a task's scheduling on two busy cores.
const AT_ONCE: Duration = Duration::from_millis(1500);
/// Room for scheduling between the store timeout and a task's answer.
const SLACK: Duration = Duration::from_millis(700);

type Asked = Pin<Box<dyn Future<Output = Result<(), LockError>> + Send>>;

/// Takes a lock of `shape` on `key` (and `key` + `+` for two keys), holds it as its
/// [`Holding`] says, and releases it.
type Take = Arc<dyn Fn(Shape, String, Holding) -> Asked + Send + Sync>;

/// Where a [`Take`] counts itself once it holds its lock, and until when it holds it.
#[derive(Clone)]
struct Holding {
    taken: Arc<AtomicUsize>,
    /// Held until this channel's sender is dropped.
    until: watch::Receiver<()>,
}

impl Default for Holding {
    /// Counted nowhere, released at once.
    fn default() -> Self {
        Self {
            taken: Arc::default(),
            until: watch::channel(()).1,
        }
    }
}

impl Holding {
    /// Taken: counted, and held until let go.
    async fn held(mut self) {
        self.taken.fetch_add(1, Ordering::SeqCst);
        while self.until.changed().await.is_ok() {}
    }
}

/// One process's lockers on a store: one per way of waiting the store offers, each taking
/// every shape the store has.
pub struct Lockers {
    ways: Vec<(Waiting, Take)>,
    shapes: &'static [Shape],
    /// The shape that keeps each of `shapes` out, held by another process in the twin.
    blocker: fn(Shape) -> Shape,
}

impl fmt::Debug for Lockers {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ways: Vec<Waiting> = self.ways.iter().map(|(way, _)| *way).collect();
        (formatter.debug_struct("Lockers"))
            .field("ways", &ways)
            .field("shapes", &self.shapes)
            .finish_non_exhaustive()
    }
}

const EVERY_SHAPE: &[Shape] = &[
    Shape::Mutex,
    Shape::Read,
    Shape::Write,
    Shape::Permit,
    Shape::TwoKeys,
];

const MUTEXES: &[Shape] = &[Shape::Mutex, Shape::TwoKeys];

const ONE_PERMIT: NonZeroU32 = NonZeroU32::MIN;

impl Lockers {
    /// Lockers of mutexes (one key or two) on `backend`, for a store without shapes.
    pub fn mutexes<B: LockBackend + Clone>(backend: &B, store_timeout: Duration) -> Self {
        let take = |locker: Locker<B>| -> Take {
            Arc::new(move |shape, key, hold| {
                let locker = locker.clone();
                Box::pin(async move {
                    let held = match shape {
                        Shape::TwoKeys => locker.lock_all([key.clone(), format!("{key}+")]).await?,
                        _ => locker.lock(&key).await?,
                    };
                    hold.held().await;
                    held.release().await
                })
            })
        };
        Self {
            ways: ways(backend, store_timeout, take),
            shapes: MUTEXES,
            blocker: |_| Shape::Mutex,
        }
    }

    /// Lockers of every shape on `backend`.
    pub fn shaped<B: SharedLocks + Semaphores + Clone>(
        backend: &B,
        store_timeout: Duration,
    ) -> Self {
        let take = |locker: Locker<B>| -> Take {
            Arc::new(move |shape, key, hold| {
                let locker = locker.clone();
                Box::pin(async move {
                    let held = match shape {
                        Shape::Mutex => locker.lock(&key).await?,
                        Shape::Read => locker.read(&key).await?,
                        Shape::Write => locker.write(&key).await?,
                        Shape::Permit => locker.permit(&key, ONE_PERMIT).await?,
                        Shape::TwoKeys => locker.lock_all([key.clone(), format!("{key}+")]).await?,
                    };
                    hold.held().await;
                    held.release().await
                })
            })
        };
        Self {
            ways: ways(backend, store_timeout, take),
            shapes: EVERY_SHAPE,
            blocker: |shape| match shape {
                Shape::Permit => Shape::Permit,
                _ => Shape::Write,
            },
        }
    }

    /// Every (way, shape) case, with the key it asks for.
    fn cases(&self) -> impl Iterator<Item = (Waiting, Shape, String, &Take)> + '_ {
        (self.ways.iter()).flat_map(move |(way, take)| {
            (self.shapes.iter())
                .map(move |&shape| (*way, shape, format!("{shape:?}-{way:?}"), take))
        })
    }
}

/// A locker per way of waiting `backend` offers (fair mode only with a wait queue), each made
/// into a [`Take`].
fn ways<B: LockBackend + Clone>(
    backend: &B,
    store_timeout: Duration,
    take: impl Fn(Locker<B>) -> Take,
) -> Vec<(Waiting, Take)> {
    let mut ways = vec![Waiting::HandedOn, Waiting::Notified, Waiting::Polling];
    if backend.wait_queue().is_some() {
        ways.push(Waiting::Fair);
    }
    ways.into_iter()
        .map(|way| {
            let builder = Locker::builder(backend.clone()).store_timeout(store_timeout);
            let locker = configured(builder, way).build().expect("valid settings");
            (way, take(locker))
        })
        .collect()
}

fn configured<B: LockBackend>(builder: LockerBuilder<B>, way: Waiting) -> LockerBuilder<B> {
    match way {
        Waiting::HandedOn => builder.wait(WAIT),
        Waiting::Notified => builder.wait(WAIT).max_local_run(1),
        Waiting::Fair => builder.fair(Duration::from_secs(2)).wait(WAIT),
        Waiting::Polling => builder.wait_polling(WAIT),
    }
}

/// What one task was told, and after how long.
struct Answer {
    case: String,
    told: Result<(), LockError>,
    after: Duration,
}

impl fmt::Display for Answer {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let told = match &self.told {
            Ok(()) => "granted".to_owned(),
            Err(error) => format!("{error:?}"),
        };
        write!(formatter, "{}: {told} after {:?}", self.case, self.after)
    }
}

/// [`TASKS`] tasks per case of `lockers`, all at once; what each was told.
async fn burst(lockers: &Lockers) -> Vec<Answer> {
    let asked = Instant::now();
    let tasks: Vec<_> = (lockers.cases())
        .flat_map(|(way, shape, key, take)| {
            (0..TASKS).map(move |_| {
                let (case, asking) = (
                    format!("{shape:?} {way:?}"),
                    take(shape, key.clone(), Holding::default()),
                );
                tokio::spawn(async move {
                    let told = asking.await;
                    Answer {
                        case,
                        told,
                        after: asked.elapsed(),
                    }
                })
            })
        })
        .collect();
    let mut answers = Vec::with_capacity(tasks.len());
    for task in tasks {
        answers.push(task.await.expect("a task did not panic"));
    }
    answers
}

/// Every task was told the store failed, none after `within`.
fn every_task_failed(answers: &[Answer], within: Duration, what: &str) {
    for answer in answers {
        assert!(
            matches!(answer.told, Err(LockError::StoreUnavailable(_))),
            "{what}: {answer}"
        );
        assert!(
            answer.after <= within,
            "{what}: {answer}, later than {within:?}"
        );
    }
    let slowest = answers.iter().map(|answer| answer.after).max();
    println!(
        "{what}: {} tasks told the store failed, the slowest after {slowest:?}",
        answers.len()
    );
}

/// The twin: while `other` (another process) holds every case's lock, a burst is told the
/// lock is busy, once its wait ran out — a task told otherwise would not be told the truth
/// below either.
pub async fn busy_while_another_process_holds(lockers: &Lockers, other: &Lockers) {
    let (_, other_take) = &other.ways[0];
    let (let_go, until) = watch::channel(());
    let holding = Holding {
        taken: Arc::default(),
        until,
    };
    let holders: Vec<_> = (lockers.cases())
        .map(|(_, shape, key, _)| {
            let holding = holding.clone();
            tokio::spawn(other_take((lockers.blocker)(shape), key, holding))
        })
        .collect();
    // Every lock held before the burst asks: a wait for that, not a guess at how long it takes.
    let asked = Instant::now();
    while holding.taken.load(Ordering::SeqCst) < holders.len() {
        assert!(
            asked.elapsed() < TAKEN_WITHIN,
            "the other process took its locks within {TAKEN_WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    let answers = burst(lockers).await;

    for answer in &answers {
        assert!(
            matches!(answer.told, Err(LockError::Busy { .. })),
            "held: {answer}"
        );
        assert!(
            answer.after >= WAIT,
            "held: {answer}, before its wait ran out"
        );
    }
    drop(let_go);
    for holder in holders {
        holder
            .await
            .expect("the holder did not panic")
            .expect("the holder held");
    }
}

/// A store taken away and brought back by a test.
pub trait Gone {
    /// From now on, the store receives requests but answers none.
    fn silence(&mut self);
    /// The silent store answers again.
    fn speak(&mut self);
    /// The store's processes are killed: connections to it are refused.
    fn kill(&mut self);
    /// The killed store runs again; returns once it serves.
    fn restart(&mut self);
}

/// The single servers: frozen with SIGSTOP, thawed, killed and restarted on their ports.
macro_rules! single_server_is_gone {
    ($($server:ty),*) => {$(
        impl Gone for $server {
            fn silence(&mut self) {
                self.pause();
            }
            fn speak(&mut self) {
                self.resume();
            }
            fn kill(&mut self) {
                <$server>::kill(self);
            }
            fn restart(&mut self) {
                <$server>::restart(self);
            }
        }
    )*};
}

single_server_is_gone!(RedisServer, PostgresServer, MariadbServer);

/// While the store is silent, then killed, every task of a burst is told it failed — within
/// the store timeout, and at once once connections are refused —, never that a lock is busy;
/// after each, locks are served again. `lockers` has the short store timeout, `patient` the
/// long one.
pub async fn every_task_hears_the_store_fail(
    store: &mut impl Gone,
    (lockers, patient): (&Lockers, &Lockers),
    name: &str,
) {
    store.silence();
    let silent = burst(lockers).await;
    store.speak();
    every_task_failed(&silent, STORE_TIMEOUT + SLACK, &format!("{name} silent"));
    served_again(lockers, &format!("{name} answering again")).await;

    store.kill();
    let killed = burst(patient).await;
    store.restart();
    every_task_failed(&killed, AT_ONCE, &format!("{name} killed"));
    served_again(patient, &format!("{name} restarted")).await;
}

/// Every case of `lockers` takes its lock again, soon: how long the first grant took.
async fn served_again(lockers: &Lockers, what: &str) {
    let started = Instant::now();
    for (way, shape, key, take) in lockers.cases() {
        while let Err(error) = take(shape, key.clone(), Holding::default()).await {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{what}: {shape:?} {way:?} still refused after 30 s: {error:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    println!(
        "{what}: every case served again {:?} after",
        started.elapsed()
    );
}

/// Lockers of `backend` with the short and the long store timeout, made by `lockers`.
pub fn short_and_patient<B>(
    backend: &B,
    lockers: fn(&B, Duration) -> Lockers,
) -> (Lockers, Lockers) {
    (
        lockers(backend, STORE_TIMEOUT),
        lockers(backend, LONG_STORE_TIMEOUT),
    )
}
