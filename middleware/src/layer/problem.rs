//! How the layer answers instead of the handler: RFC 9457 `application/problem+json`.

use std::time::Duration;

use http::{HeaderValue, Response, StatusCode, header};

use crate::LockError;
use crate::key::KeyError;

/// `Retry-After` for an unavailable store or a lost lock, in seconds.
const STORE_RETRY_AFTER_SECS: u64 = 1;

/// The parts of a problem answer.
struct Problem {
    status: StatusCode,
    kind: &'static str,
    title: &'static str,
    detail: String,
    retry_after: Option<u64>,
}

impl Problem {
    fn into_response<B: From<String>>(self) -> Response<B> {
        let body = serde_json::json!({
            "type": self.kind,
            "title": self.title,
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        let mut response = Response::new(B::from(body.to_string()));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// The 400 answer to a request whose lock key could not be found.
pub(crate) fn key_problem<B: From<String>>(error: &KeyError) -> Response<B> {
    Problem {
        status: StatusCode::BAD_REQUEST,
        kind: INVALID_KEY,
        title: INVALID_KEY_TITLE,
        detail: error.to_string(),
        retry_after: None,
    }
    .into_response()
}

const INVALID_KEY: &str = "urn:tower-lock:invalid-lock-key";
const INVALID_KEY_TITLE: &str = "invalid lock key";

/// The layer's answers to a [`LockError`].
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use tower_lock::LockError;
///
/// let busy = LockError::Busy { key: "coupon:42".into(), holder_ttl: Some(Duration::from_millis(1200)) };
/// let response = busy.into_response::<String>();
/// assert_eq!(response.status(), 409);
/// assert_eq!(response.headers()["retry-after"], "2");
/// assert_eq!(response.headers()["content-type"], "application/problem+json");
/// ```
impl LockError {
    /// The answer's status: 409 when busy, 400 for a bad key, 503 when the store is down or the
    /// lock was lost, 500 when nested locks cannot be re-entered (a configuration error). The
    /// layer's `busy_status` replaces 409.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Busy { .. } => StatusCode::CONFLICT,
            Self::InvalidKey(_) => StatusCode::BAD_REQUEST,
            Self::StoreUnavailable(_) | Self::LeaseLost { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Upgrade { .. } | Self::MoreKeys { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The problem's `type`: a stable URI that clients can match on.
    pub fn problem_type(&self) -> &'static str {
        match self {
            Self::Busy { .. } => "urn:tower-lock:resource-locked",
            Self::InvalidKey(_) => INVALID_KEY,
            Self::StoreUnavailable(_) => "urn:tower-lock:lock-store-unavailable",
            Self::LeaseLost { .. } => "urn:tower-lock:lock-lost",
            Self::Upgrade { .. } | Self::MoreKeys { .. } => "urn:tower-lock:lock-not-reentrant",
        }
    }

    /// The problem's `title`: the same for every occurrence of the variant.
    pub fn title(&self) -> &'static str {
        match self {
            Self::Busy { .. } => "resource is locked",
            Self::InvalidKey(_) => INVALID_KEY_TITLE,
            Self::StoreUnavailable(_) => "lock store unavailable",
            Self::LeaseLost { .. } => "lock lost",
            Self::Upgrade { .. } | Self::MoreKeys { .. } => "lock cannot be re-entered",
        }
    }

    /// Seconds a client should wait before retrying, when retrying can help: the holder's
    /// remaining lease rounded up (at least 1), or 1 for an unavailable store or a lost lock.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Self::Busy { holder_ttl, .. } => Some(whole_seconds(*holder_ttl)),
            Self::StoreUnavailable(_) | Self::LeaseLost { .. } => Some(STORE_RETRY_AFTER_SECS),
            Self::InvalidKey(_) | Self::Upgrade { .. } | Self::MoreKeys { .. } => None,
        }
    }

    /// The `application/problem+json` response, with `Retry-After` where it applies.
    pub fn into_response<B: From<String>>(self) -> Response<B> {
        let status = self.status();
        self.into_response_with_status(status)
    }

    pub(crate) fn into_response_with_status<B: From<String>>(
        self,
        status: StatusCode,
    ) -> Response<B> {
        Problem {
            status,
            kind: self.problem_type(),
            title: self.title(),
            detail: self.to_string(),
            retry_after: self.retry_after(),
        }
        .into_response()
    }
}

/// A remaining lease in whole seconds, rounded up, at least 1 (1 when unknown).
fn whole_seconds(ttl: Option<Duration>) -> u64 {
    ttl.map(|ttl| ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0))
        .unwrap_or(1)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{BackendError, Hold};

    fn busy(holder_ttl: Option<Duration>) -> LockError {
        LockError::Busy {
            key: "k".into(),
            holder_ttl,
        }
    }

    fn body(response: Response<String>) -> serde_json::Value {
        serde_json::from_str(response.body()).unwrap()
    }

    #[test]
    fn retry_after_rounds_the_holders_lease_up_to_whole_seconds() {
        let ms = Duration::from_millis;
        assert_eq!(busy(Some(ms(1))).retry_after(), Some(1));
        assert_eq!(busy(Some(ms(1000))).retry_after(), Some(1));
        assert_eq!(busy(Some(ms(1001))).retry_after(), Some(2));
        assert_eq!(busy(Some(ms(29_500))).retry_after(), Some(30));
        assert_eq!(busy(Some(Duration::ZERO)).retry_after(), Some(1));
        assert_eq!(busy(None).retry_after(), Some(1));
    }

    #[test]
    fn busy_is_a_409_problem_with_retry_after() {
        let response: Response<String> = busy(Some(Duration::from_secs(5))).into_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(response.headers()[header::RETRY_AFTER], "5");
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
        let response: Response<String> = key_problem(&KeyError::MissingHeader("x-tenant".into()));
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert!(response.headers().get(header::RETRY_AFTER).is_none());
        assert_eq!(body(response)["detail"], "header `x-tenant` is missing");
    }

    #[test]
    fn an_unavailable_store_is_a_503_without_internals() {
        let error =
            LockError::StoreUnavailable(BackendError::new("connection refused at 10.0.0.7"));
        let response: Response<String> = error.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        assert_eq!(body(response)["detail"], "the lock store is unavailable");
    }

    #[test]
    fn a_lost_lock_is_a_503_with_its_own_type() {
        let response: Response<String> = LockError::LeaseLost { key: "k".into() }.into_response();
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
        let response: Response<String> = error.into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let detail = body(response)["detail"].to_string();
        assert!(
            detail.contains("as a read lock") && detail.contains("as a write lock"),
            "{detail}"
        );
    }

    #[test]
    fn the_busy_status_can_be_replaced() {
        let response: Response<String> =
            busy(None).into_response_with_status(StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(body(response)["status"], 429);
    }
}
