//! A record of every hold the engine grants and ends, for checking mutual exclusion under
//! faults: one JSON object per line, appended to a file as it happens, so a process killed
//! with `SIGKILL` leaves every line it wrote.
//!
//! Nothing is recorded until [`record_to`] names a file; from then on every hold of every
//! locker in the process writes a line when it begins and one when it ends, and one more if
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
//! process on the machine shares. `fences` has one entry per name (`null` where the hold has
//! no fencing token).
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
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::backend::Hold;
use crate::engine::LockGuard;
use crate::engine::observer::{self, HoldObserver};

/// The history's file, and how many holds it has numbered.
struct History {
    file: Mutex<File>,
    holds: AtomicU64,
}

/// Records every hold of this process from now on, appending to `path` (created if missing).
/// Once per process: a second call fails with [`io::ErrorKind::AlreadyExists`].
pub fn record_to(path: &Path) -> io::Result<()> {
    static ATTACHED: OnceLock<()> = OnceLock::new();
    if ATTACHED.set(()).is_err() {
        return Err(already_recording());
    }
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let history = Box::leak(Box::new(History {
        file: Mutex::new(file),
        holds: AtomicU64::new(0),
    }));
    match observer::attach(history) {
        true => Ok(()),
        false => Err(already_recording()),
    }
}

fn already_recording() -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        "this process already records its holds",
    )
}

impl HoldObserver for History {
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
            "grant": hold, "pid": std::process::id(), "task": task, "at": now(),
            "hold": kind, "names": names, "fences": fences,
        });
        if let Some(permits) = permits {
            event["permits"] = json!(permits);
        }
        self.append(&event);
        hold
    }

    fn lost(&self, hold: u64) {
        self.append(&json!({"lost": hold, "pid": std::process::id(), "at": now()}));
    }

    fn ended(&self, hold: u64, held: bool) {
        self.append(&json!({"end": hold, "pid": std::process::id(), "at": now(), "held": held}));
    }
}

impl History {
    /// Appends `event` as one line, in one write, so lines never interleave.
    fn append(&self, event: &serde_json::Value) {
        let mut line = event.to_string();
        line.push('\n');
        let mut file = (self.file.lock()).unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Err(error) = file.write_all(line.as_bytes()) {
            tracing::warn!(%error, "could not record a hold in the history");
        }
    }
}

fn now() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos())
}
