//! A SQL backend's pool that answers at once while its database refuses connections.
//!
//! sqlx's pool, asked for a connection it must open, tries again and again while the server
//! refuses (it takes a refusal for a server starting up) until its acquire timeout: every
//! call would wait out the locker's store timeout when the database is down. Here, a
//! connection that does not come at once makes the pool's database be dialled directly, once
//! at a time; a refusal (or any failure to connect) is then every call's answer, at once,
//! until a dial every [`DIAL_EVERY`] connects again.

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{ConnectOptions, Connection, Database, Pool};
use tokio::sync::watch;

use crate::backend::BackendError;

/// How long a connection may take to come out of the pool before the database is dialled.
const DIAL_AFTER: Duration = Duration::from_millis(100);
/// How often a database that refused is dialled again.
const DIAL_EVERY: Duration = Duration::from_millis(100);
/// How long one dial may take.
const DIAL_WITHIN: Duration = Duration::from_secs(1);

/// A pool, and whether its database refuses connections now.
#[derive(Debug)]
pub(in crate::backend) struct ReachablePool<DB: Database> {
    pool: Pool<DB>,
    reach: Arc<Reach>,
}

impl<DB: Database> Clone for ReachablePool<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            reach: Arc::clone(&self.reach),
        }
    }
}

/// Whether the database refuses connections (and why), and whether a dial is under way.
#[derive(Debug)]
struct Reach {
    refused: watch::Sender<Option<BackendError>>,
    dialling: AtomicBool,
}

impl<DB: Database> ReachablePool<DB> {
    pub(in crate::backend) fn new(pool: Pool<DB>) -> Self {
        let reach = Reach {
            refused: watch::Sender::new(None),
            dialling: AtomicBool::new(false),
        };
        Self {
            pool,
            reach: Arc::new(reach),
        }
    }

    /// A connection of the pool; while the database refuses connections, that failure at once.
    pub(in crate::backend) async fn connection(&self) -> Result<PoolConnection<DB>, BackendError> {
        let mut refused = self.reach.refused.subscribe();
        if let Some(error) = refused.borrow_and_update().clone() {
            return Err(error);
        }
        let mut acquire = pin!(self.pool.acquire());
        if let Ok(answer) = tokio::time::timeout(DIAL_AFTER, acquire.as_mut()).await {
            return answer.map_err(|error| self.failed(error));
        }
        self.dial();
        tokio::select! {
            answer = acquire => answer.map_err(|error| self.failed(error)),
            Ok(error) = refused.wait_for(Option::is_some) => Err(error.clone().unwrap_or_else(|| {
                BackendError::new("the database refused a connection")
            })),
        }
    }

    /// The pool could not give a connection: its database is dialled to learn whether it is
    /// down for everyone.
    fn failed(&self, error: sqlx::Error) -> BackendError {
        self.dial();
        BackendError::new(error)
    }

    /// Dials the database, unless a dial is under way: while it refuses, every call is
    /// answered with its refusal, and it is dialled again every [`DIAL_EVERY`] until it
    /// connects.
    fn dial(&self) {
        if self.reach.dialling.swap(true, Ordering::AcqRel) {
            return;
        }
        let (options, reach) = (self.pool.connect_options(), Arc::clone(&self.reach));
        tokio::spawn(async move {
            loop {
                let dialled = tokio::time::timeout(DIAL_WITHIN, options.connect()).await;
                let refusal = match dialled {
                    Ok(Ok(connection)) => {
                        // A goodbye to the server, in the background: the pool is served.
                        tokio::spawn(connection.close());
                        None
                    }
                    Ok(Err(error)) => Some(BackendError::new(error)),
                    // A server that accepts connections but does not answer is not refusing:
                    // calls run into the store timeout, as on a connection it stopped answering.
                    Err(_) => None,
                };
                let refusing = refusal.is_some();
                reach.refused.send_replace(refusal);
                if !refusing {
                    break;
                }
                tokio::time::sleep(DIAL_EVERY).await;
            }
            reach.dialling.store(false, Ordering::Release);
        });
    }
}
