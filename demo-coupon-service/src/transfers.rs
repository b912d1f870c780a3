//! `POST /transfers`: move stock between two coupons, under a lock on both.
//!
//! The coupons are named in the JSON body, which the lock layer cannot see: a small middleware
//! in front of it reads them into the request's extensions ([`name_coupons`]), and the layer's
//! multi-key extractor ([`lock_keys`]) takes them from there. Like the claim, the transfer is
//! written the ordinary, non-atomic way: read both stocks, work, write both.

use axum::Json;
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tower_lock::key::KeyError;

use crate::AppState;
use crate::bodies::{BODY_LIMIT, JsonObject, MAX_STOCK, unread_body};
use crate::problem::Problem;
use crate::store::Stock;

/// `POST /transfers` body: `{"from", "to", "amount"}`, two different coupons and a positive
/// amount.
#[derive(Debug)]
pub struct TransferRequest {
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) amount: i64,
}

impl TransferRequest {
    /// The transfer `body` asks for, checked.
    pub(crate) fn read(body: &JsonObject) -> Result<Self, Problem> {
        let (from, to) = (body.coupon_id("from")?, body.coupon_id("to")?);
        let amount = body.whole_number("amount", 1..=MAX_STOCK)?;
        if from == to {
            return Err(Problem::InvalidRequest(
                "a transfer moves stock between two different coupons".into(),
            ));
        }
        Ok(Self {
            from: from.to_owned(),
            to: to.to_owned(),
            amount,
        })
    }
}

/// The coupons a transfer names, for its lock.
#[derive(Clone, Debug)]
struct TransferCoupons([String; 2]);

/// Reads the coupons a transfer names into the request, so the lock layer can take both. A
/// body that is no transfer is answered here, as the handler would answer it.
pub async fn name_coupons(request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let bytes = match to_bytes(body, BODY_LIMIT).await {
        Ok(bytes) => bytes,
        Err(error) => return unread_body(&error).into_response(),
    };
    let transfer = serde_json::from_slice(&bytes)
        .map_err(|error| Problem::InvalidRequest(format!("the body is no JSON: {error}")))
        .and_then(JsonObject::of)
        .and_then(|body| TransferRequest::read(&body));
    match transfer {
        Ok(TransferRequest { from, to, .. }) => {
            parts.extensions.insert(TransferCoupons([from, to]));
        }
        Err(problem) => return problem.into_response(),
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// The transfer's lock keys: both coupons, `coupon:{id}` as the claims lock them.
pub fn lock_keys(parts: &Parts) -> Result<Vec<String>, KeyError> {
    let TransferCoupons(coupons) = parts
        .extensions
        .get::<TransferCoupons>()
        .ok_or_else(|| KeyError::invalid("the transfer's coupons were not read"))?;
    Ok(coupons
        .iter()
        .map(|coupon| format!("coupon:{coupon}"))
        .collect())
}

/// Moves `amount` units of remaining stock from one coupon to another.
pub async fn transfer(
    State(state): State<AppState>,
    body: JsonObject,
) -> Result<Json<Value>, Problem> {
    let TransferRequest { from, to, amount } = TransferRequest::read(&body)?;
    let (from, to) = (from.as_str(), to.as_str());
    let source = state
        .store
        .stock(from, None)
        .await?
        .ok_or(Problem::CouponNotFound)?;
    let target = state
        .store
        .stock(to, None)
        .await?
        .ok_or(Problem::CouponNotFound)?;
    state.simulate_work().await;
    let (source, target) = moved(source, target, amount)?;
    state.store.set_stock(from, source).await?;
    state.store.set_stock(to, target).await?;
    Ok(transferred(from, to, amount, source, target))
}

/// The stocks after moving `amount` units from `source` to `target`. The units move with their
/// supply, so that neither coupon counts as oversold when the moved units are claimed where
/// they went; the target may not hold more than [`MAX_STOCK`] units.
pub(crate) fn moved(source: Stock, target: Stock, amount: i64) -> Result<(Stock, Stock), Problem> {
    if source.remaining < amount {
        return Err(Problem::InsufficientStock);
    }
    if target.remaining > MAX_STOCK - amount {
        return Err(Problem::StockLimit);
    }
    let moved = |stock: Stock, by: i64| Stock {
        supply: stock.supply + by,
        remaining: stock.remaining + by,
    };
    Ok((moved(source, -amount), moved(target, amount)))
}

/// The answer to a transfer done.
pub(crate) fn transferred(
    from: &str,
    to: &str,
    amount: i64,
    source: Stock,
    target: Stock,
) -> Json<Value> {
    Json(json!({
        "from": from,
        "to": to,
        "amount": amount,
        "from_remaining": source.remaining,
        "to_remaining": target.remaining,
    }))
}
