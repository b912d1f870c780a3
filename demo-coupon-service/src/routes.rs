//! The HTTP handlers. The claim handler is written the ordinary, non-atomic way.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};
use tower_lock::{FencingToken, LockGuard};

use crate::AppState;
use crate::bodies::{CouponId, JsonObject, MAX_STOCK};
use crate::problem::Problem;

/// Creates a coupon, or resets it to a new stock with no claims.
pub async fn reset(
    State(state): State<AppState>,
    CouponId(id): CouponId,
    body: JsonObject,
) -> Result<Json<Value>, Problem> {
    let id = id.as_str();
    let stock = body.whole_number("stock", 0..=MAX_STOCK)?;
    state.store.reset(id, stock).await?;
    Ok(Json(json!({ "coupon_id": id, "stock": stock })))
}

/// Claims one unit for a user: read the stock, check the user, work, write. Correct only
/// while no other claim on the same coupon runs at the same time — and the read and the write
/// carry the lock's fencing token, so a holder that lost its lock meanwhile (paused past its
/// lease) cannot write over the next holder's claim.
pub async fn claim(
    State(state): State<AppState>,
    CouponId(id): CouponId,
    lock: Option<LockGuard>,
    body: JsonObject,
) -> Result<(StatusCode, Json<Value>), Problem> {
    let (id, user) = (id.as_str(), body.user_id()?);

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
    if state.store.has_claim(id, user).await? {
        return Err(Problem::AlreadyClaimed);
    }
    state.simulate_work().await;
    let remaining = stock.remaining - 1;
    if !state.store.commit_claim(id, user, remaining, fence).await? {
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
    CouponId(id): CouponId,
) -> Result<Json<Value>, Problem> {
    let id = id.as_str();
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
    CouponId(id): CouponId,
) -> Result<Json<Value>, Problem> {
    let id = id.as_str();
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
