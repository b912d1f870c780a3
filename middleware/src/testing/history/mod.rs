//! A record of every hold the engine grants and ends, and its check ([`History`]): mutual
//! exclusion under faults. One JSON object per line, appended to a file as it happens, so a
//! process killed with `SIGKILL` leaves every line it wrote — or, for processes simulated in
//! one OS process, kept in memory per process ([`Recording`]).
//!
//! Nothing is recorded until [`record_to`] names a file (from then on every hold of every
//! locker in the process is recorded), or a locker is built
//! [`recorded_in`](crate::LockerBuilder::recorded_in) a [`Recording`] (its holds are recorded
//! there instead). Each hold writes a line when it begins and one when it ends, and one more if
//! the store says it was lost:
//!
//! * `{"grant":7,"pid":4711,"task":12,"at":1764197412000123456,"hold":"mutex","names":["lock:k"],"fences":[3584]}`
//!   when the hold begins — the store's answer is in, or the lock was handed on to this task —
//!   before the work under it runs;
//! * `{"end":7,"pid":4711,"at":1764197412004567890,"held":true}` when it ends — before the
//!   store hears the release or the lock is handed on — with `held: false` when the lease had
//!   been lost by then (the holder was, or will be, told so);
//! * `{"lost":7,"pid":4711,"at":1764197412003000000}` when the store answers a renewal or the
//!   release that the lock was no longer this hold's (the holder is told so).
//!
//! A permit's grant also says how many permits its semaphore has (`"hold":"permit","permits":2`).
//!
//! `grant` numbers the holds of the process; `task` is the Tokio task that took the lock (0
//! outside a task); `at` is nanoseconds since the Unix epoch by the system clock, which every
//! process on the machine shares (in a [`Recording`]: since its epoch on Tokio's clock, and
//! `pid` is the simulated process's). `fences` has one entry per name (`null` where the hold
//! has no fencing token).
//!
//! # Example
//!
//! ```
//! use tower_lock::{Locker, MemoryBackend, testing::history};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! let path = std::env::temp_dir().join(format!("history-{}.jsonl", std::process::id()));
//! history::record_to(&path)?;
//! let locker = Locker::new(MemoryBackend::new());
//! locker.with_lock("coupon:42", |_lock| async {}).await.unwrap();
//! let lines = std::fs::read_to_string(&path)?;
//! assert_eq!(lines.lines().count(), 2, "a grant and its end: {lines}");
//! # std::fs::remove_file(&path)
//! # }
//! ```

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;
use tokio::time::Instant;

use crate::backend::Hold;
use crate::engine::LockGuard;
use crate::engine::observer::{self, HoldObserver, Observer};

mod check;
pub use check::{Belief, History, Verdict};

/// Where a process's holds are recorded, under which process id, by which clock; and how
/// many holds it has numbered.
struct Recorder {
    sink: Sink,
    pid: u64,
    clock: Clock,
    holds: AtomicU64,
}

enum Sink {
    File(Mutex<File>),
    Lines(Mutex<String>),
}

enum Clock {
    /// Nanoseconds since the Unix epoch by the system clock, which every process on the
    /// machine shares.
    System,
    /// Nanoseconds since an instant of Tokio's clock (paused, in a simulation), which every
    /// simulated process shares.
    Tokio(Instant),
}

/// Records every hold of this process from now on, appending to `path` (created if missing).
/// Once per process: a second call fails with [`io::ErrorKind::AlreadyExists`].
pub fn record_to(path: &Path) -> io::Result<()> {
    static ATTACHED: OnceLock<()> = OnceLock::new();
    if ATTACHED.set(()).is_err() {
        return Err(already_recording());
    }
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let recorder = Box::leak(Box::new(Recorder {
        sink: Sink::File(Mutex::new(file)),
        pid: u64::from(std::process::id()),
        clock: Clock::System,
        holds: AtomicU64::new(0),
    }));
    match observer::attach(recorder) {
        true => Ok(()),
        false => Err(already_recording()),
    }
}

