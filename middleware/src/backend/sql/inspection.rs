//! The operator's view of the SQL stores' lease rows: the holders a lock's row records (the
//! exclusive holder's label, start and fence in its columns, readers' and permit holders' in
//! the `holders` map beside their expiries), the waiters it counts, held names paged in name
//! order, and the operator's release through each holder's own release.

use std::future::Future;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::backend::store_support::recorded_holder::{RecordedHolder, lock_state};
use crate::backend::store_support::ticket_rules::Tickets;
use crate::backend::{
    BackendError, FencingToken, Hold, Holding, Inspect, Listing, LockBackend, LockState, TokenLease,
};
use crate::token::OwnerToken;

/// A lock's row as an operator reads it: the database's now (ms since the epoch), the live
/// exclusive owner (`NULL` when free), its label, since when it holds (ms), when its lease
/// ends (ms), the row's fence, whether the holder is a writer, the tickets, and how many
/// waiting writers and readers' claims stand.
pub(in crate::backend) type LockRow = (
    i64,
    Option<String>,
    Option<String>,
    Option<i64>,
    Option<i64>,
    i64,
    bool,
    String,
    i64,
);

/// A live shared holder as its row records it: owner token, label, since (ms), its lease's end
/// (ms), permits (0 for a reader).
pub(in crate::backend) type SharedRow = (String, Option<String>, Option<i64>, i64, i64);

/// How many rows one page of the listing reads, per name asked for: rows of free locks stay
/// (a lease row's fence must keep counting), so a page passes over some.
const ROWS_PER_NAME: usize = 4;

/// A SQL backend whose rows an operator can read; its [`Inspect`] follows.
pub(in crate::backend) trait RowInspection:
    LockBackend<Lease = TokenLease>
{
    /// `name`'s row, if it has one.
    fn lock_row(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<LockRow>, BackendError>> + Send;

    /// `name`'s live shared holders.
    fn shared_rows(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Vec<SharedRow>, BackendError>> + Send;

    /// Up to `rows` names after `after` (from `prefix` on, in the name column's byte order),
    /// each with whether it is held now.
    fn name_page(
        &self,
        prefix: &str,
        after: &str,
        rows: usize,
    ) -> impl Future<Output = Result<Vec<(String, bool)>, BackendError>> + Send;
}

/// The lease rows' holders: the exclusive holder's label, start and fence are written by the
/// statement that grants the lock — except a lock a release hands on through the queue to a
/// waiter of another process, whose label its holder's first renewal writes (until then it
/// shows empty). Waiters counted: tickets in the row's queue, waiting writers and readers'
/// claims; a waiter that polls, or listens without a ticket, leaves nothing to count.
/// Listing reads the name index in order, a bounded number of rows per page.
impl<B: RowInspection + Sync> Inspect for B {
    async fn inspect(&self, name: &str) -> Result<LockState, BackendError> {
        Ok(lock_state(recorded(self, name).await?))
    }

    async fn held_names(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Listing, BackendError> {
        let after = after.unwrap_or("");
        list_held(prefix, limit, |rows| self.name_page(prefix, after, rows)).await
    }

    async fn force_release(&self, name: &str, _by: &str) -> Result<Vec<Holding>, BackendError> {
        let (holders, _) = recorded(self, name).await?;
        let mut freed = Vec::new();
        for holder in holders {
            if self.release(name, &holder.handle).await? {
                freed.push(holder.holding);
            }
        }
        Ok(freed)
    }
}

/// One page of the held names under `prefix`, at most `limit`, from the rows `name_page` reads
/// (at most the number it is given, in name order from the page's start on, each with whether
/// it is held): a page that read all it asked for is followed by another.
pub(in crate::backend) async fn list_held<F>(
    prefix: &str,
    limit: usize,
    name_page: impl FnOnce(usize) -> F,
) -> Result<Listing, BackendError>
where
    F: Future<Output = Result<Vec<(String, bool)>, BackendError>>,
{
    let limit = limit.max(1);
    let rows = limit.saturating_mul(ROWS_PER_NAME);
    let page = name_page(rows).await?;
    let last_read = (page.len() == rows)
        .then(|| page.last().map(|(name, _)| name.clone()))
        .flatten();
    let mut names = Vec::new();
    for (name, held) in page {
        if !name.starts_with(prefix) {
            return Ok(Listing::new(names, None));
        }
        if held {
            names.push(name);
            if names.len() == limit {
                let next = names.last().cloned();
                return Ok(Listing::new(names, next));
            }
        }
    }
    Ok(Listing::new(names, last_read))
}

/// Every holder `name`'s row records, and how many wait.
async fn recorded<B: RowInspection>(
    backend: &B,
    name: &str,
) -> Result<(Vec<RecordedHolder<TokenLease>>, usize), BackendError> {
    let Some(row) = backend.lock_row(name).await? else {
        return Ok((Vec::new(), 0));
    };
    let (now, owner, label, since, expires, fence, is_writer, tickets, marks) = row;
    let mut holders = Vec::new();
    if let Some(token) = owner.as_deref().and_then(OwnerToken::parse) {
        let hold = if is_writer { Hold::Write } else { Hold::Mutex };
        let lease_left = expires.map(|expires| millis_from(now, expires));
        let held_for = since.map_or(Duration::ZERO, |since| millis_from(since, now));
        let fence = u64::try_from(fence).ok().map(FencingToken::new);
        holders.push(RecordedHolder {
            handle: TokenLease::new(token, hold),
            holding: Holding::new(hold, label.unwrap_or_default(), held_for, lease_left)
                .fence(fence),
        });
    }
    let shared = backend.shared_rows(name).await?;
    for (owner, label, since, expires, permits) in shared {
        let Some(token) = OwnerToken::parse(&owner) else {
            continue;
        };
        let permits = u32::try_from(permits).ok().and_then(NonZeroU32::new);
        let hold = permits.map_or(Hold::Read, |permits| Hold::Permit { permits });
        let held_for = since.map_or(Duration::ZERO, |since| millis_from(since, now));
        let lease_left = Some(millis_from(now, expires));
        holders.push(RecordedHolder {
            handle: TokenLease::new(token, hold),
            holding: Holding::new(hold, label.unwrap_or_default(), held_for, lease_left),
        });
    }
    let tickets = Tickets::parse(&tickets, now.saturating_mul(1000)).0.len();
    Ok((holders, tickets + usize::try_from(marks).unwrap_or(0)))
}

/// The milliseconds from `from` to `to` (none when `to` came first).
fn millis_from(from: i64, to: i64) -> Duration {
    Duration::from_millis(u64::try_from(to.saturating_sub(from)).unwrap_or(0))
}
