//! The operator's view of advisory locks: PostgreSQL knows which session holds one
//! (`pg_locks`) and what that session is (`pg_stat_activity`); the operator's release ends it.

use std::time::Duration;

use super::AdvisoryBackend;
use crate::backend::{BackendError, Hold, Holding, Inspect, Listing, LockState};

/// The sessions holding the advisory lock whose key `$1` hashes to, in this database: pid,
/// the session's name as PostgreSQL shows it (`<application_name> (pid <pid>)`), and the ms
/// since its last statement — the one that took the lock, as a holder's renewals only ping.
const HOLDERS: &str = "SELECT activity.pid, \
        trim(coalesce(activity.application_name, '') || ' (pid ' || activity.pid || ')'), \
        (extract(epoch FROM clock_timestamp() - activity.state_change) * 1000)::bigint \
    FROM pg_locks AS held JOIN pg_stat_activity AS activity ON activity.pid = held.pid \
    WHERE held.locktype = 'advisory' AND held.granted AND held.objsubid = 1 \
        AND held.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
        AND held.classid = ((hashtextextended($1, 0) >> 32) & 4294967295)::oid \
        AND held.objid = (hashtextextended($1, 0) & 4294967295)::oid";

/// How long the operator's release waits for a terminated session to let its lock go.
const RELEASE_PATIENCE: Duration = Duration::from_secs(2);

impl AdvisoryBackend {
    /// The sessions holding `name`'s lock, and what PostgreSQL says of them.
    async fn holders(&self, name: &str) -> Result<Vec<(i32, Holding)>, BackendError> {
        let rows: Vec<(i32, Option<String>, Option<i64>)> = sqlx::query_as(HOLDERS)
            .bind(self.0.kind().hashed_name(name))
            .fetch_all(&mut *self.0.pool().connection().await?)
            .await
            .map_err(BackendError::new)?;
        let holding = |(pid, session, idle_ms): (i32, Option<String>, Option<i64>)| {
            let held_for =
                Duration::from_millis(idle_ms.and_then(|ms| u64::try_from(ms).ok()).unwrap_or(0));
            (
                pid,
                Holding::new(Hold::Mutex, session.unwrap_or_default(), held_for, None),
            )
        };
        Ok(rows.into_iter().map(holding).collect())
    }
}

/// Advisory locks' holders: the session PostgreSQL says holds the lock, named as PostgreSQL
/// shows it — its `application_name` and pid, not the locker's label, which a session lock
/// has nowhere to keep without overwriting the application's own — held since the session's
/// last statement; no fence, no lease (the session is the lease), no waiters (they poll). The
/// names held cannot be listed: PostgreSQL keeps their hashes. The operator's release ends
/// the holder's session (`pg_terminate_backend`: the role must be the holder's or have
/// `pg_signal_backend`); the holder's next renewal finds its connection gone and reports the
/// lock lost.
impl Inspect for AdvisoryBackend {
    async fn inspect(&self, name: &str) -> Result<LockState, BackendError> {
        let holders = self.holders(name).await?;
        let holders = holders.into_iter().map(|(_, holding)| holding).collect();
        Ok(LockState::new(holders, 0))
    }

    async fn held_names(
        &self,
        _prefix: &str,
        _after: Option<&str>,
        _limit: usize,
    ) -> Result<Listing, BackendError> {
        Err(BackendError::new(
            "advisory locks are known to PostgreSQL by the hashes of their names: the names \
             held cannot be listed (inspect a name you know)",
        ))
    }

    async fn force_release(&self, name: &str, _by: &str) -> Result<Vec<Holding>, BackendError> {
        let mut freed = Vec::new();
        for (pid, holding) in self.holders(name).await? {
            let ended: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
                .bind(pid)
                .fetch_one(&mut *self.0.pool().connection().await?)
                .await
                .map_err(BackendError::new)?;
            if ended {
                freed.push(holding);
            }
        }
        // A terminated session lets its locks go as its process exits: wait for that, so that
        // the lock is free when this answers.
        let deadline = tokio::time::Instant::now() + RELEASE_PATIENCE;
        while !freed.is_empty() && !self.holders(name).await?.is_empty() {
            if tokio::time::Instant::now() >= deadline {
                return Err(BackendError::new(format!(
                    "the sessions holding {name:?} were ended but still hold it after {RELEASE_PATIENCE:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(freed)
    }
}
