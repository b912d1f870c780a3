//! What the SQL backends share: table names they can put in statements, acquires that
//! outlive their caller (a pooled store could otherwise see an `abandon`, sent on another
//! connection, before the acquire it undoes) and leave connections for the holders, the
//! queue of waiters (`tickets.rs`), and locks held by a session instead of a row (`session.rs`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sqlx::pool::PoolOptions;
use sqlx::{Connection, Database, Pool};
use tokio::sync::{Semaphore, oneshot};

use super::{
    Attempt, BackendError, Granted, LockBackend, LockRequest, QueuedAttempt, TokenLease, WaitQueue,
};
use crate::backend::store_support::connect::within;
use crate::backend::store_support::masked_url::masked;

pub(super) mod inspection;
pub(super) mod lease_rows;
mod reachable_pool;
pub(super) mod session;
pub(super) mod tickets;

pub(super) use reachable_pool::ReachablePool;

/// How long a pooled connection may have been idle and still be handed out without a ping.
const TRUSTED_IDLE: Duration = Duration::from_secs(1);

/// The options of a backend's pool of up to `max_connections`. sqlx pings every connection
/// before handing it out, a round trip in front of each lock statement (a fifth of the
/// handoffs on a hot key); these ping only connections idle for longer than [`TRUSTED_IDLE`].
/// sqlx still pings each connection when it comes back, so one that died while in use is
/// closed then; one that dies within a second of its last use fails its next statement, which
/// the caller sees as the store being unavailable, like a connection lost mid-statement.
fn pool_options<DB: Database>(max_connections: u32) -> PoolOptions<DB> {
    PoolOptions::new()
        .max_connections(max_connections)
        .test_before_acquire(false)
        .before_acquire(|connection: &mut DB::Connection, metadata| {
            Box::pin(async move {
                if metadata.idle_for > TRUSTED_IDLE {
                    connection.ping().await?;
                }
                Ok(true)
            })
        })
}

/// A pool of up to `max_connections` to the database at `url`, within the connect timeout and
/// with an error naming the database (its password masked). One connection is made and closed
/// first: on a refusal, sqlx's pool would try again and again until its 30 s acquire timeout,
/// and then report only that it timed out.
pub(super) async fn connect_pool<DB: Database>(
    url: &str,
    max_connections: u32,
) -> Result<Pool<DB>, BackendError> {
    let connecting = async {
        DB::Connection::connect(url).await?.close().await?;
        pool_options(max_connections).connect(url).await
    };
    Ok(within(&masked(url), connecting).await?)
}

/// How many of a pool's connections acquires leave to extends and releases.
const KEPT_FOR_HOLDERS: u32 = 2;

/// How many acquires may use a backend's pool at once: all its connections but
/// [`KEPT_FOR_HOLDERS`] (at least one). Waiters polling a busy lock could otherwise take every
/// connection, and the holder's release would queue behind their polls.
#[derive(Clone, Debug)]
pub(super) struct AcquireSlots(Arc<Semaphore>);

impl AcquireSlots {
    /// The slots of a pool of `max_connections`.
    pub(super) fn of_pool(max_connections: u32) -> Self {
        let slots = max_connections.saturating_sub(KEPT_FOR_HOLDERS).max(1);
        Self(Arc::new(Semaphore::new(slots as usize)))
    }
}

/// An acquire's answer that its caller did not receive: what it took in the store is given
/// back.
pub(super) trait Unclaimed<B>: Send + 'static {
    /// Gives back what this answer took on `name`.
    fn give_back(self, backend: &B, name: &str) -> impl Future<Output = ()> + Send;
}

impl<B: LockBackend> Unclaimed<B> for Attempt<Granted<B::Lease>> {
    async fn give_back(self, backend: &B, name: &str) {
        if let Attempt::Acquired(grant) = self {
            let _ = backend.release(name, &grant.lease).await;
        }
    }
}

impl<B> Unclaimed<B> for QueuedAttempt<TokenLease>
where
    B: LockBackend<Lease = TokenLease> + WaitQueue<TokenLease>,
{
    async fn give_back(self, backend: &B, name: &str) {
        match self {
            QueuedAttempt::Acquired(grant) => {
                let _ = backend.release(name, &grant.lease).await;
            }
            QueuedAttempt::Queued { handover, .. } => {
                let _ = backend.leave_queue(name, handover.token()).await;
            }
        }
    }
}

/// Runs `attempt` (the store's acquire of `name`) in a task of its own, once one of `slots` is
/// free, so that it reaches the store's answer even if the caller is dropped or times out
/// first; what an answer nobody received any more took is then given back by that task, after
/// the acquire, in order. A caller gone before a slot was free sends nothing.
pub(super) async fn acquire_detached<B, A, F>(
    backend: &B,
    slots: &AcquireSlots,
    name: &str,
    request: LockRequest,
    attempt: impl FnOnce(B, String, LockRequest) -> F,
) -> Result<A, BackendError>
where
    B: LockBackend + Clone,
    A: Unclaimed<B>,
    F: Future<Output = Result<A, BackendError>> + Send + 'static,
{
    let (answer, answered) = oneshot::channel();
    let (owner, name) = (backend.clone(), name.to_owned());
    let acquiring = attempt(backend.clone(), name.clone(), request);
    let slots = Arc::clone(&slots.0);
    tokio::spawn(async move {
        let Ok(_slot) = slots.acquire_owned().await else {
            return;
        };
        if answer.is_closed() {
            return;
        }
        if let Err(Ok(unclaimed)) = answer.send(acquiring.await) {
            unclaimed.give_back(&owner, &name).await;
        }
    });
    answered
        .await
        .map_err(|_| BackendError::new("the acquire ended without an answer"))?
}

/// Checks that `table` is `name` or `schema.name`, each a plain identifier (ASCII letters,
/// digits and `_`, not starting with a digit, at most 63 bytes) that SQL takes unquoted.
pub(super) fn check_table_name(table: &str) -> Result<(), BackendError> {
    let identifier = |part: &str| {
        let mut chars = part.chars();
        chars
            .next()
            .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
            && part.len() <= 63
    };
    let parts: Vec<&str> = table.split('.').collect();
    if parts.len() <= 2 && parts.iter().all(|part| identifier(part)) {
        Ok(())
    } else {
        Err(BackendError::new(format!(
            "table name {table:?} is not `name` or `schema.name` of letters, digits and `_`"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_schema_qualified_names_are_accepted() {
        for table in ["tower_lock_leases", "locks.leases", "_t1"] {
            assert!(check_table_name(table).is_ok(), "{table}");
        }
    }

    #[test]
    fn names_that_would_need_quoting_or_inject_sql_are_refused() {
        for table in [
            "",
            "1t",
            "a.b.c",
            "leases; DROP TABLE x",
            "a-b",
            "a.",
            "\"t\"",
        ] {
            assert!(check_table_name(table).is_err(), "{table}");
        }
    }
}
