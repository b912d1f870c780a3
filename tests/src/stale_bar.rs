//! A waiting writer's bar on readers left behind another writer by a race (each store builds
//! the marks the race leaves: the first writer's place, the second's place and barring
//! intent, a waiting reader's claim), lifted at the second writer's next attempt.

use std::time::Duration;

use tower_lock::backend::{Attempt, LockRequest, OwnerToken, Patience, SharedLocks};

/// The three waiters of the race, by their owner tokens.
#[derive(Clone, Copy, Debug)]
pub struct RaceMarks {
    /// The writer that came first, waiting for the reader's claim.
    pub first: OwnerToken,
    /// The writer behind it, whose intent bars readers.
    pub second: OwnerToken,
    /// The reader, barred.
    pub reader: OwnerToken,
}

impl RaceMarks {
    /// Fresh tokens.
    pub fn new() -> Self {
        Self {
            first: OwnerToken::new(),
            second: OwnerToken::new(),
            reader: OwnerToken::new(),
        }
    }
}

impl Default for RaceMarks {
    fn default() -> Self {
        Self::new()
    }
}

/// With `marks` left on lock `lock:k` of `backend`: the reader is barred and the first writer
/// waits for it (the deadlock's two halves, the twin), the second writer waits for the first,
/// and once it asked again the reader comes in.
///
/// # Panics
///
/// When any of that fails.
pub async fn a_stale_bar_is_lifted_at_the_writers_next_attempt<B>(backend: &B, marks: RaceMarks)
where
    B: SharedLocks,
    B::Lease: std::fmt::Debug,
{
    let waiting =
        |token| LockRequest::new(token, Duration::from_secs(30)).patience(Patience::Listens);

    let barred = backend.acquire_read("lock:k", waiting(marks.reader)).await;
    let first_waits = backend.acquire_write("lock:k", waiting(marks.first)).await;
    let second_waits = backend.acquire_write("lock:k", waiting(marks.second)).await;
    let let_in = backend.acquire_read("lock:k", waiting(marks.reader)).await;

    assert!(
        matches!(barred, Ok(Attempt::Busy { .. })),
        "the second writer's intent bars the reader: {barred:?}"
    );
    assert!(
        matches!(first_waits, Ok(Attempt::Busy { .. })),
        "the first writer waits for the reader's claim: {first_waits:?}"
    );
    assert!(
        matches!(second_waits, Ok(Attempt::Busy { .. })),
        "the second writer waits for the first: {second_waits:?}"
    );
    assert!(
        matches!(let_in, Ok(Attempt::Acquired(_))),
        "once the second writer asked again, its intent bars the reader no more: {let_in:?}"
    );
}
