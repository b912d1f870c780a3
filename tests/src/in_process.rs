//! Driving an axum app in-process.

/// What a service answered, with the body read to the end.
#[derive(Debug)]
pub struct Reply {
    /// The status code.
    pub status: http::StatusCode,
    /// The headers.
    pub headers: http::HeaderMap,
    /// The body, as UTF-8 (lossily).
    pub body: String,
}

impl Reply {
    /// The body parsed as JSON.
    ///
    /// # Panics
    ///
    /// When the body is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {}", self.body))
    }
}

/// Sends `request` to a clone of `app` in-process and reads the whole answer.
pub async fn send(app: &axum::Router, request: http::Request<axum::body::Body>) -> Reply {
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    let response = app
        .clone()
        .oneshot(request)
        .await
        .expect("axum routers are infallible");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("a readable body").to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// A `POST` with an empty body.
pub fn post(uri: &str) -> http::Request<axum::body::Body> {
    http::Request::post(uri)
        .body(axum::body::Body::empty())
        .expect("a valid request")
}
