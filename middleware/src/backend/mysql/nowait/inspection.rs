//! The operator's view of `NOWAIT` rows: each holder writes its record into the row it locked,
//! uncommitted, at its first renewal, so a read of uncommitted rows sees the rows locked now
//! (held past a third of their TTL); the operator's release ends the holder's session.

use std::time::Duration;

use sqlx::mysql::MySqlRow;
use sqlx::{Executor, Row};

use super::{NowaitBackend, error_number};
use crate::backend::sql::inspection::list_held;
use crate::backend::{BackendError, Hold, Holding, Inspect, Listing, LockState};

/// How long the operator's release waits for a killed session to let its row go.
const RELEASE_PATIENCE: Duration = Duration::from_secs(2);

/// MySQL's error for a `KILL` of a session that is gone (`ER_NO_SUCH_THREAD`).
const NO_SUCH_THREAD: u16 = 1094;

/// A holder as its row's uncommitted record shows it: the session (connection id) that holds
/// the row, and what an operator sees.
struct RowHolder {
    session: u64,
    holding: Holding,
}

impl NowaitBackend {
    /// The rows `select` reads, uncommitted: the holders' records, which live in their open
    /// transactions.
    async fn read_uncommitted(&self, select: &str) -> Result<Vec<MySqlRow>, BackendError> {
        let batch = format!(
            "SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED; START TRANSACTION READ ONLY; \
             {select}; COMMIT"
        );
        let mut connection = self.0.pool().connection().await?;
        (&mut *connection)
            .fetch_all(&*batch)
            .await
            .map_err(BackendError::new)
    }

    /// The holder of `name`'s row, if it is locked.
    async fn holder(&self, name: &str) -> Result<Option<RowHolder>, BackendError> {
        let rows = self
            .read_uncommitted(&format!(
                "SELECT holder, TIMESTAMPDIFF(MICROSECOND, since, UTC_TIMESTAMP(6)) DIV 1000, \
                    session \
                 FROM {} WHERE name = {} AND holder IS NOT NULL",
                self.0.kind().table,
                hex_literal(name)
            ))
            .await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let read = |row: &MySqlRow| -> Result<RowHolder, sqlx::Error> {
            let label: Vec<u8> = row.try_get(0)?;
            let held_ms: Option<i64> = row.try_get(1)?;
            let held_for =
                Duration::from_millis(held_ms.and_then(|ms| u64::try_from(ms).ok()).unwrap_or(0));
            let label = String::from_utf8_lossy(&label);
            Ok(RowHolder {
                session: row.try_get(2)?,
                holding: Holding::new(Hold::Mutex, label, held_for, None),
            })
        };
        read(row).map(Some).map_err(BackendError::new)
    }
}

/// `NOWAIT` rows' holders: the label, start and session each holder writes into the row it
/// locked, in its open transaction, at its first renewal (so that the lock path writes
/// nothing); reading the rows uncommitted shows them while the transaction lives, and nothing
/// once it ends (a release, or a session gone). A hold younger than its first renewal, or one
/// held without renewal, is not seen — a stuck holder is, a third of its TTL on. No fence, no
/// lease (the session is the lease), no waiters (they poll). The listing reads the table in
/// name order, a bounded number of rows per page. The operator's release ends the holder's
/// session (`KILL CONNECTION`: the user must be the holder's, or have the `CONNECTION ADMIN`
/// privilege — MariaDB: `CONNECTION ADMIN` or `SUPER`), which rolls its transaction back; the
/// holder's next renewal finds its connection gone and reports the lock lost. A holder that
/// lets the lock go just as the operator ends its session may be ending another lock its
/// connection took since — a holder told its lock is lost, never two holders at once.
impl Inspect for NowaitBackend {
    async fn inspect(&self, name: &str) -> Result<LockState, BackendError> {
        let holders = self.holder(name).await?.into_iter();
        Ok(LockState::new(holders.map(|row| row.holding).collect(), 0))
    }

    async fn held_names(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Listing, BackendError> {
        let table = &self.0.kind().table;
        let (prefix_hex, after_hex) = (hex_literal(prefix), hex_literal(after.unwrap_or("")));
        list_held(prefix, limit, |rows| async move {
            let page = self
                .read_uncommitted(&format!(
                    "SELECT name, holder IS NOT NULL FROM {table} \
                     WHERE name >= {prefix_hex} AND name > {after_hex} ORDER BY name LIMIT {rows}"
                ))
                .await?;
            let read = |row: &MySqlRow| -> Result<Option<(String, bool)>, sqlx::Error> {
                let name: Vec<u8> = row.try_get(0)?;
                let held: i64 = row.try_get(1)?;
                Ok(String::from_utf8(name).ok().map(|name| (name, held != 0)))
            };
            let names = page.iter().map(read).filter_map(Result::transpose);
            names.collect::<Result<_, _>>().map_err(BackendError::new)
        })
        .await
    }

    async fn force_release(&self, name: &str, _by: &str) -> Result<Vec<Holding>, BackendError> {
        let Some(holder) = self.holder(name).await? else {
            return Ok(Vec::new());
        };
        let mut connection = self.0.pool().connection().await?;
        let killed = (&mut *connection)
            .execute(&*format!("KILL CONNECTION {}", holder.session))
            .await;
        match killed {
            Ok(_) => {}
            // Gone already: it let the lock go by itself.
            Err(error) if error_number(&error) == Some(NO_SUCH_THREAD) => return Ok(Vec::new()),
            Err(error) => return Err(BackendError::new(error)),
        }
        // A killed session rolls its transaction back as its thread notices: wait for that, so
        // that the lock is free when this answers.
        let deadline = tokio::time::Instant::now() + RELEASE_PATIENCE;
        while (self.holder(name).await?).is_some_and(|now| now.session == holder.session) {
            if tokio::time::Instant::now() >= deadline {
                return Err(BackendError::new(format!(
                    "the session holding {name:?} was ended but still holds it after {RELEASE_PATIENCE:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(vec![holder.holding])
    }
}

/// `bytes` as a MySQL hexadecimal literal (`X'6b6579'`), which cannot break out of the
/// statement it is written into.
fn hex_literal(bytes: impl AsRef<[u8]>) -> String {
    let digits: String = (bytes.as_ref().iter())
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("X'{digits}'")
}
