//! The operator's view of advisory locks: PostgreSQL knows which session holds one
//! (`pg_locks`), and the session is named after its holder (`application_name`, set by the
//! statement that took the lock); the operator's release ends that session.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::AdvisoryBackend;
use crate::backend::{BackendError, Hold, Holding, Inspect, Listing, LockState};

/// What a holding session's `application_name` starts with.
const MARK: &str = "tower-lock ";

/// The holding session's name for the locker labelled `holder`: `tower-lock <since ms>
/// <label>`. PostgreSQL keeps 63 bytes of it (a longer label is cut) and shows characters
/// outside ASCII as `?`.
pub(super) fn session_name(holder: &str) -> String {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    format!("{MARK}{since} {holder}")
}

/// The sessions holding the advisory lock whose key `$1` hashes to, in this database: (pid,
/// application name).
const HOLDERS: &str = "SELECT activity.pid, activity.application_name \
    FROM pg_locks AS held JOIN pg_stat_activity AS activity ON activity.pid = held.pid \
    WHERE held.locktype = 'advisory' AND held.granted AND held.objsubid = 1 \
        AND held.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
        AND held.classid = ((hashtextextended($1, 0) >> 32) & 4294967295)::oid \
        AND held.objid = (hashtextextended($1, 0) & 4294967295)::oid";

/// How long the operator's release waits for a terminated session to let its lock go.
const RELEASE_PATIENCE: Duration = Duration::from_secs(2);

impl AdvisoryBackend {
    /// The sessions holding `name`'s lock, and what their names record.
    async fn holders(&self, name: &str) -> Result<Vec<(i32, Holding)>, BackendError> {
        let rows: Vec<(i32, Option<String>)> = sqlx::query_as(HOLDERS)
            .bind(self.0.kind().hashed_name(name))
            .fetch_all(&mut *self.0.pool().connection().await?)
            .await
            .map_err(BackendError::new)?;
        let holding = |application: Option<String>| {
            let record = application.unwrap_or_default();
            let mut fields = record.strip_prefix(MARK).unwrap_or_default().splitn(2, ' ');
            let since = fields.next().and_then(|since| since.parse::<u64>().ok());
            let label = fields.next().unwrap_or_default();
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            let held_for = since.map_or(Duration::ZERO, |since| {
                now.saturating_sub(Duration::from_millis(since))
            });
            Holding::new(Hold::Mutex, label, held_for, None)
        };
        Ok((rows.into_iter())
            .map(|(pid, application)| (pid, holding(application)))
            .collect())
    }
}

/// Advisory locks' holders: the session PostgreSQL says holds the lock, named by the statement
/// that took it (label cut to fit 63 bytes); no fence, no lease (the session is the lease),
/// no waiters (they poll). The names held cannot be listed: PostgreSQL keeps their hashes.
/// The operator's release ends the holder's session (`pg_terminate_backend`: the role needs
/// to be the holder's or have `pg_signal_backend`), which frees the lock; the holder's next
/// renewal finds its connection gone and reports the lock lost.
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

    async fn force_release(&self, name: &str) -> Result<Vec<Holding>, BackendError> {
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