/// One simulated process's holds, recorded in memory in the same lines as [`record_to`]
/// writes, for the lockers built [`recorded_in`](crate::LockerBuilder::recorded_in) it: many
/// processes simulated in one OS process each keep their own, with `pid` theirs and `at`
/// the nanoseconds since `epoch` on Tokio's clock.
///
/// # Example
///
/// ```
/// use tower_lock::{Locker, MemoryBackend, testing::history::Recording};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let epoch = tokio::time::Instant::now();
/// let (first, second) = (Recording::new(1, epoch), Recording::new(2, epoch));
/// let store = MemoryBackend::new();
/// let one = Locker::builder(store.clone()).recorded_in(&first).build().unwrap();
/// let two = Locker::builder(store).recorded_in(&second).build().unwrap();
/// one.with_lock("coupon:42", |_lock| async {}).await.unwrap();
/// assert_eq!(first.lines().lines().count(), 2, "a grant and its end");
/// assert_eq!(second.lines(), "", "the other process took nothing");
/// # drop(two);
/// # }
/// ```
#[derive(Clone)]
pub struct Recording(Arc<Recorder>);

impl Recording {
    /// An empty recording for process `pid`, timed from `epoch`.
    pub fn new(pid: u64, epoch: Instant) -> Self {
        Self(Arc::new(Recorder {
            sink: Sink::Lines(Mutex::new(String::new())),
            pid,
            clock: Clock::Tokio(epoch),
            holds: AtomicU64::new(0),
        }))
    }

    /// The lines recorded so far, one event each.
    pub fn lines(&self) -> String {
        match &self.0.sink {
            Sink::Lines(lines) => lock(lines).clone(),
            Sink::File(_) => String::new(),
        }
    }

    pub(crate) fn observer(&self) -> Observer {
        Observer::own(self.0.clone())
    }
}

impl std::fmt::Debug for Recording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recording")
            .field("pid", &self.0.pid)
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn already_recording() -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        "this process already records its holds",
    )
}

impl HoldObserver for Recorder {
    fn granted(&self, guard: &LockGuard) -> u64 {
        let hold = self.holds.fetch_add(1, Ordering::Relaxed) + 1;
        let task = tokio::task::try_id().map_or(0, |id| id.to_string().parse().unwrap_or(0));
        let (kind, permits) = match guard.hold() {
            Hold::Mutex => ("mutex", None),
            Hold::Write => ("write", None),
            Hold::Read => ("read", None),
            Hold::Permit { permits } => ("permit", Some(permits.get())),
        };
        let names: Vec<&str> = guard.names().collect();
        let fences: Vec<Option<u64>> = (guard.fences().iter())
            .map(|fence| fence.map(|fence| fence.get()))
            .collect();
        let mut event = json!({
            "grant": hold, "pid": self.pid, "task": task, "at": self.now(),
            "hold": kind, "names": names, "fences": fences,
        });
        if let Some(permits) = permits {
            event["permits"] = json!(permits);
        }
        self.append(&event);
        hold
    }

    fn lost(&self, hold: u64) {
        self.append(&json!({"lost": hold, "pid": self.pid, "at": self.now()}));
    }

    fn ended(&self, hold: u64, held: bool) {
        self.append(&json!({"end": hold, "pid": self.pid, "at": self.now(), "held": held}));
    }
}

impl Recorder {
    /// Appends `event` as one line, in one write, so lines never interleave.
    fn append(&self, event: &serde_json::Value) {
        let mut line = event.to_string();
        line.push('\n');
        match &self.sink {
            Sink::Lines(lines) => lock(lines).push_str(&line),
            Sink::File(file) => {
                if let Err(error) = lock(file).write_all(line.as_bytes()) {
                    tracing::warn!(%error, "could not record a hold in the history");
                }
            }
        }
    }

    fn now(&self) -> u128 {
        match self.clock {
            Clock::System => {
                (SystemTime::now().duration_since(UNIX_EPOCH)).map_or(0, |since| since.as_nanos())
            }
            Clock::Tokio(epoch) => epoch.elapsed().as_nanos(),
        }
    }
}
