//! [`Rejection`]: why the layer answers instead of the handler, and its default answer, an RFC
//! 9457 `application/problem+json` document.

use std::fmt;
use std::time::Duration;

use http::{HeaderValue, Response, StatusCode, header};

use super::request_body::BodyError;
use crate::engine::LockError;
use crate::key::KeyError;

/// Why the layer answered a request itself instead of running its handler.
///
/// The default answer is [`into_response`](Self::into_response): the status, an
/// `application/problem+json` body (`type`, `title`, `status`, `detail`) and `Retry-After`
/// where retrying can help. [`LockLayer::on_rejection`](crate::LockLayer::on_rejection) lets
/// an application answer in its own format instead.
///
/// | rejection | status | problem `type` |
/// |---|---|---|
/// | lock busy ([`LockError::Busy`]) | 409 (or the layer's busy status) | `urn:tower-lock:resource-locked` |
/// | no valid key ([`KeyError`], [`LockError::InvalidKey`]) | 400 | `urn:tower-lock:invalid-lock-key` |
/// | layer placed before routing ([`KeyError::BeforeRouting`]) | 500 | `urn:tower-lock:layer-before-routing` |
/// | body over the limit ([`BodyError::TooLarge`]) | 413 | `urn:tower-lock:request-body-too-large` |
/// | body unreadable ([`BodyError::Unreadable`]) | 400 | `urn:tower-lock:unreadable-request-body` |
/// | store down ([`LockError::StoreUnavailable`]) | 503 | `urn:tower-lock:lock-store-unavailable` |
/// | lease lost ([`LockError::LeaseLost`]) | 503 | `urn:tower-lock:lock-lost` |
/// | nested locks that cannot be re-entered ([`LockError::Upgrade`], [`LockError::MoreKeys`]) | 500 | `urn:tower-lock:lock-not-reentrant` |
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use tower_lock::{LockError, Rejection};
///
/// let busy = LockError::Busy {
///     key: "coupon:42".into(),
///     holder_ttl: Some(Duration::from_secs(10)),
///     typical_hold: Some(Duration::from_millis(300)),
/// };
/// let response = Rejection::from(busy).into_response();
/// assert_eq!(response.status(), 409);
/// assert_eq!(response.headers()["retry-after"], "1");
/// assert_eq!(response.headers()["content-type"], "application/problem+json");
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Rejection {
    /// The request has no valid lock key, or the layer cannot read it where it is placed.
    Key(KeyError),
    /// The request body could not be read before locking.
    Body(BodyError),
    /// The lock was not taken, or not kept.
    Lock(LockError),
}

