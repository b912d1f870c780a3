use std::borrow::Cow;

/// Why a request's lock key could not be found. Answered with 400 (500 for
/// [`BeforeRouting`](Self::BeforeRouting), which is the server's fault) and this message as the
/// detail.
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
}

impl KeyError {
    /// A custom reason, for your own extractors. It is sent to the client as the problem's
    /// detail, so it must not contain secrets.
    pub fn invalid(reason: impl Into<Cow<'static, str>>) -> Self {
        Self::Invalid(reason.into())
    }
}
