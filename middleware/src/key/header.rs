use http::HeaderName;
use http::request::Parts;

use super::{KeyError, KeyExtractor};

/// Takes the key from a request header; a request without it, or with it more than once, is
/// rejected with 400.
///
/// Built by [`header`].
#[derive(Clone, Debug)]
pub struct Header {
    name: HeaderName,
}

/// Locks on the value of header `name`.
///
/// # Panics
///
/// When `name` is not a valid header name.
///
/// # Example
///
/// ```
/// use tower_lock::key::{KeyExtractor, header};
///
/// let (parts, ()) = http::Request::get("/").header("x-tenant", "acme").body(()).unwrap().into_parts();
/// assert_eq!(header("x-tenant").extract(&parts)?.as_deref(), Some("acme"));
/// # Ok::<_, tower_lock::key::KeyError>(())
/// ```
pub fn header(name: &str) -> Header {
    Header {
        name: HeaderName::try_from(name)
            .unwrap_or_else(|_| panic!("`{name}` is not a valid header name")),
    }
}

impl Header {
    pub(super) fn from_name(name: HeaderName) -> Self {
        Self { name }
    }

    pub(super) fn read<'a>(&self, parts: &'a Parts) -> Result<&'a str, KeyError> {
        let mut values = parts.headers.get_all(&self.name).iter();
        let value = values
            .next()
            .ok_or_else(|| KeyError::MissingHeader(self.name.to_string()))?;
        if values.next().is_some() {
            return Err(KeyError::RepeatedHeader(self.name.to_string()));
        }
        value
            .to_str()
            .map_err(|_| KeyError::InvalidHeader(self.name.to_string()))
    }
}

impl KeyExtractor for Header {
    fn extract(&self, parts: &Parts) -> Result<Option<String>, KeyError> {
        self.read(parts).map(|value| Some(value.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::parts_of;

    #[test]
    fn a_missing_header_names_itself() {
        let parts = parts_of(http::Request::get("/"));
        assert_eq!(
            header("X-Tenant").extract(&parts),
            Err(KeyError::MissingHeader("x-tenant".into()))
        );
    }

    #[test]
    fn a_repeated_header_is_refused_not_guessed() {
        let parts = parts_of(
            http::Request::get("/")
                .header("x-tenant", "acme")
                .header("x-tenant", "evil"),
        );
        assert_eq!(
            header("x-tenant").extract(&parts),
            Err(KeyError::RepeatedHeader("x-tenant".into()))
        );
    }

    #[test]
    fn a_non_ascii_header_is_invalid() {
        let parts = parts_of(
            http::Request::get("/")
                .header("x-tenant", http::HeaderValue::from_bytes(b"\xff").unwrap()),
        );
        assert_eq!(
            header("x-tenant").extract(&parts),
            Err(KeyError::InvalidHeader("x-tenant".into()))
        );
    }
}
