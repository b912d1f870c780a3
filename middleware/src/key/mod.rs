//! Where a request's lock key comes from, and what makes a key valid.
//!
//! A [`KeyExtractor`] reads the request head and answers `Ok(Some(key))` (lock on `key`),
//! `Ok(None)` (this request is not locked) or `Err` (the request is malformed: 400, the
//! handler never runs). Built-ins read a path parameter (`path`, feature `axum`), a [header], a
//! [query parameter](query), or [several parts joined](KeyTemplate); any
//! `Fn(&Parts) -> Result<Option<String>, KeyError>` closure is an extractor too.
//!
//! Whatever an extractor returns is then checked by the locker (see [`KeyError`]): a key it
//! refuses is answered 400 too.

use http::request::Parts;

mod header;
#[cfg(feature = "axum")]
mod path;
mod query;
mod template;

pub use crate::engine::KeyError;
pub use header::{Header, header};
#[cfg(feature = "axum")]
pub use path::{PathParam, path};
pub use query::{QueryParam, query};
pub use template::{KeyTemplate, TemplateError};

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
/// taken at the first busy key (see
/// [`LockBackend::acquire_many`](crate::backend::LockBackend::acquire_many)).
///
/// # Example
///
/// A transfer between two accounts named in headers:
///
/// ```
/// use tower_lock::{LockLayer, Locker, MemoryBackend, key::{KeyError, many}};
///
/// let transfers = LockLayer::new(Locker::new(MemoryBackend::new()), many(|parts| {
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
    fn a_closure_is_an_extractor() {
        let constant = |_: &Parts| Ok(Some("global".to_owned()));
        let parts = parts_of(http::Request::get("/"));
        assert_eq!(constant.extract(&parts).unwrap().as_deref(), Some("global"));
    }
}
