//! The conformance suite on PostgreSQL: every case in a schema of its own on the machine's
//! server, with two backends (own connection pools) standing in for two processes.

use integration_tests::PostgresSchema;
use tower_lock::backend::postgres::PostgresBackend;
use tower_lock::conformance::Store;

mod postgres {
    tower_lock::conformance_suite!(super::PostgresStore);
}

/// A fresh schema whose lease table the backends share.
struct PostgresStore(PostgresSchema);

impl Store for PostgresStore {
    type Backend = PostgresBackend;

    async fn start() -> Self {
        Self(PostgresSchema::create().await)
    }

    async fn backend(&self) -> PostgresBackend {
        PostgresBackend::with_table(self.0.pool().await, &self.0.table("leases"))
            .await
            .expect("the lease table is created")
    }
}
