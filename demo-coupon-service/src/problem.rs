//! The demo's own error answers, as RFC 9457 problem details.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use axum::response::IntoResponse;
use serde_json::json;
use tower_lock::{BodyError, LockError, Rejection};

use crate::bodies::{BODY_LIMIT, COUPON_ID_RULE, MAX_STOCK};

/// Why a coupon request was refused. Each has its own problem `type`, distinct from the lock
/// layer's (`urn:tower-lock:*`), so a client can tell "sold out" from "busy, retry".
#[derive(Debug)]
pub enum Problem {
    /// The path or body is malformed.
    InvalidRequest(String),
    /// The body is longer than [`BODY_LIMIT`]: answered 413 as the lock layers answer it.
    ///
    /// [`BODY_LIMIT`]: crate::bodies::BODY_LIMIT
    BodyTooLarge,
    /// No coupon with this id.
    CouponNotFound,
    /// No route has this path.
    NoSuchRoute,
    /// The route does not serve this method.
    MethodNotAllowed,
    /// No stock left.
    SoldOut,
    /// This user already holds the coupon.
    AlreadyClaimed,
    /// A transfer asks for more than the source coupon has left.
    InsufficientStock,
    /// A transfer would fill the target coupon past [`MAX_STOCK`] units.
    ///
    /// [`MAX_STOCK`]: crate::bodies::MAX_STOCK
    StockLimit,
    /// The coupon store failed.
    StoreUnavailable,
    /// `--optimistic`: the coupon kept changing under the claim or transfer, for every one of
    /// its attempts; retrying later may succeed.
    WriteConflict,
    /// The operator's routes: no admin token, or a wrong one.
    Unauthorized,
    /// The operator's release: nobody holds a lock on this key.
    NoSuchLock(String),
    /// The operator's routes: the locker refused the key, or the lock store failed, answered
    /// as the lock layer answers it (status, headers, problem document).
    Locking(Box<(StatusCode, HeaderMap, String)>),
    /// The claim's fenced write was refused: its lock on this coupon was lost and taken by a
    /// newer holder. Answered like the lock layer's own lost-lock abort (503 `lock-lost`).
    LockLost(String),
}

impl Problem {
    /// The answer, with a body any HTTP stack can send.
    pub fn to_response(&self) -> Response<String> {
        let (status, kind, title) = match self {
            Self::InvalidRequest(_) => (
                StatusCode::BAD_REQUEST,
                "invalid-request",
                "invalid request",
            ),
            Self::CouponNotFound => (StatusCode::NOT_FOUND, "coupon-not-found", "no such coupon"),
            Self::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "this route needs the admin token: Authorization: Bearer <token>",
            ),
            Self::NoSuchLock(_) => (
                StatusCode::NOT_FOUND,
                "no-such-lock",
                "nobody holds this lock",
            ),
            Self::Locking(answer) => {
                let (status, headers, body) = answer.as_ref();
                let mut response = Response::new(body.clone());
                (*response.status_mut(), *response.headers_mut()) = (*status, headers.clone());
                return response;
            }
            Self::NoSuchRoute => (StatusCode::NOT_FOUND, "no-such-route", "no such route"),
            Self::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                "method-not-allowed",
                "method not allowed on this route",
            ),
            Self::SoldOut => (StatusCode::GONE, "sold-out", "coupon is sold out"),
            Self::AlreadyClaimed => (
                StatusCode::CONFLICT,
                "already-claimed",
                "this user already holds the coupon",
            ),
            Self::InsufficientStock => (
                StatusCode::CONFLICT,
                "insufficient-stock",
                "the source coupon has not that much stock left",
            ),
            Self::StockLimit => (
                StatusCode::CONFLICT,
                "stock-limit",
                "the target coupon would hold more than the most a coupon holds",
            ),
            Self::WriteConflict => (
                StatusCode::CONFLICT,
                "write-conflict",
                "the coupon kept changing under this request; retry",
            ),
            Self::StoreUnavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "store-unavailable",
                "coupon store unavailable",
            ),
            Self::BodyTooLarge => {
                let too_large = BodyError::TooLarge { limit: BODY_LIMIT };
                return Rejection::Body(too_large).into_response();
            }
            Self::LockLost(coupon) => {
                let key = format!("coupon:{coupon}");
                return Rejection::from(LockError::LeaseLost { key }).into_response();
            }
        };
        let mut body = json!({
            "type": format!("urn:coupon-demo:{kind}"),
            "title": title,
            "status": status.as_u16(),
        });
        match self {
            Self::InvalidRequest(detail) => body["detail"] = json!(detail),
            Self::NoSuchLock(key) => body["detail"] = json!(format!("no holder of {key:?}")),
            Self::StockLimit => {
                body["detail"] = json!(format!("a coupon holds at most {MAX_STOCK} units"));
            }
            _ => {}
        }
        let mut response = Response::new(body.to_string());
        *response.status_mut() = status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if matches!(self, Self::Unauthorized) {
            (response.headers_mut())
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> axum::response::Response {
        self.to_response().map(Body::from)
    }
}

/// The lock layers' answers: every lock key is a coupon id, so a request whose key is bad
/// gets the answer a handler gives a bad id; every other rejection keeps the layer's problem
/// document.
pub fn lock_rejection(rejection: Rejection) -> Response<String> {
    match rejection {
        Rejection::Key(error) => {
            tracing::debug!(%error, "a request names no valid coupon id");
            Problem::InvalidRequest(COUPON_ID_RULE.into()).to_response()
        }
        other => other.into_response(),
    }
}

impl From<LockError> for Problem {
    fn from(error: LockError) -> Self {
        let (parts, body) = Rejection::from(error).into_response().into_parts();
        Self::Locking(Box::new((parts.status, parts.headers, body)))
    }
}

impl From<crate::store::StoreError> for Problem {
    fn from(error: crate::store::StoreError) -> Self {
        tracing::warn!(error = error.0, "coupon store failed");
        Self::StoreUnavailable
    }
}
