use http::request::Parts;

use super::{KeyError, KeyExtractor};

/// Takes the key from a query parameter (percent-decoded); a request without it is rejected
/// with 400.
///
/// Built by [`query`].
#[derive(Clone, Debug)]
pub struct QueryParam {
    name: String,
}

/// Locks on the value of query parameter `name` (the first one, if it repeats).
///
/// # Example
///
/// ```
/// use tower_lock::key::{KeyExtractor, query};
///
/// let (parts, ()) = http::Request::get("/claim?coupon=a%20b").body(()).unwrap().into_parts();
/// assert_eq!(query("coupon").extract(&parts)?.as_deref(), Some("a b"));
/// # Ok::<_, tower_lock::key::KeyError>(())
/// ```
pub fn query(name: impl Into<String>) -> QueryParam {
    QueryParam { name: name.into() }
}

impl QueryParam {
    pub(super) fn read(&self, parts: &Parts) -> Result<String, KeyError> {
        form_urlencoded::parse(parts.uri.query().unwrap_or_default().as_bytes())
            .find(|(name, _)| *name == self.name)
            .map(|(_, value)| value.into_owned())
            .ok_or_else(|| KeyError::MissingQueryParam(self.name.clone()))
    }
}

impl KeyExtractor for QueryParam {
    fn extract(&self, parts: &Parts) -> Result<Option<String>, KeyError> {
        self.read(parts).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::parts_of;

    #[test]
    fn the_first_of_repeated_parameters_wins() {
        let parts = parts_of(http::Request::get("/?id=1&id=2"));
        assert_eq!(query("id").extract(&parts).unwrap().as_deref(), Some("1"));
    }

    #[test]
    fn a_missing_parameter_names_itself() {
        for uri in ["/", "/?other=1", "/?ids=1"] {
            let parts = parts_of(http::Request::get(uri));
            assert_eq!(
                query("id").extract(&parts),
                Err(KeyError::MissingQueryParam("id".into())),
                "{uri}"
            );
        }
    }
}
