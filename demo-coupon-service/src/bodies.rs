//! What requests carry, read by hand: every refusal is a 400 problem naming the field and what
//! it expects. (serde's derived readers would name Rust types in their errors, and read a JSON
//! array as the object.)

use std::ops::RangeInclusive;

use axum::Json;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde_json::{Map, Value};

use crate::problem::Problem;

/// The largest body any route reads (claims, `PUT`, transfers alike); a longer one is answered
/// 413, as the lock layers answer it.
pub const BODY_LIMIT: usize = 16 * 1024;

/// The most units a coupon holds: what `PUT` accepts, and what a transfer may fill it up to.
pub const MAX_STOCK: i64 = u32::MAX as i64;

/// What a coupon id is; the detail of every answer to a request naming another one.
pub(crate) const COUPON_ID_RULE: &str =
    "a coupon id is 1 to 64 characters of A-Z, a-z, 0-9, `-` and `_`";

/// The longest `user_id`, in characters.
const MAX_USER_CHARS: usize = 128;

/// Whether `id` can name a coupon.
pub(crate) fn is_coupon_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `id` if it can name a coupon, else the one answer every bad id gets.
pub(crate) fn checked_id(id: &str) -> Result<&str, Problem> {
    if is_coupon_id(id) {
        Ok(id)
    } else {
        Err(Problem::InvalidRequest(COUPON_ID_RULE.into()))
    }
}

/// The coupon id in the path (`/coupons/{id}…`), checked; a path that does not decode gets the
/// same answer as any other bad id.
#[derive(Debug)]
pub struct CouponId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for CouponId {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| Problem::InvalidRequest(COUPON_ID_RULE.into()))?;
        checked_id(&id)?;
        Ok(Self(id))
    }
}

/// Why a body could not be read whole: longer than [`BODY_LIMIT`] (413), or cut off (400).
pub(crate) fn unread_body(error: &axum::Error) -> Problem {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = cause {
        if error.is::<http_body_util::LengthLimitError>() {
            return Problem::BodyTooLarge;
        }
        cause = error.source();
    }
    Problem::InvalidRequest(format!("the body could not be read: {error}"))
}

/// A JSON object body; anything else is refused.
#[derive(Debug)]
pub struct JsonObject(Map<String, Value>);

impl<S: Send + Sync> FromRequest<S> for JsonObject {
    type Rejection = Problem;

    async fn from_request(request: Request, state: &S) -> Result<Self, Problem> {
        let Json(value) = Json::<Value>::from_request(request, state).await.map_err(
            |rejection| match rejection.status() {
                StatusCode::PAYLOAD_TOO_LARGE => Problem::BodyTooLarge,
                _ => Problem::InvalidRequest(rejection.body_text()),
            },
        )?;
        Self::of(value)
    }
}

impl JsonObject {
    /// `value`, if it is an object.
    pub(crate) fn of(value: Value) -> Result<Self, Problem> {
        match value {
            Value::Object(fields) => Ok(Self(fields)),
            _ => Err(Problem::InvalidRequest(
                "the body must be a JSON object".into(),
            )),
        }
    }

    /// The whole number `field` holds, within `range`.
    pub(crate) fn whole_number(
        &self,
        field: &str,
        range: RangeInclusive<i64>,
    ) -> Result<i64, Problem> {
        self.0
            .get(field)
            .and_then(Value::as_i64)
            .filter(|number| range.contains(number))
            .ok_or_else(|| {
                Problem::InvalidRequest(format!(
                    "`{field}` must be a whole number from {} to {}",
                    range.start(),
                    range.end()
                ))
            })
    }

    /// The string `field` holds.
    pub(crate) fn text(&self, field: &str) -> Result<&str, Problem> {
        self.0
            .get(field)
            .and_then(Value::as_str)
            .ok_or_else(|| Problem::InvalidRequest(format!("`{field}` must be a string")))
    }

    /// The coupon id `field` holds.
    pub(crate) fn coupon_id(&self, field: &str) -> Result<&str, Problem> {
        checked_id(self.text(field)?)
    }

    /// The claiming user: `user_id`, 1 to 128 characters without control characters.
    pub(crate) fn user_id(&self) -> Result<&str, Problem> {
        let user = self.text("user_id")?;
        let length = user.chars().count();
        if length == 0 || length > MAX_USER_CHARS || user.chars().any(char::is_control) {
            return Err(Problem::InvalidRequest(format!(
                "`user_id` must be 1 to {MAX_USER_CHARS} characters without control characters"
            )));
        }
        Ok(user)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn detail(problem: Problem) -> String {
        match problem {
            Problem::InvalidRequest(detail) => detail,
            other => panic!("expected an invalid request, got {other:?}"),
        }
    }

    #[test]
    fn an_array_is_no_object() {
        let refused = JsonObject::of(json!([2])).expect_err("an array is refused");
        assert!(detail(refused).contains("JSON object"));
    }

    #[test]
    fn a_refusal_names_the_field_and_what_it_expects() {
        let body = JsonObject::of(json!({ "stock": "many" })).expect("an object");
        let refused = body
            .whole_number("stock", 0..=MAX_STOCK)
            .expect_err("not a number");
        assert_eq!(
            detail(refused),
            "`stock` must be a whole number from 0 to 4294967295"
        );
    }

    #[test]
    fn user_ids_are_counted_in_characters() {
        let emoji = "😀".repeat(MAX_USER_CHARS);
        let body = JsonObject::of(json!({ "user_id": emoji })).expect("an object");
        assert_eq!(body.user_id().expect("128 characters fit"), emoji);
        let longer = JsonObject::of(json!({ "user_id": "😀".repeat(MAX_USER_CHARS + 1) }))
            .expect("an object");
        assert!(longer.user_id().is_err(), "129 characters do not");
    }
}
