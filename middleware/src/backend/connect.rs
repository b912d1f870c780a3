//! What every backend's `connect` promises: an answer within [`CONNECT_TIMEOUT`], and an error
//! that names what it tried to reach, a password in it masked.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use super::BackendError;

/// The longest a `connect` takes before it gives up on a server that does not answer.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

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

/// `url` with the password of its user, if any, replaced by `***`: `postgres://app:***@db/x`.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn masked(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let Some((user_info, host)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    match user_info.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}{path}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    fn a_password_is_masked_and_nothing_else() {
        let cases = [
            (
                "postgres://app:s3cret@db:5432/x",
                "postgres://app:***@db:5432/x",
            ),
            ("redis://:s3cret@cache/0", "redis://:***@cache/0"),
            (
                "mysql://p%40ss:w@rd:x@h/db?ssl-mode=REQUIRED",
                "mysql://p%40ss:***@h/db?ssl-mode=REQUIRED",
            ),
            (
                "postgres://root@127.0.0.1/test",
                "postgres://root@127.0.0.1/test",
            ),
            (
                "redis://127.0.0.1:6379/?name=a@b",
                "redis://127.0.0.1:6379/?name=a@b",
            ),
            ("127.0.0.1:2181", "127.0.0.1:2181"),
        ];
        for (url, shown) in cases {
            assert_eq!(masked(url), shown, "{url}");
        }
    }

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
