//! The shapes of lock lockbench's hot-key contenders take.

use std::num::NonZeroU32;

/// The shape of lock every contender takes (`--shape`).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// The mutex (`Locker::with_lock`): every implementation has it.
    #[default]
    Mutex,
    /// Every contender takes the write lock of a read-write lock.
    Write,
    /// Nine readers to one writer on one read-write lock: contenders 0, 10, 20, … write.
    ReadMostly,
    /// A semaphore of [`PERMITS`] permits.
    Permit,
    /// The hot key and a second key taken together, all or none (`Locker::lock_all`).
    MultiKey,
}

/// The permits of the `permit` shape's semaphore.
pub const PERMITS: NonZeroU32 = NonZeroU32::new(2).expect("two");

impl Shape {
    pub fn name(self) -> &'static str {
        match self {
            Shape::Mutex => "mutex",
            Shape::Write => "write",
            Shape::ReadMostly => "read-mostly",
            Shape::Permit => "permit",
            Shape::MultiKey => "multi-key",
        }
    }

    /// What contender number `contender` takes.
    pub fn taken_by(self, contender: usize) -> Taking {
        match self {
            Shape::Mutex => Taking::Mutex,
            Shape::Write => Taking::Write,
            Shape::ReadMostly if contender.is_multiple_of(10) => Taking::Write,
            Shape::ReadMostly => Taking::Read,
            Shape::Permit => Taking::Permit,
            Shape::MultiKey => Taking::Pair,
        }
    }
}

/// What one contender takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taking {
    Mutex,
    Read,
    Write,
    Permit,
    /// The key and its pair ([`pair_of`]) together.
    Pair,
}

/// The second key the `multi-key` shape takes with `key`.
pub fn pair_of(key: &str) -> String {
    format!("{key}:pair")
}

impl Taking {
    /// Whether others may hold the lock beside it (a reader, a permit).
    pub fn is_shared(self) -> bool {
        matches!(self, Taking::Read | Taking::Permit)
    }
}
