//! The conformance suite on `AnyBackend`, the store chosen at run time from a URL: Redis
//! (`redis://`, with the outage cases) and PostgreSQL lease rows (`postgres://…?lock_table=`),
//! each connected through its URL as a service configured by `LOCK_STORE` would be.

use integration_tests::{PostgresSchema, RedisServer};
use tower_lock::backend::any::AnyBackend;
use tower_lock::conformance::{Outage, Store};

mod redis_url {
    tower_lock::conformance_suite!(
        super::RedisByUrl,
        leases,
        read_write,
        semaphore,
        shared_leases,
        wait_queue,
        outage
    );
}

mod postgres_url {
    tower_lock::conformance_suite!(
        super::PostgresByUrl,
        leases,
        read_write,
        semaphore,
        shared_leases,
        wait_queue
    );
}

/// A fresh `redis-server`, its backends connected by `redis://` URL.
struct RedisByUrl(RedisServer);

impl Store for RedisByUrl {
    type Backend = AnyBackend;

    async fn start() -> Self {
        Self(RedisServer::start())
    }

    async fn backend(&self) -> AnyBackend {
        let url = self.0.url();
        (AnyBackend::connect(&url).await).unwrap_or_else(|error| panic!("{url}: {error}"))
    }
}

impl Outage for RedisByUrl {
    fn stop_answering(&self) {
        self.0.pause();
    }

    fn answer_again(&self) {
        self.0.resume();
    }
}

/// A fresh schema, its backends connected by `postgres://` URL with the lease table in it.
struct PostgresByUrl(PostgresSchema);

impl Store for PostgresByUrl {
    type Backend = AnyBackend;

    async fn start() -> Self {
        Self(PostgresSchema::create().await)
    }

    async fn backend(&self) -> AnyBackend {
        let url = format!("{}&lock_table={}", self.0.url(), self.0.table("leases"));
        (AnyBackend::connect(&url).await).unwrap_or_else(|error| panic!("{url}: {error}"))
    }
}
