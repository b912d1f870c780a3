//! A SQL backend's pool that answers at once while its database refuses connections
//! (`backend/store_support/reach.rs`): sqlx's pool would try again until its acquire timeout.

use std::sync::Arc;

use sqlx::pool::PoolConnection;
use sqlx::{ConnectOptions, Connection, Database, Pool};

use crate::backend::BackendError;
use crate::backend::store_support::reach::Reach;

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

impl<DB: Database> ReachablePool<DB> {
    /// `pool`, its database dialled with the pool's own connect options.
    pub(in crate::backend) fn new(pool: Pool<DB>) -> Self {
        let options = pool.connect_options();
        let reach = Reach::new(Box::new(move || {
            let options = Arc::clone(&options);
            Box::pin(async move {
                let connection = options.connect().await.map_err(BackendError::new)?;
                // A goodbye to the server, in the background: the pool is served.
                tokio::spawn(connection.close());
                Ok(())
            })
        }));
        Self { pool, reach }
    }

    /// A connection of the pool; while the database refuses connections, that failure at once.
    pub(in crate::backend) async fn connection(&self) -> Result<PoolConnection<DB>, BackendError> {
        self.reach
            .call(self.pool.acquire())
            .await?
            .map_err(|error| {
                // The pool could not give one: the database may be down for everyone.
                self.reach.dial();
                BackendError::new(error)
            })
    }
}
