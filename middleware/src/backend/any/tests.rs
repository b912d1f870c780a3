//! The conformance suite on an `AnyBackend` over memory (`memory://`): clones of one backend
//! are the "processes". The stores that run as servers run it in `tests/`.

use super::AnyBackend;

crate::conformance_suite!(
    MemoryByUrl,
    leases,
    read_write,
    semaphore,
    shared_leases,
    wait_queue
);

struct MemoryByUrl(AnyBackend);

impl crate::conformance::Store for MemoryByUrl {
    type Backend = AnyBackend;

    async fn start() -> Self {
        Self(AnyBackend::connect("memory://").await.unwrap())
    }

    async fn backend(&self) -> AnyBackend {
        self.0.clone()
    }
}
