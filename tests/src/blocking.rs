//! Async clean-up from `Drop`, which runs inside a test's runtime and cannot block on it.

use std::future::Future;

/// Runs the future `work` makes to its end on a thread and runtime of its own, and waits.
pub(crate) fn finish_on_own_thread<F>(work: impl FnOnce() -> F + Send + 'static) -> F::Output
where
    F: Future,
    F::Output: Send + 'static,
{
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for clean-up");
        runtime.block_on(work())
    })
    .join()
    .expect("clean-up does not panic")
}
