//! Randomness drawn from a seed, for a simulation that must replay: every random choice the
//! engine makes on this thread — owner tokens, the jitter of its retries — follows the seed.

use std::cell::RefCell;

thread_local! {
    static TOKENS: RefCell<Option<fastrand::Rng>> = const { RefCell::new(None) };
}

/// Draws every random choice the engine makes on this thread from `seed` from now on: owner
/// tokens and the jitter of retries and backoff. On a current-thread Tokio runtime (whose
/// tasks all run on the thread that drives it), with Tokio's clock paused, a run is then a
/// function of its seed.
///
/// # Example
///
/// ```
/// use tower_lock::{backend::OwnerToken, testing::seed_this_thread};
///
/// seed_this_thread(7);
/// let first = (OwnerToken::new(), fastrand::u64(..));
/// seed_this_thread(7);
/// assert_eq!((OwnerToken::new(), fastrand::u64(..)), first);
/// ```
pub fn seed_this_thread(seed: u64) {
    fastrand::seed(seed);
    let tokens = fastrand::Rng::with_seed(seed ^ 0x9e37_79b9_7f4a_7c15);
    TOKENS.with(|rng| *rng.borrow_mut() = Some(tokens));
}

/// 16 bytes from this thread's seed, if it has one.
pub(crate) fn seeded_bytes() -> Option<[u8; 16]> {
    TOKENS.with(|rng| {
        let mut rng = rng.borrow_mut();
        let rng = rng.as_mut()?;
        Some(rng.u128(..).to_le_bytes())
    })
}
