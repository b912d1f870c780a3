//! The HTTP handlers. The claim handler is written the ordinary, non-atomic way.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use tower_lock::{FencingToken, LockGuard};

use crate::AppState;
use crate::problem::Problem;

/// `PUT /coupons/{id}` body.
#[derive(Debug, Deserialize)]
pub struct ResetRequest {
    stock: u32,
}

/// `POST /coupons/{id}/claim` body.
#[derive(Debug, Deserialize)]
pub struct ClaimRequest {
    user_id: String,
}

/// What a coupon id is; the detail of every answer to a request naming another one.
pub(crate) const COUPON_ID_RULE: &str =
    "a coupon id is 1 to 64 characters of A-Z, a-z, 0-9, `-` and `_`";

/// Whether `id` can name a coupon.
pub(crate) fn is_coupon_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

pub(crate) fn checked_id(id: &str) -> Result<&str, Problem> {
    if is_coupon_id(id) {
        Ok(id)
    } else {
        Err(Problem::InvalidRequest(COUPON_ID_RULE.into()))
    }
}

/// The claiming user from a claim's body: 1 to 128 characters without control characters.
pub(crate) fn checked_user(
    body: Result<Json<ClaimRequest>, JsonRejection>,
) -> Result<String, Problem> {
    let user = checked_body(body)?.user_id;
    if user.is_empty() || user.len() > 128 || user.chars().any(char::is_control) {
        return Err(Problem::InvalidRequest(
            "user_id is 1 to 128 characters without control characters".into(),
        ));
    }
    Ok(user)
}

pub(crate) fn checked_body<T>(body: Result<Json<T>, JsonRejection>) -> Result<T, Problem> {
    body.map(|Json(body)| body)
        .map_err(|rejection| Problem::InvalidRequest(rejection.body_text()))
}

/// Creates a coupon, or resets it to a new stock with no claims.
pub async fn reset(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Result<Json<ResetRequest>, JsonRejection>,
) -> Result<Json<Value>, Problem> {
    let id = checked_id(&id)?;
    let stock = checked_body(body)?.stock;
    state.store.reset(id, i64::from(stock)).await?;
    state.recent.touched(id);
    Ok(Json(json!({ "coupon_id": id, "stock": stock })))
}

/// Claims one unit for a user: read the stock, check the user, work, write. Correct only
/// while no other claim on the same coupon runs at the same time — and the read and the write
/// carry the lock's fencing token, so a holder that lost its lock meanwhile (paused past its
/// lease) cannot write over the next holder's claim.
pub async fn claim(
    State(state): State<AppState>,
    Path(id): Path<String>,
    lock: Option<LockGuard>,
    body: Result<Json<ClaimRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Value>), Problem> {
    let id = checked_id(&id)?;
    let user = checked_user(body)?;

    let fence = lock
        .as_ref()
        .filter(|_| state.lock.fence_writes)
        .and_then(LockGuard::fence)
        .map(FencingToken::get);
    let stock = state
        .store
        .stock(id, fence)
        .await?
        .ok_or(Problem::CouponNotFound)?;
    if stock.remaining <= 0 {
        return Err(Problem::SoldOut);
    }
    if state.store.has_claim(id, &user).await? {
        return Err(Problem::AlreadyClaimed);
    }
    state.simulate_work().await;
    let remaining = stock.remaining - 1;
    if !state
        .store
        .commit_claim(id, &user, remaining, fence)
        .await?
    {
        tracing::warn!(
            coupon = id,
            user,
            "claim refused: a newer lock holder has read the coupon"
        );
        if let Some(lock) = &lock {
            lock.report_fenced_write_refused();
        }
        return Err(Problem::LockLost(id.to_owned()));
    }
    tracing::debug!(coupon = id, user, remaining, "claimed");
    Ok((
        StatusCode::CREATED,
        Json(json!({ "coupon_id": id, "user_id": user, "remaining": remaining })),
    ))
}

/// The coupon's stock and claim records, and how far it is oversold.
pub async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, Problem> {
    let id = checked_id(&id)?;
    let summary = state
        .store
        .summary(id)
        .await?
        .ok_or(Problem::CouponNotFound)?;
    Ok(Json(json!({
        "coupon_id": id,
        "supply": summary.stock.supply,
        "remaining": summary.stock.remaining,
        "claimed": summary.claimed,
        "oversold": (summary.claimed - summary.stock.supply).max(0),
        "duplicate_claims": summary.duplicate_claims,
    })))
}

/// An expensive report on a coupon; at most `--audit-permits` run at once across all replicas.
/// The answer says how many audits were running (counted in the shared store) while it ran.
pub async fn audit(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, Problem> {
    let id = checked_id(&id)?;
    let summary = state
        .store
        .summary(id)
        .await?
        .ok_or(Problem::CouponNotFound)?;
    let running = state.store.audit_started().await?;
    state.simulate_work().await;
    state.store.audit_finished().await?;
    Ok(Json(json!({
        "coupon_id": id,
        "running_audits": running,
        "claimed": summary.claimed,
        "oversold": (summary.claimed - summary.stock.supply).max(0),
    })))
}

/// Any path that is no route: 404, as a problem.
pub async fn no_such_route() -> Problem {
    Problem::NoSuchRoute
}

/// A route asked with a method it does not serve: 405, as a problem.
pub async fn method_not_allowed() -> Problem {
    Problem::MethodNotAllowed
}

/// Liveness.
pub async fn healthz() -> &'static str {
    "ok"
}
