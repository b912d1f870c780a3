//! What every backend's `connect` promises: an answer within [`CONNECT_TIMEOUT`], and an error
//! that names what it tried to reach (a URL's password masked: `masked_url.rs`).

use std::fmt::Display;
use std::future::Future;

use crate::backend::{BackendError, CONNECT_TIMEOUT};

/// Why a `connect` failed, naming what it tried to reach.
#[derive(Debug)]
pub(crate) enum ConnectFailure<E> {
    /// The client's error.
    Failed { target: String, error: E },
    /// No answer within [`CONNECT_TIMEOUT`].
    Silent { target: String },
}

impl<E: Display> Display for ConnectFailure<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Failed { target, error } => write!(f, "cannot connect to {target}: {error}"),
            Self::Silent { target } => write!(
                f,
                "cannot connect to {target}: no answer within {CONNECT_TIMEOUT:?}"
            ),
        }
    }
}

/// Runs `connecting` for at most [`CONNECT_TIMEOUT`]: its value, or why `target` could not be
/// reached (its error, or its silence).
pub(crate) async fn within<T, E: Display>(
    target: &str,
    connecting: impl Future<Output = Result<T, E>>,
) -> Result<T, ConnectFailure<E>> {
    let target = target.to_owned();
    match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
        Ok(Ok(connected)) => Ok(connected),
        Ok(Err(error)) => Err(ConnectFailure::Failed { target, error }),
        Err(_) => Err(ConnectFailure::Silent { target }),
    }
}

impl<E: Display> From<ConnectFailure<E>> for BackendError {
    fn from(failure: ConnectFailure<E>) -> Self {
        BackendError::new(failure.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_silent_server_is_given_up_on_within_the_timeout() {
        let silent = std::future::pending::<Result<(), String>>();
        let error = within("Redis at 127.0.0.1:9", silent).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            "cannot connect to Redis at 127.0.0.1:9: no answer within 5s"
        );
    }
}
