//! A small HTTP/1.1 client for driving demo replicas over real sockets.

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::Reply;

/// A pooled HTTP client; clones share the pool.
#[derive(Clone, Debug)]
pub struct Http {
    client: Client<HttpConnector, Full<Bytes>>,
    /// `Authorization: Bearer <token>` on every request, when set.
    bearer: Option<String>,
}

impl Default for Http {
    fn default() -> Self {
        Self {
            client: Client::builder(TokioExecutor::new()).build_http(),
            bearer: None,
        }
    }
}

impl Http {
    /// The same client, sending `Authorization: Bearer <token>` with every request.
    pub fn bearer(&self, token: &str) -> Self {
        Self {
            client: self.client.clone(),
            bearer: Some(token.to_owned()),
        }
    }

    /// `DELETE url`.
    pub async fn delete(&self, url: &str) -> Reply {
        self.send(Method::DELETE, url, None).await
    }

    /// Sends `method url` with an optional JSON body and reads the whole answer.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached or the connection breaks.
    pub async fn send(&self, method: Method, url: &str, json: Option<serde_json::Value>) -> Reply {
        let mut request = Request::builder().method(method).uri(url);
        if let Some(token) = &self.bearer {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let body = match json {
            Some(json) => {
                request = request.header("content-type", "application/json");
                Full::from(json.to_string())
            }
            None => Full::default(),
        };
        let response = self
            .client
            .request(request.body(body).expect("a valid request"))
            .await
            .unwrap_or_else(|error| panic!("{url}: {error}"));
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("a readable body").to_bytes();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    /// `GET url`.
    pub async fn get(&self, url: &str) -> Reply {
        self.send(Method::GET, url, None).await
    }

    /// `PUT url` with a JSON body.
    pub async fn put(&self, url: &str, json: serde_json::Value) -> Reply {
        self.send(Method::PUT, url, Some(json)).await
    }

    /// `POST url` with a JSON body.
    pub async fn post(&self, url: &str, json: serde_json::Value) -> Reply {
        self.send(Method::POST, url, Some(json)).await
    }
}
