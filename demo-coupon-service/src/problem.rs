//! The demo's own error answers, as RFC 9457 problem details.

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tower_lock::LockError;

/// Why a coupon request was refused. Each has its own problem `type`, distinct from the lock
/// layer's (`urn:tower-lock:*`), so a client can tell "sold out" from "busy, retry".
#[derive(Debug)]
pub enum Problem {
    /// The path or body is malformed.
    InvalidRequest(String),
    /// No coupon with this id.
    CouponNotFound,
    /// No stock left.
    SoldOut,
    /// This user already holds the coupon.
    AlreadyClaimed,
    /// A transfer asks for more than the source coupon has left.
    InsufficientStock,
    /// The coupon store failed.
    StoreUnavailable,
    /// The claim's fenced write was refused: its lock on this coupon was lost and taken by a
    /// newer holder. Answered like the lock layer's own lost-lock abort (503 `lock-lost`).
    LockLost(String),
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let (status, kind, title) = match &self {
            Self::InvalidRequest(_) => (
                StatusCode::BAD_REQUEST,
                "invalid-request",
                "invalid request",
            ),
            Self::CouponNotFound => (StatusCode::NOT_FOUND, "coupon-not-found", "no such coupon"),
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
            Self::StoreUnavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "store-unavailable",
                "coupon store unavailable",
            ),
            Self::LockLost(coupon) => {
                let key = format!("coupon:{coupon}");
                return LockError::LeaseLost { key }.into_response();
            }
        };
        let mut body = json!({
            "type": format!("urn:coupon-demo:{kind}"),
            "title": title,
            "status": status.as_u16(),
        });
        if let Self::InvalidRequest(detail) = &self {
            body["detail"] = json!(detail);
        }
        let mut response = (status, Json(body)).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/problem+json"),
        );
        response
    }
}

impl From<crate::store::StoreError> for Problem {
    fn from(error: crate::store::StoreError) -> Self {
        tracing::warn!(error = error.0, "coupon store failed");
        Self::StoreUnavailable
    }
}
