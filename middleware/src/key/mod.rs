//! Where a request's lock key comes from, and what makes a key valid.
//!
//! A [`KeyExtractor`] reads the request head and answers `Ok(Some(key))` (lock on `key`),
//! `Ok(None)` (this request is not locked) or `Err` (the request is malformed: 400, the
//! handler never runs). Built-ins read a [path parameter](path), a [header], a
//! [query parameter](query), or [several parts joined](KeyTemplate); any
//! `Fn(&Parts) -> Result<Option<String>, KeyError>` closure is an extractor too.

use http::request::Parts;

mod error;
mod header;
#[cfg(feature = "axum")]
mod path;
mod query;
mod template;

pub use error::KeyError;
pub use header::{Header, header};
#[cfg(feature = "axum")]
pub use path::{PathParam, path};
pub use query::{QueryParam, query};
pub use template::{KeyTemplate, TemplateError};

/// The default longest key, in bytes (the layer's prefix not counted).
pub const DEFAULT_MAX_KEY_LEN: usize = 256;

/// Finds the lock key of a request.
///
/// # Example
///
/// A closure that locks per user, and leaves anonymous requests unlocked:
///
/// ```
/// use http::request::Parts;
/// use tower_lock::key::{KeyError, KeyExtractor};
///
/// let per_user = |parts: &Parts| -> Result<Option<String>, KeyError> {
///     Ok(parts.headers.get("x-user").map(|user| match user.to_str() {
///         Ok(user) => Ok(format!("user:{user}")),
///         Err(_) => Err(KeyError::invalid("the x-user header is not visible ASCII")),
///     }).transpose()?)
/// };
///
/// let (parts, ()) = http::Request::get("/").header("x-user", "ada").body(()).unwrap().into_parts();
/// assert_eq!(per_user.extract(&parts)?, Some("user:ada".to_owned()));
/// # Ok::<_, KeyError>(())
/// ```
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key to lock for this request, `None` to let it through unlocked, or why the request
    /// has no valid key.
    fn extract(&self, parts: &Parts) -> Result<Option<String>, KeyError>;

    /// Every key to lock for this request, all together or none: by default the one
    /// [`extract`](Self::extract) finds. Extractors of several keys ([`many`]) override it.
    fn extract_keys(&self, parts: &Parts) -> Result<Vec<String>, KeyError> {
        self.extract(parts)
            .map(Option::into_iter)
            .map(Iterator::collect)
    }
}

/// Locks on several keys at once, all or none: `keys` returns them (in any order, duplicates
/// allowed); an empty list lets the request through unlocked.
///
/// Every key gets its own fencing token ([`LockGuard::fence_of`](crate::LockGuard::fence_of)).
/// Several keys are always held exclusively, whatever the layer's mode.
/// The keys are taken together, so two requests over overlapping sets never deadlock: with
/// Redis in one script on one node; elsewhere one by one in sorted order, giving back what was
/// taken at the first busy key.
///
/// # Example
///
/// A transfer between two accounts named in headers:
///
/// ```
/// use tower_lock::{LockLayer, MemoryBackend, key::{KeyError, many}};
///
/// let transfers = LockLayer::new(MemoryBackend::new(), many(|parts| {
///     ["x-from", "x-to"]
///         .iter()
///         .map(|name| match parts.headers.get(*name).map(|value| value.to_str()) {
///             Some(Ok(account)) => Ok(format!("account:{account}")),
///             _ => Err(KeyError::MissingHeader((*name).to_owned())),
///         })
///         .collect()
/// }));
/// ```
pub fn many<F>(keys: F) -> Many<F>
where
    F: Fn(&Parts) -> Result<Vec<String>, KeyError> + Send + Sync + 'static,
{
    Many(keys)
}

/// Several keys per request; built by [`many`].
#[derive(Clone, Debug)]
pub struct Many<F>(F);

impl<F> KeyExtractor for Many<F>
where
    F: Fn(&Parts) -> Result<Vec<String>, KeyError> + Send + Sync + 'static,
{
    /// The first key; the layer uses [`extract_keys`](KeyExtractor::extract_keys).
    fn extract(&self, parts: &Parts) -> Result<Option<String>, KeyError> {
        Ok(self.extract_keys(parts)?.into_iter().next())
    }

    fn extract_keys(&self, parts: &Parts) -> Result<Vec<String>, KeyError> {
        (self.0)(parts)
    }
}

impl<F> KeyExtractor for F
where
    F: Fn(&Parts) -> Result<Option<String>, KeyError> + Send + Sync + 'static,
{
    fn extract(&self, parts: &Parts) -> Result<Option<String>, KeyError> {
        self(parts)
    }
}

/// Checks that `key` can name a lock: non-empty, at most `max_len` bytes, no ASCII control
/// characters, and no `{` or `}` (they would break the Redis Cluster hash tag around it).
///
/// # Example
///
/// ```
/// use tower_lock::key::{KeyError, validate_key};
///
/// assert!(validate_key("coupon:42", 256).is_ok());
/// assert!(matches!(validate_key("a{b}", 256), Err(KeyError::Brace)));
/// assert!(matches!(validate_key(&"x".repeat(300), 256), Err(KeyError::TooLong { len: 300, max: 256 })));
/// ```
pub fn validate_key(key: &str, max_len: usize) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > max_len {
        return Err(KeyError::TooLong {
            len: key.len(),
            max: max_len,
        });
    }
    if key.bytes().any(|byte| byte.is_ascii_control()) {
        return Err(KeyError::ControlCharacter);
    }
    if key.contains(['{', '}']) {
        return Err(KeyError::Brace);
    }
    Ok(())
}

#[cfg(test)]
pub(crate) fn parts_of(request: http::request::Builder) -> Parts {
    request
        .body(())
        .expect("a valid test request")
        .into_parts()
        .0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ordinary_key_is_valid() {
        assert!(validate_key("tenant:7:coupon:42", DEFAULT_MAX_KEY_LEN).is_ok());
        assert!(validate_key("ключ:ü", DEFAULT_MAX_KEY_LEN).is_ok());
    }

    #[test]
    fn an_empty_key_is_rejected() {
        assert!(matches!(validate_key("", 10), Err(KeyError::Empty)));
    }

    #[test]
    fn the_length_limit_counts_bytes_and_is_inclusive() {
        assert!(validate_key(&"a".repeat(10), 10).is_ok());
        assert!(matches!(
            validate_key("ééééé!", 10),
            Err(KeyError::TooLong { len: 11, max: 10 })
        ));
    }

    #[test]
    fn control_characters_are_rejected() {
        for key in ["a\nb", "a\0", "\u{7f}", "tab\there"] {
            assert!(
                matches!(validate_key(key, 64), Err(KeyError::ControlCharacter)),
                "{key:?}"
            );
        }
    }

    #[test]
    fn braces_are_rejected() {
        for key in ["{a}", "a{", "}"] {
            assert!(
                matches!(validate_key(key, 64), Err(KeyError::Brace)),
                "{key:?}"
            );
        }
    }

    #[test]
    fn a_closure_is_an_extractor() {
        let constant = |_: &Parts| Ok(Some("global".to_owned()));
        let parts = parts_of(http::Request::get("/"));
        assert_eq!(constant.extract(&parts).unwrap().as_deref(), Some("global"));
    }
}
