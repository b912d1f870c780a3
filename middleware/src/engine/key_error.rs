//! Why a lock key could not be found or cannot name a lock: the one error of keys, shared by
//! the extractors (`key/`) and the locker's checks (`names.rs`).

use std::borrow::Cow;

/// Why a request's lock key could not be found, or cannot name a lock. Answered with 400 (500
/// for [`BeforeRouting`](Self::BeforeRouting), which is the server's fault) and this message as
/// the detail. The locker checks every key, from an extractor or given to it directly:
/// non-empty, at most [`max_key_len`](crate::LockerBuilder::max_key_len) bytes, no ASCII
/// control characters, no `{` or `}`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The matched route has no path parameter of this name.
    #[error("path parameter `{0}` is missing")]
    MissingPathParam(String),
    /// The layer runs before routing (around the whole `Router`), where no path parameter is
    /// known yet. A configuration error: answered 500.
    #[error(
        "path parameter `{0}` cannot be read: the lock layer runs before routing; apply it \
         with `Router::route_layer` or `Router::layer`"
    )]
    BeforeRouting(String),
    /// The path parameters are not valid UTF-8 once percent-decoded.
    #[error("path parameter `{0}` cannot be read: the path is not valid UTF-8")]
    InvalidPathParam(String),
    /// The request has no header of this name.
    #[error("header `{0}` is missing")]
    MissingHeader(String),
    /// The header appears more than once: which one names the lock would be a guess.
    #[error("header `{0}` appears more than once")]
    RepeatedHeader(String),
    /// The header's value is not visible ASCII.
    #[error("header `{0}` is not visible ASCII")]
    InvalidHeader(String),
    /// The query string has no parameter of this name.
    #[error("query parameter `{0}` is missing")]
    MissingQueryParam(String),
    /// A custom extractor's reason.
    #[error("{0}")]
    Invalid(Cow<'static, str>),
    /// No key was given at all.
    #[error("no lock key was given")]
    NoKeys,
    /// The key is empty.
    #[error("lock key is empty")]
    Empty,
    /// The key is longer than the locker allows
    /// ([`max_key_len`](crate::LockerBuilder::max_key_len)).
    #[error("lock key is {len} bytes long; at most {max} are allowed")]
    TooLong {
        /// The key's length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// The key contains an ASCII control character.
    #[error("lock key contains a control character")]
    ControlCharacter,
    /// The key contains `{` or `}` (they would break the Redis Cluster hash tag around it; the
    /// rule holds for every store, so keys move between stores unchanged).
    #[error("lock key contains `{{` or `}}`")]
    Brace,
}

impl KeyError {
    /// A custom reason, for your own extractors. It is sent to the client as the problem's
    /// detail, so it must not contain secrets.
    pub fn invalid(reason: impl Into<Cow<'static, str>>) -> Self {
        Self::Invalid(reason.into())
    }
}
