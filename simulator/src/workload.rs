//! What a simulated process's callers do: take a lock of a shape drawn from the seed, work
//! under it on the fenced registers of its keys, and give it back — or drop it.

use std::num::NonZeroU32;
use std::time::Duration;

use fastrand::Rng;
use tokio::time::{Instant, sleep};
use tower_lock::{HeldLock, LockError, Locker};

use crate::link::Link;
use crate::register::Registers;
use crate::store::SimBackend;

/// The permits of every semaphore.
pub(crate) const PERMITS: u32 = 2;

/// A lock a caller asks for.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    Mutex(String),
    Write(String),
    Read(String),
    Permit(String),
    /// Several keys at once, exclusively.
    Keys(Vec<String>),
}

impl Op {
    pub(crate) fn draw(rng: &mut Rng, keys: &[String]) -> Self {
        let key = keys[rng.usize(0..keys.len())].clone();
        match rng.u8(0..10) {
            0..=2 => Self::Mutex(key),
            3..=4 => Self::Write(key),
            5..=6 => Self::Read(key),
            7..=8 => Self::Permit(format!("{key}-pool")),
            _ => {
                let mut keys: Vec<String> = keys.to_vec();
                rng.shuffle(&mut keys);
                keys.truncate(2);
                keys.sort();
                Self::Keys(keys)
            }
        }
    }

    /// What the history and the digest call it.
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::Mutex(key) => format!("mutex {key}"),
            Self::Write(key) => format!("write {key}"),
            Self::Read(key) => format!("read {key}"),
            Self::Permit(key) => format!("permit {key}"),
            Self::Keys(keys) => format!("keys {}", keys.join("+")),
        }
    }

    pub(crate) async fn take(
        &self,
        locker: &Locker<SimBackend>,
    ) -> Result<HeldLock<SimBackend>, LockError> {
        let permits = NonZeroU32::new(PERMITS).expect("permits");
        match self {
            Self::Mutex(key) => locker.lock(key).await,
            Self::Write(key) => locker.write(key).await,
            Self::Read(key) => locker.read(key).await,
            Self::Permit(key) => locker.permit(key, permits).await,
            Self::Keys(keys) => locker.lock_all(keys).await,
        }
    }

    /// The keys it takes.
    fn keys(&self) -> &[String] {
        match self {
            Self::Mutex(key) | Self::Write(key) | Self::Read(key) | Self::Permit(key) => {
                std::slice::from_ref(key)
            }
            Self::Keys(keys) => keys,
        }
    }

    /// The keys it writes: the exclusive ones.
    fn written(&self) -> &[String] {
        match self {
            Self::Mutex(key) | Self::Write(key) => std::slice::from_ref(key),
            Self::Keys(keys) => keys,
            Self::Read(_) | Self::Permit(_) => &[],
        }
    }
}

/// The keys `op` writes under `held`, each with its fence.
pub(crate) fn fences(op: &Op, held: &HeldLock<SimBackend>) -> Vec<(String, u64)> {
    (op.written().iter())
        .filter_map(|key| Some((key.clone(), held.fence_of(key)?.get())))
        .collect()
}

/// One caller's turn under the lock: each written key's register read, then (after half the
/// work) written one higher, under its fence; the process's pauses stall it.
pub(crate) async fn work(
    fences: &[(String, u64)],
    registers: &Registers,
    link: &Link,
    time: Duration,
) {
    let mut read = Vec::new();
    for (key, fence) in fences {
        link.reachable().await;
        read.push(registers.read(key, *fence));
    }
    sleep(time / 2).await;
    for ((key, fence), value) in fences.iter().zip(read) {
        link.reachable().await;
        if let Some(value) = value {
            registers.write(key, *fence, value + 1);
        }
    }
    sleep(time / 2).await;
    link.reachable().await;
}

/// How one call for a lock went, as the checks and the digest see it.
#[derive(Clone, Debug)]
pub(crate) struct Call {
    pub(crate) pid: u64,
    pub(crate) op: String,
    pub(crate) outcome: String,
    pub(crate) started: Duration,
    pub(crate) took: Duration,
    /// The longest it may take: the wait, and one store call begun before its end.
    pub(crate) bound: Duration,
}

impl Call {
    pub(crate) fn new(
        pid: u64,
        op: &Op,
        outcome: &Result<HeldLock<SimBackend>, LockError>,
        (epoch, started): (Instant, Instant),
        bound: Duration,
    ) -> Self {
        let outcome = match outcome {
            Ok(held) => {
                let fences: Vec<String> = (op.keys().iter())
                    .map(|key| match held.fence_of(key) {
                        Some(fence) => format!("{key}@{}", fence.get()),
                        None => key.clone(),
                    })
                    .collect();
                format!("granted {}", fences.join(" "))
            }
            Err(error) => format!("refused: {error}"),
        };
        Self {
            pid,
            op: op.describe(),
            outcome,
            started: started - epoch,
            took: started.elapsed(),
            bound,
        }
    }
}