impl Rejection {
    /// The default status: see the table above.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Key(KeyError::BeforeRouting(_)) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Key(_) | Self::Body(BodyError::Unreadable(_)) => StatusCode::BAD_REQUEST,
            Self::Body(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Lock(error) => match error {
                LockError::Busy { .. } => StatusCode::CONFLICT,
                LockError::InvalidKey(_) => StatusCode::BAD_REQUEST,
                LockError::StoreUnavailable(_) | LockError::LeaseLost { .. } => {
                    StatusCode::SERVICE_UNAVAILABLE
                }
                LockError::Upgrade { .. } | LockError::MoreKeys { .. } => {
                    StatusCode::INTERNAL_SERVER_ERROR
                }
            },
        }
    }

    /// The problem's `type`: a stable URI that clients can match on.
    pub fn problem_type(&self) -> &'static str {
        match self {
            Self::Key(KeyError::BeforeRouting(_)) => "urn:tower-lock:layer-before-routing",
            Self::Key(_) | Self::Lock(LockError::InvalidKey(_)) => INVALID_KEY,
            Self::Body(BodyError::TooLarge { .. }) => "urn:tower-lock:request-body-too-large",
            Self::Body(_) => "urn:tower-lock:unreadable-request-body",
            Self::Lock(LockError::Busy { .. }) => "urn:tower-lock:resource-locked",
            Self::Lock(LockError::StoreUnavailable(_)) => "urn:tower-lock:lock-store-unavailable",
            Self::Lock(LockError::LeaseLost { .. }) => "urn:tower-lock:lock-lost",
            Self::Lock(LockError::Upgrade { .. } | LockError::MoreKeys { .. }) => {
                "urn:tower-lock:lock-not-reentrant"
            }
        }
    }

    /// The problem's `title`: the same for every rejection of one kind.
    pub fn title(&self) -> &'static str {
        match self {
            Self::Key(KeyError::BeforeRouting(_)) => "lock layer placed before routing",
            Self::Key(_) | Self::Lock(LockError::InvalidKey(_)) => "invalid lock key",
            Self::Body(BodyError::TooLarge { .. }) => "request body too large",
            Self::Body(_) => "unreadable request body",
            Self::Lock(LockError::Busy { .. }) => "resource is locked",
            Self::Lock(LockError::StoreUnavailable(_)) => "lock store unavailable",
            Self::Lock(LockError::LeaseLost { .. }) => "lock lost",
            Self::Lock(LockError::Upgrade { .. } | LockError::MoreKeys { .. }) => {
                "lock cannot be re-entered"
            }
        }
    }

    /// Seconds a client should wait before retrying, when retrying can help.
    ///
    /// For a busy lock: how long this process's locks are typically held (a moving average of
    /// recent hold times; 1 s before any was released), never more than the holder's
    /// remaining lease (the lock is free by then at the latest), rounded up to whole seconds
    /// and at least 1. A renewing holder's remaining lease alone says nothing about when it
    /// will be done. For an unavailable store or a lost lock: 1.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Self::Lock(LockError::Busy {
                holder_ttl,
                typical_hold,
                ..
            }) => {
                let hint = typical_hold.unwrap_or(Duration::from_secs(1));
                Some(whole_seconds(hint.min(holder_ttl.unwrap_or(Duration::MAX))))
            }
            Self::Lock(LockError::StoreUnavailable(_) | LockError::LeaseLost { .. }) => Some(1),
            Self::Key(_) | Self::Body(_) | Self::Lock(_) => None,
        }
    }

    /// The default answer: `application/problem+json` with the [`status`](Self::status), and
    /// `Retry-After` where it applies.
    pub fn into_response(self) -> Response<String> {
        let status = self.status();
        self.into_response_with_status(status)
    }

    /// The default answer with `status` instead of the default one.
    pub(crate) fn into_response_with_status(self, status: StatusCode) -> Response<String> {
        let detail = self.to_string();
        let mut response = problem(status, self.problem_type(), self.title(), &detail);
        if let Some(seconds) = self.retry_after() {
            let retry_after = HeaderValue::from(seconds);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, retry_after);
        }
        response
    }
}

/// An RFC 9457 `application/problem+json` answer.
pub(crate) fn problem(
    status: StatusCode,
    problem_type: &str,
    title: &str,
    detail: &str,
) -> Response<String> {
    let body = serde_json::json!({
        "type": problem_type,
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
    });
    let mut response = Response::new(body.to_string());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}

const INVALID_KEY: &str = "urn:tower-lock:invalid-lock-key";

/// The problem's detail: what went wrong, without store addresses or internal errors.
impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Key(error) => error.fmt(f),
            Self::Body(error) => error.fmt(f),
            Self::Lock(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for Rejection {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Key(error) => Some(error),
            Self::Body(error) => Some(error),
            Self::Lock(error) => Some(error),
        }
    }
}

impl From<KeyError> for Rejection {
    fn from(error: KeyError) -> Self {
        Self::Key(error)
    }
}

impl From<BodyError> for Rejection {
    fn from(error: BodyError) -> Self {
        Self::Body(error)
    }
}

impl From<LockError> for Rejection {
    fn from(error: LockError) -> Self {
        Self::Lock(error)
    }
}

