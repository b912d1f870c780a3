//! The one error a backend reports: the store could not answer.

use std::sync::Arc;
use std::time::Duration;

/// The lock store could not answer: unreachable, too slow, or an unexpected reply.
///
/// Its message is for logs; it never reaches an HTTP client. Clones share the error: the
/// engine tells every waiter that stood behind a failed attempt the same failure.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use tower_lock::backend::BackendError;
///
/// let error = BackendError::timed_out(Duration::from_secs(1));
/// assert_eq!(error.to_string(), "lock store unavailable: no answer within 1s");
/// ```
#[derive(Clone, Debug, thiserror::Error)]
#[error("lock store unavailable: {0}")]
pub struct BackendError(Arc<dyn std::error::Error + Send + Sync>);

impl BackendError {
    /// Wraps any error of the store's client.
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self(Arc::from(error.into()))
    }

    /// What went wrong, without the "lock store unavailable" every message starts with.
    pub(crate) fn reason(&self) -> String {
        self.0.to_string()
    }

    /// The store did not answer within `limit`.
    pub fn timed_out(limit: Duration) -> Self {
        Self::new(format!("no answer within {limit:?}"))
    }
}
