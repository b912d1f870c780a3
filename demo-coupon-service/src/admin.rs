//! The operator's routes (served only with `--admin-token`): which locks are held, by whom,
//! for how long, with how many waiting — `GET /admin/locks` — and a release that frees a stuck
//! holder's lock, `DELETE /admin/locks/{key}`. Both ask for `Authorization: Bearer <token>`.

use std::fmt;
use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use serde::Deserialize;
use serde_json::{Value, json};
use tower_lock::backend::{Hold, Holding};

use crate::AppState;
use crate::locking::LockView;
use crate::problem::Problem;

/// The token the operator's routes ask for.
#[derive(Clone)]
pub struct AdminToken(Arc<str>);

impl AdminToken {
    /// The token `--admin-token` gives.
    ///
    /// # Errors
    ///
    /// One line naming the option, for a token shorter than 16 characters or with whitespace
    /// or control characters (it travels in a header).
    pub fn new(token: &str) -> Result<Self, String> {
        if token.chars().count() < 16 || token.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(
                "--admin-token: give at least 16 characters, without spaces or control \
                        characters (it travels as `Authorization: Bearer <token>`)"
                    .to_owned(),
            );
        }
        Ok(Self(token.into()))
    }

    /// Whether `headers` carry this token as `Authorization: Bearer <token>`, compared in
    /// time that does not depend on where a wrong token differs.
    fn admits(&self, headers: &HeaderMap) -> bool {
        let given = headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .unwrap_or_default();
        let (given, token) = (given.as_bytes(), self.0.as_bytes());
        let differences =
            (given.iter().zip(token)).fold(0u8, |differences, (a, b)| differences | (a ^ b));
        given.len() == token.len() && differences == 0
    }
}

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminToken(…)")
    }
}

/// `GET /admin/locks` asks for one page: keys under `prefix` (within the demo's lock prefix),
/// from `after` (the previous page's `next`) on, at most `limit` (1 to 1000, default 100).
#[derive(Debug, Default, Deserialize)]
pub struct LocksQuery {
    prefix: Option<String>,
    after: Option<String>,
    limit: Option<usize>,
}

/// The most locks one page lists.
const MAX_LIMIT: usize = 1000;

/// The held locks, each with its holders and waiters, one page at a time.
pub async fn locks(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<LocksQuery>, QueryRejection>,
) -> Result<Json<Value>, Problem> {
    admitted(&state, &headers)?;
    let Query(query) = query.map_err(|rejection| Problem::InvalidRequest(rejection.body_text()))?;
    let limit = query.limit.unwrap_or(100);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(Problem::InvalidRequest(format!(
            "limit {limit}: a page lists 1 to {MAX_LIMIT} locks"
        )));
    }
    let prefix = query.prefix.as_deref().unwrap_or_default();
    let page = (state.locking)
        .locks_now(prefix, query.after.as_deref(), limit)
        .await?;
    let locks: Vec<Value> = page.locks.iter().map(lock_json).collect();
    Ok(Json(json!({
        "store": state.locking.name(),
        "locks": locks,
        "next": page.next,
    })))
}

/// Frees the lock on `key` whatever its holders: they lose their leases, and a fenced write
/// of theirs is refused. 404 when nobody holds it.
pub async fn release(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Result<Json<Value>, Problem> {
    admitted(&state, &headers)?;
    let freed = state.locking.force_release(&key).await?;
    if freed.is_empty() {
        return Err(Problem::NoSuchLock(key));
    }
    let freed: Vec<Value> = freed.iter().map(holder_json).collect();
    Ok(Json(json!({ "key": key, "released": freed })))
}

/// Admits a request with the admin token; a missing or wrong one is 401, saying nothing of
/// what exists.
fn admitted(state: &AppState, headers: &HeaderMap) -> Result<(), Problem> {
    match &state.admin_token {
        Some(token) if token.admits(headers) => Ok(()),
        _ => Err(Problem::Unauthorized),
    }
}

fn lock_json(lock: &LockView) -> Value {
    let holders: Vec<Value> = lock.state.holders.iter().map(holder_json).collect();
    json!({ "key": lock.key, "holders": holders, "waiting": lock.state.waiting })
}

fn holder_json(holder: &Holding) -> Value {
    let (shape, permits) = match holder.hold {
        Hold::Mutex => ("mutex", None),
        Hold::Write => ("write", None),
        Hold::Read => ("read", None),
        Hold::Permit { permits } => ("permit", Some(permits.get())),
        _ => ("other", None),
    };
    json!({
        "shape": shape,
        "permits": permits,
        "holder": holder.label,
        // A string: fences pass 2^53, past what a JSON reader's number keeps exactly.
        "fence": holder.fence.map(|fence| fence.get().to_string()),
        "held_for_ms": holder.held_for.as_millis(),
        "lease_left_ms": holder.lease_left.map(|left| left.as_millis()),
    })
}
