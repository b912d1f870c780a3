//! The conformance suite on the stores chosen at run time from a URL, each connected through
//! its URL as a service configured by `LOCK_STORE` would be: `AnyBackend` on Redis
//! (`redis://`, with the outage cases, and `rediss://` to a server that speaks TLS only) and
//! PostgreSQL lease rows (`postgres://…?lock_table=`);
//! `AnyMutexBackend` on RedLock (`redlock://`) and PostgreSQL's advisory locks
//! (`postgres://…?mode=advisory`).

use integration_tests::{PostgresSchema, RedisServer};
use tower_lock::backend::any::{AnyBackend, AnyMutexBackend};
use tower_lock::conformance::{Outage, Store};

mod redis_url {
    tower_lock::conformance_suite!(
        super::RedisByUrl,
        leases,
        read_write,
        semaphore,
        shared_leases,
        wait_queue,
        outage,
        inspect,
        listing,
        inspect_shapes
    );
}

/// Over TLS: the mutex cases (a waiter woken by the release's announcement among them),
/// permits, and readers' and permits' leases; the cases that count turns between processes run
/// on the plain URL above, where TLS's handshakes do not crowd two shared cores.
mod rediss_url {
    tower_lock::conformance_suite!(super::RedisOverTlsByUrl, leases, semaphore, shared_leases);
}

mod postgres_url {
    tower_lock::conformance_suite!(
        super::PostgresByUrl,
        leases,
        read_write,
        semaphore,
        shared_leases,
        wait_queue,
        inspect,
        listing
    );
}

mod redlock_url {
    tower_lock::conformance_suite!(super::RedlockByUrl, leases, outage, inspect, listing);
}

mod advisory_url {
    tower_lock::conformance_suite!(super::AdvisoryByUrl);
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

    fn records_releases(&self) -> bool {
        true
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

/// A fresh `redis-server` that speaks TLS only, its backends connected by `rediss://` URL
/// naming the CA that signed its certificate.
struct RedisOverTlsByUrl(RedisServer);

impl Store for RedisOverTlsByUrl {
    type Backend = AnyBackend;

    async fn start() -> Self {
        Self(RedisServer::start_tls())
    }

    async fn backend(&self) -> AnyBackend {
        let url = format!(
            "{}?tls_ca={}",
            self.0.url(),
            self.0.tls_files().ca.display()
        );
        (AnyBackend::connect(&url).await).unwrap_or_else(|error| panic!("{url}: {error}"))
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

/// Three fresh, independent masters, their backends connected by `redlock://` URL.
struct RedlockByUrl([RedisServer; 3]);

impl Store for RedlockByUrl {
    type Backend = AnyMutexBackend;

    async fn start() -> Self {
        Self([(); 3].map(|()| RedisServer::start()))
    }

    async fn backend(&self) -> AnyMutexBackend {
        let masters: Vec<String> = (self.0.iter())
            .map(|master| master.url().trim_start_matches("redis://").to_owned())
            .collect();
        let url = format!("redlock://{}", masters.join(","));
        (AnyMutexBackend::connect(&url).await).unwrap_or_else(|error| panic!("{url}: {error}"))
    }

    fn fences(&self) -> bool {
        false
    }

    fn records_releases(&self) -> bool {
        true
    }
}

impl Outage for RedlockByUrl {
    fn stop_answering(&self) {
        self.0.iter().for_each(RedisServer::pause);
    }

    fn answer_again(&self) {
        self.0.iter().for_each(RedisServer::resume);
    }
}

/// Advisory locks in a namespace of their own (the fresh schema's name), by
/// `postgres://…?mode=advisory&namespace=` URL.
struct AdvisoryByUrl(PostgresSchema);

impl Store for AdvisoryByUrl {
    type Backend = AnyMutexBackend;

    async fn start() -> Self {
        Self(PostgresSchema::create().await)
    }

    async fn backend(&self) -> AnyMutexBackend {
        let url = format!("{}&mode=advisory&namespace={}", self.0.url(), self.0.name());
        (AnyMutexBackend::connect(&url).await).unwrap_or_else(|error| panic!("{url}: {error}"))
    }

    fn fences(&self) -> bool {
        false
    }

    fn leases_expire(&self) -> bool {
        false
    }
}
