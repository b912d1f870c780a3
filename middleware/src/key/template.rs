use http::HeaderName;
use http::request::Parts;

#[cfg(feature = "axum")]
use super::PathParam;
use super::{KeyError, KeyExtractor, QueryParam, header::Header};

/// A key joined from literal text and parts of the request, such as
/// `tenant:{header x-tenant}:coupon:{path id}`.
///
/// Placeholders are `{path NAME}` (a matched axum path parameter, with the `axum` feature),
/// `{header NAME}` and `{query NAME}`. A request missing any part is rejected with 400.
///
/// # Example
///
/// ```
/// use tower_lock::key::{KeyExtractor, KeyTemplate};
///
/// let template = KeyTemplate::parse("tenant:{header x-tenant}:coupon:{query id}")?;
/// let (parts, ()) = http::Request::get("/claim?id=42")
///     .header("x-tenant", "acme")
///     .body(())
///     .unwrap()
///     .into_parts();
/// assert_eq!(template.extract(&parts)?.as_deref(), Some("tenant:acme:coupon:42"));
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct KeyTemplate {
    segments: Vec<Segment>,
}

#[derive(Clone, Debug)]
enum Segment {
    Literal(String),
    #[cfg(feature = "axum")]
    Path(PathParam),
    Header(Header),
    Query(QueryParam),
}

/// Why a key template could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateError {
    /// A `{` without its `}`.
    #[error("placeholder at byte {0} is not closed with `}}`")]
    Unclosed(usize),
    /// A `}` without its `{`.
    #[error("`}}` at byte {0} closes no placeholder")]
    StrayClose(usize),
    /// A placeholder that is not `{path NAME}`, `{header NAME}` or `{query NAME}`.
    #[error("`{{{0}}}` is not a placeholder; use {{path NAME}}, {{header NAME}} or {{query NAME}}")]
    UnknownPlaceholder(String),
    /// A header placeholder naming an invalid header.
    #[error("`{0}` is not a valid header name")]
    InvalidHeaderName(String),
    /// Literal text with an ASCII control character.
    #[error("the template contains a control character")]
    ControlCharacter,
    /// An empty template, which would lock nothing.
    #[error("the template is empty")]
    Empty,
}

impl KeyTemplate {
    /// Parses a template; see the type's documentation for the syntax.
    pub fn parse(template: &str) -> Result<Self, TemplateError> {
        if template.is_empty() {
            return Err(TemplateError::Empty);
        }
        if template.bytes().any(|byte| byte.is_ascii_control()) {
            return Err(TemplateError::ControlCharacter);
        }
        let mut segments = Vec::new();
        let mut rest = template;
        let mut offset = 0;
        while !rest.is_empty() {
            let literal_end = rest.find(['{', '}']).unwrap_or(rest.len());
            if literal_end > 0 {
                segments.push(Segment::Literal(rest[..literal_end].to_owned()));
            }
            rest = &rest[literal_end..];
            offset += literal_end;
            if rest.starts_with('}') {
                return Err(TemplateError::StrayClose(offset));
            }
            if rest.is_empty() {
                break;
            }
            let close = rest.find('}').ok_or(TemplateError::Unclosed(offset))?;
            let placeholder = &rest[1..close];
            if placeholder.contains('{') {
                return Err(TemplateError::Unclosed(offset));
            }
            segments.push(Segment::parse(placeholder)?);
            rest = &rest[close + 1..];
            offset += close + 1;
        }
        Ok(Self { segments })
    }
}

impl Segment {
    fn parse(placeholder: &str) -> Result<Self, TemplateError> {
        let unknown = || TemplateError::UnknownPlaceholder(placeholder.to_owned());
        let (source, name) = placeholder.trim().split_once(' ').ok_or_else(unknown)?;
        let name = name.trim();
        if name.is_empty() {
            return Err(unknown());
        }
        match source {
            #[cfg(feature = "axum")]
            "path" => Ok(Self::Path(super::path(name))),
            "header" => HeaderName::try_from(name)
                .map(|name| Self::Header(Header::from_name(name)))
                .map_err(|_| TemplateError::InvalidHeaderName(name.to_owned())),
            "query" => Ok(Self::Query(super::query(name))),
            _ => Err(unknown()),
        }
    }
}

impl KeyExtractor for KeyTemplate {
    /// The key; `None` when the request matched no route (its path parameters are unknown).
    fn extract(&self, parts: &Parts) -> Result<Option<String>, KeyError> {
        let mut key = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Literal(text) => key.push_str(text),
                #[cfg(feature = "axum")]
                Segment::Path(param) => match param.read(parts)? {
                    Some(value) => key.push_str(&value),
                    None => return Ok(None),
                },
                Segment::Header(header) => key.push_str(header.read(parts)?),
                Segment::Query(param) => key.push_str(&param.read(parts)?),
            }
        }
        Ok(Some(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::parts_of;

    #[test]
    fn a_template_without_placeholders_is_a_constant_key() {
        let parts = parts_of(http::Request::get("/"));
        let template = KeyTemplate::parse("global").unwrap();
        assert_eq!(template.extract(&parts).unwrap().as_deref(), Some("global"));
    }

    #[test]
    fn adjacent_placeholders_are_joined() {
        let parts = parts_of(http::Request::get("/?a=1&b=2").header("x-c", "3"));
        let template = KeyTemplate::parse("{query a}{query b}-{header x-c}").unwrap();
        assert_eq!(template.extract(&parts).unwrap().as_deref(), Some("12-3"));
    }

    #[test]
    fn a_missing_part_rejects_the_request() {
        let parts = parts_of(http::Request::get("/?id=1"));
        let template = KeyTemplate::parse("t:{header x-tenant}:c:{query id}").unwrap();
        assert_eq!(
            template.extract(&parts),
            Err(KeyError::MissingHeader("x-tenant".into()))
        );
    }

    #[test]
    fn malformed_templates_are_refused() {
        let cases = [
            ("a{header x", TemplateError::Unclosed(1)),
            ("a}b", TemplateError::StrayClose(1)),
            ("{query a}}", TemplateError::StrayClose(9)),
            ("{{query a}}", TemplateError::Unclosed(0)),
            (
                "{cookie a}",
                TemplateError::UnknownPlaceholder("cookie a".into()),
            ),
            ("{query}", TemplateError::UnknownPlaceholder("query".into())),
            (
                "{query  }",
                TemplateError::UnknownPlaceholder("query  ".into()),
            ),
            (
                "{header a b}",
                TemplateError::InvalidHeaderName("a b".into()),
            ),
            ("a\nb", TemplateError::ControlCharacter),
            ("", TemplateError::Empty),
        ];
        for (template, expected) in cases {
            assert_eq!(
                KeyTemplate::parse(template).unwrap_err(),
                expected,
                "{template}"
            );
        }
    }
}
