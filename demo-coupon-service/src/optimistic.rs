//! `--optimistic`: the seed's alternative to the lock, on a SQL store. No lock at all: a claim
//! (or transfer) reads the coupon with its version, does its work, and writes only if the
//! version is unchanged (`UPDATE … WHERE version = $read_version`); when another write came
//! first, it reads again and retries. It never oversells either; under contention it pays in
//! retries what the lock pays in waiting.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::AppState;
use crate::bodies::{CouponId, JsonObject};
use crate::problem::Problem;
use crate::store::{SqlStore, Versioned};
use crate::transfers::{TransferRequest, moved, transferred};

/// How many times a claim or transfer reads and tries to write before it gives up with 409
/// `write-conflict`.
pub const MAX_ATTEMPTS: u32 = 100;

/// The SQL store, which the optimistic mode needs (the options refuse it on any other).
fn sql(state: &AppState) -> Result<&SqlStore, Problem> {
    state.store.sql().ok_or(Problem::StoreUnavailable)
}

/// Claims one unit for a user, retrying on a concurrent write. The answer says how many
/// attempts it took (`attempts`: 1 when nobody wrote in between).
pub async fn claim(
    State(state): State<AppState>,
    CouponId(id): CouponId,
    body: JsonObject,
) -> Result<(StatusCode, Json<Value>), Problem> {
    let (id, user) = (id.as_str(), body.user_id()?);
    let store = sql(&state)?;
    for attempt in 1..=MAX_ATTEMPTS {
        let read = store
            .versioned_stock(id)
            .await?
            .ok_or(Problem::CouponNotFound)?;
        if read.stock.remaining <= 0 {
            return Err(Problem::SoldOut);
        }
        if state.store.has_claim(id, user).await? {
            return Err(Problem::AlreadyClaimed);
        }
        state.simulate_work().await;
        let remaining = read.stock.remaining - 1;
        if store
            .commit_claim_at(id, user, remaining, read.version)
            .await?
        {
            return Ok((
                StatusCode::CREATED,
                Json(json!({
                    "coupon_id": id,
                    "user_id": user,
                    "remaining": remaining,
                    "attempts": attempt,
                })),
            ));
        }
    }
    Err(Problem::WriteConflict)
}

/// Moves stock between two coupons, retrying on a concurrent write to either.
pub async fn transfer(
    State(state): State<AppState>,
    body: JsonObject,
) -> Result<Json<Value>, Problem> {
    let TransferRequest { from, to, amount } = TransferRequest::read(&body)?;
    let (from, to) = (from.as_str(), to.as_str());
    let store = sql(&state)?;
    for _ in 0..MAX_ATTEMPTS {
        let read = |id| async move {
            store
                .versioned_stock(id)
                .await?
                .ok_or(Problem::CouponNotFound)
        };
        let (source, target) = (read(from).await?, read(to).await?);
        let (moved_source, moved_target) = moved(source.stock, target.stock, amount)?;
        state.simulate_work().await;
        let writes = [
            (
                from,
                Versioned {
                    stock: moved_source,
                    ..source
                },
            ),
            (
                to,
                Versioned {
                    stock: moved_target,
                    ..target
                },
            ),
        ];
        if store.set_stocks_at(&writes).await? {
            return Ok(transferred(from, to, amount, moved_source, moved_target));
        }
    }
    Err(Problem::WriteConflict)
}
