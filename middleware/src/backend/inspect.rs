//! What an operator asks of a store: who holds a lock, since when, how long its lease has
//! left, how many wait; which locks are held; and a release that frees a lock whatever its
//! holder.

use std::future::Future;
use std::time::Duration;

use super::{BackendError, FencingToken, Hold, LockBackend};

/// One holder of a lock, as its store records it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holding {
    /// How it holds the lock: a mutex, a writer, a reader, permits.
    pub hold: Hold,
    /// Who holds it: its locker's [holder label](crate::LockerBuilder::holder_label).
    pub label: String,
    /// Its fencing token, where the store fences this kind of hold. Through a
    /// [`Locker`](crate::Locker), as lockers hand fences out: the holder's first hold has this
    /// fence, and holds handed on within its process follow it (up to 255 above); every later
    /// grant's fence is above them all.
    pub fence: Option<FencingToken>,
    /// How long it has held the lock.
    pub held_for: Duration,
    /// How long its lease has left unless it is renewed; `None` for a lease the store keeps
    /// for as long as the holder's session lives (etcd, ZooKeeper).
    pub lease_left: Option<Duration>,
}

impl Holding {
    /// A holder holding as `hold`, labelled `label`, for `held_for`, with `lease_left`; no
    /// fence.
    pub fn new(
        hold: Hold,
        label: impl Into<String>,
        held_for: Duration,
        lease_left: Option<Duration>,
    ) -> Self {
        Self {
            hold,
            label: label.into(),
            fence: None,
            held_for,
            lease_left,
        }
    }

    /// The same holder, with fencing token `fence`.
    pub fn fence(self, fence: Option<FencingToken>) -> Self {
        Self { fence, ..self }
    }
}

/// A lock as its store sees it now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockState {
    /// Its holders: none when it is free; one mutex holder or writer; or any number of readers,
    /// or of permit holders.
    pub holders: Vec<Holding>,
    /// How many wait for it that the store knows of — tickets in its wait queue, writers
    /// waiting for their turn, readers claiming theirs — and, through
    /// [`Locker::inspect`](crate::Locker::inspect), the asking locker's own tasks waiting in its
    /// line. A waiter that polls or listens for the release without a place in the queue
    /// (of any process), or waits in another process's line, leaves nothing here to count.
    pub waiting: usize,
}

impl LockState {
    /// A lock held by `holders`, with `waiting` waiters the store knows of.
    pub fn new(holders: Vec<Holding>, waiting: usize) -> Self {
        Self { holders, waiting }
    }

    /// Whether anybody holds it.
    pub fn is_held(&self) -> bool {
        !self.holders.is_empty()
    }
}

/// One page of the lock names held under a prefix.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Listing {
    /// Held lock names, at most the limit asked for.
    pub names: Vec<String>,
    /// Where the next page starts: `None` when this one was the last.
    pub next: Option<String>,
}

impl Listing {
    /// A page of `names`, continued at `next`.
    pub fn new(names: Vec<String>, next: Option<String>) -> Self {
        Self { names, next }
    }
}

/// A store that tells who holds its locks, and frees one whatever its holders: what an
/// operator's tools ([`Locker::inspect`](crate::Locker::inspect),
/// [`Locker::force_release`](crate::Locker::force_release)) ask of it.
///
/// Nothing here runs on the lock path: the store keeps each grant's holder label, fence and
/// start where it keeps the grant.
pub trait Inspect: LockBackend {
    /// The holders of lock `name` (the full name: prefix and key) and its waiters, now.
    fn inspect(&self, name: &str) -> impl Future<Output = Result<LockState, BackendError>> + Send;

    /// The names of held locks that start with `prefix`, at most `limit` (at least one), from
    /// `after` (a previous page's [`next`](Listing::next)) on. A page may hold fewer names
    /// than `limit` and still be followed by another: the store looks at a bounded number of
    /// its entries per page, never at all of them at once.
    fn held_names(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<Listing, BackendError>> + Send;

    /// Frees lock `name` whatever its holders, for the operator labelled `by`, and wakes its
    /// waiters: the next grant's fence is above every fence the freed holders had, and each
    /// of them finds its lease lost at its next renewal. A store that can keeps `by` for each
    /// freed lease, for [`released_by`](LockBackend::released_by) to tell its holder. Returns
    /// the holders it freed (none: the lock was free).
    fn force_release(
        &self,
        name: &str,
        by: &str,
    ) -> impl Future<Output = Result<Vec<Holding>, BackendError>> + Send;
}
