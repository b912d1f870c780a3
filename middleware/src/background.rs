//! Work that must outlive the code that starts it: giving back a lock, a ticket or an attempt
//! whose owner was dropped, and forgetting an idle waiting line. One helper, so that every such
//! task is spawned, bounded and logged the same way.

use std::fmt;
use std::future::Future;
use std::time::Duration;

/// Runs `work` on the current Tokio runtime without waiting for it. Outside a runtime (a value
/// dropped after its runtime shut down) nothing runs: what `what` would have given back
/// expires with its lease instead, which is logged.
pub(crate) fn spawn(what: &'static str, work: impl Future<Output = ()> + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn(work)),
        Err(_) => tracing::warn!(what, "no Tokio runtime to run it on; left to expire"),
    }
}

/// Runs the store call `work` (on lock `name`) in the background, giving up after `limit`;
/// its outcome is logged, never returned.
pub(crate) fn store_call<T: fmt::Debug, E: fmt::Display>(
    what: &'static str,
    name: String,
    limit: Duration,
    work: impl Future<Output = Result<T, E>> + Send + 'static,
) {
    spawn(what, async move {
        match tokio::time::timeout(limit, work).await {
            Ok(Ok(outcome)) => tracing::debug!(lock = name, what, ?outcome, "done"),
            Ok(Err(error)) => tracing::warn!(lock = name, what, %error, "failed"),
            Err(_) => tracing::warn!(lock = name, what, ?limit, "timed out"),
        }
    });
}
