//! Which shape of lock each request takes.

use std::fmt;
use std::sync::Arc;

use http::Method;
use http::request::Parts;

use crate::backend::Ask;
use crate::backend::LockBackend;

/// Decides per request whether it only reads.
pub(crate) type IsRead = Arc<dyn Fn(&Parts) -> bool + Send + Sync>;

/// The shape of lock a layer takes for each request.
pub(crate) enum Mode<B: LockBackend> {
    /// Every request asks the same: a mutex (one request at a time per key), or a permit of a
    /// semaphore (at most so many at once).
    Always(Ask<B>),
    /// Readers share the key, a writer holds it alone; `is_read` decides per request.
    ReadWrite {
        is_read: IsRead,
        read: Ask<B>,
        write: Ask<B>,
    },
}

impl<B: LockBackend> Mode<B> {
    /// How a request asks for its lock.
    pub(crate) fn ask_for(&self, parts: &Parts) -> Ask<B> {
        match self {
            Self::Always(ask) => *ask,
            Self::ReadWrite {
                is_read,
                read,
                write,
            } => {
                if is_read(parts) {
                    *read
                } else {
                    *write
                }
            }
        }
    }
}

/// Reads are the safe methods: GET, HEAD and OPTIONS.
pub(crate) fn safe_methods_read() -> IsRead {
    Arc::new(|parts: &Parts| matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS))
}

impl<B: LockBackend> Clone for Mode<B> {
    fn clone(&self) -> Self {
        match self {
            Self::Always(ask) => Self::Always(*ask),
            Self::ReadWrite {
                is_read,
                read,
                write,
            } => Self::ReadWrite {
                is_read: Arc::clone(is_read),
                read: *read,
                write: *write,
            },
        }
    }
}

impl<B: LockBackend> fmt::Debug for Mode<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Always(ask) => write!(f, "Always({ask:?})"),
            Self::ReadWrite { .. } => f.write_str("ReadWrite"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Hold;
    use crate::MemoryBackend;

    fn parts(method: Method) -> Parts {
        http::Request::builder()
            .method(method)
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    #[test]
    fn read_write_mode_reads_with_safe_methods_and_writes_with_the_others() {
        let mode = Mode::<MemoryBackend>::ReadWrite {
            is_read: safe_methods_read(),
            read: Ask::read(),
            write: Ask::write(),
        };
        for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
            assert_eq!(mode.ask_for(&parts(method)).hold(), Hold::Read);
        }
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert_eq!(mode.ask_for(&parts(method)).hold(), Hold::Write);
        }
    }

    #[test]
    fn the_mutex_holds_the_same_way_for_every_request() {
        let mode = Mode::<MemoryBackend>::Always(Ask::mutex());
        assert_eq!(mode.ask_for(&parts(Method::GET)).hold(), Hold::Mutex);
    }
}
