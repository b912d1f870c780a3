//! Reading the request body before the lock is taken, so that a slow upload never holds it.

use bytes::Bytes;
use http::HeaderMap;
use http::header::CONTENT_LENGTH;
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};

/// The body limit a layer reads up to before locking, unless told otherwise: 2 MiB, axum's
/// default body limit.
pub const DEFAULT_BODY_LIMIT: usize = 2 * 1024 * 1024;

/// What a layer does with a locked request's body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RequestBody {
    /// Read it whole, up to `limit` bytes, before taking the lock.
    Read { limit: usize },
    /// Hand it to the handler unread: the lock is held while the handler reads it.
    Stream,
}

/// Why a request's body could not be read before locking.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BodyError {
    /// The body is longer than the layer reads before locking. Answered 413.
    #[error("the request body is larger than {limit} bytes")]
    TooLarge {
        /// The layer's limit, in bytes.
        limit: usize,
    },
    /// The client stopped sending, or sent a malformed body. Answered 400.
    #[error("the request body could not be read")]
    Unreadable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl RequestBody {
    /// The body, read whole when it is to be read before locking.
    pub(crate) async fn prepare<B>(self, headers: &HeaderMap, body: B) -> Result<B, BodyError>
    where
        B: Body<Data = Bytes> + From<Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let Self::Read { limit } = self else {
            return Ok(body);
        };
        if declared_length(headers).is_some_and(|length| length > limit as u64) {
            return Err(BodyError::TooLarge { limit });
        }
        if body.is_end_stream() {
            return Ok(body);
        }
        match Limited::new(body, limit).collect().await {
            Ok(collected) => Ok(B::from(collected.to_bytes())),
            Err(error) if error.is::<LengthLimitError>() => Err(BodyError::TooLarge { limit }),
            Err(error) => Err(BodyError::Unreadable(error)),
        }
    }
}

/// The `Content-Length` the client declared, if it is a number.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body as AxumBody;

    fn streamed(parts: &[&'static [u8]]) -> AxumBody {
        let chunks: Vec<Result<Bytes, std::io::Error>> = parts
            .iter()
            .map(|part| Ok(Bytes::from_static(part)))
            .collect();
        AxumBody::from_stream(futures_util::stream::iter(chunks))
    }

    #[tokio::test]
    async fn a_body_within_the_limit_is_read_whole() {
        let read = RequestBody::Read { limit: 8 }
            .prepare(&HeaderMap::new(), streamed(&[b"1234", b"5678"]))
            .await
            .unwrap();
        assert!(read.size_hint().exact() == Some(8), "read into memory");
        assert_eq!(read.collect().await.unwrap().to_bytes(), "12345678");
    }

    #[tokio::test]
    async fn a_declared_length_past_the_limit_is_refused_unread() {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_LENGTH, "9".parse().unwrap());
        let refused = RequestBody::Read { limit: 8 }
            .prepare(&headers, AxumBody::empty())
            .await;
        assert!(matches!(refused, Err(BodyError::TooLarge { limit: 8 })));
    }

    #[tokio::test]
    async fn a_streamed_body_past_the_limit_is_refused() {
        let refused = RequestBody::Read { limit: 8 }
            .prepare(&HeaderMap::new(), streamed(&[b"12345", b"6789"]))
            .await;
        assert!(matches!(refused, Err(BodyError::TooLarge { limit: 8 })));
    }

    #[tokio::test]
    async fn a_streaming_layer_leaves_the_body_unread() {
        let body = RequestBody::Stream
            .prepare(&HeaderMap::new(), streamed(&[b"12345", b"6789"]))
            .await
            .unwrap();
        assert_eq!(body.size_hint().exact(), None, "still a stream");
    }
}
