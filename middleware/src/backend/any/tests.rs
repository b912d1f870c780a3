//! The conformance suite on the run-time stores over memory (`memory://`): clones of one
//! backend are the "processes". The stores that run as servers run it in `tests/`.

use super::{AnyBackend, AnyMutexBackend};

mod every_shape {
    crate::conformance_suite!(
        super::MemoryByUrl,
        leases,
        read_write,
        semaphore,
        shared_leases,
        wait_queue
    );
}

mod mutexes {
    crate::conformance_suite!(super::MutexMemoryByUrl, leases, wait_queue);
}

struct MemoryByUrl(AnyBackend);

impl crate::conformance::Store for MemoryByUrl {
    type Backend = AnyBackend;
    const PAUSED_CLOCK: bool = true;

    async fn start() -> Self {
        Self(AnyBackend::connect("memory://").await.unwrap())
    }

    async fn backend(&self) -> AnyBackend {
        self.0.clone()
    }
}

struct MutexMemoryByUrl(AnyMutexBackend);

impl crate::conformance::Store for MutexMemoryByUrl {
    type Backend = AnyMutexBackend;
    const PAUSED_CLOCK: bool = true;

    async fn start() -> Self {
        Self(AnyMutexBackend::connect("memory://").await.unwrap())
    }

    async fn backend(&self) -> AnyMutexBackend {
        self.0.clone()
    }
}