/// A duration in whole seconds, rounded up, at least 1.
fn whole_seconds(duration: Duration) -> u64 {
    (duration.as_secs() + u64::from(duration.subsec_nanos() > 0)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{BackendError, Hold};

    const MS: Duration = Duration::from_millis(1);

    fn busy(holder_ttl: Option<Duration>, typical_hold: Option<Duration>) -> Rejection {
        Rejection::Lock(LockError::Busy {
            key: "k".into(),
            holder_ttl,
            typical_hold,
        })
    }

    fn body(response: Response<String>) -> serde_json::Value {
        serde_json::from_str(response.body()).unwrap()
    }

    #[test]
    fn retry_after_follows_typical_holds_not_the_renewed_lease() {
        let ten_seconds = Some(Duration::from_secs(10));
        assert_eq!(busy(ten_seconds, Some(300 * MS)).retry_after(), Some(1));
        assert_eq!(busy(ten_seconds, Some(2_500 * MS)).retry_after(), Some(3));
        assert_eq!(
            busy(ten_seconds, None).retry_after(),
            Some(1),
            "nothing known yet"
        );
    }

    #[test]
    fn retry_after_never_outlasts_the_holders_lease() {
        let long_holds = Some(Duration::from_secs(20));
        assert_eq!(busy(Some(4_200 * MS), long_holds).retry_after(), Some(5));
        assert_eq!(
            busy(Some(Duration::ZERO), long_holds).retry_after(),
            Some(1)
        );
    }

    #[test]
    fn busy_is_a_409_problem_with_retry_after() {
        let response = busy(Some(Duration::from_secs(5)), None).into_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        assert_eq!(
            body(response),
            serde_json::json!({
                "type": "urn:tower-lock:resource-locked",
                "title": "resource is locked",
                "status": 409,
                "detail": "lock `k` is held by another request",
            })
        );
    }

    #[test]
    fn a_missing_key_is_a_400_problem_naming_the_missing_part() {
        let response = Rejection::from(KeyError::MissingHeader("x-tenant".into())).into_response();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert!(response.headers().get(header::RETRY_AFTER).is_none());
        assert_eq!(body(response)["detail"], "header `x-tenant` is missing");
    }

    #[test]
    fn a_layer_before_routing_is_the_servers_fault() {
        let response = Rejection::from(KeyError::BeforeRouting("id".into())).into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let detail = body(response)["detail"].to_string();
        assert!(detail.contains("runs before routing"), "{detail}");
    }

    #[test]
    fn a_body_over_the_limit_is_a_413_naming_the_limit() {
        let response = Rejection::from(BodyError::TooLarge { limit: 1024 }).into_response();
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(
            body(response)["detail"],
            "the request body is larger than 1024 bytes"
        );
    }

    #[test]
    fn an_unavailable_store_is_a_503_without_internals() {
        let error =
            LockError::StoreUnavailable(BackendError::new("connection refused at 10.0.0.7"));
        let response = Rejection::from(error).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        assert_eq!(body(response)["detail"], "the lock store is unavailable");
    }

    #[test]
    fn a_lost_lock_is_a_503_with_its_own_type() {
        let response = Rejection::from(LockError::LeaseLost { key: "k".into() }).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body(response)["type"], "urn:tower-lock:lock-lost");
    }

    #[test]
    fn a_lock_that_cannot_be_reentered_is_a_server_error() {
        let error = LockError::Upgrade {
            key: "k".into(),
            held: Hold::Read,
            wanted: Hold::Write,
        };
        let response = Rejection::from(error).into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let detail = body(response)["detail"].to_string();
        assert!(
            detail.contains("as a read lock") && detail.contains("as a write lock"),
            "{detail}"
        );
    }

    #[test]
    fn the_status_can_be_replaced() {
        let response = busy(None, None).into_response_with_status(StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(body(response)["status"], 429);
    }
}
