//! A `redis://` or `rediss://` URL as the connection redis-rs makes: over TLS, verified with
//! the system's trusted roots or the CA the URL names.

use redis::{ConnectionInfo, IntoConnectionInfo};

use super::url::StoreUrlError;
use super::url_parts::{Parts, malformed};

impl Parts<'_> {
    /// The connection `redis://…` or `rediss://…[?tls_ca=<path>]` names.
    pub(super) fn redis_address(&self) -> Result<ConnectionInfo, StoreUrlError> {
        if self.scheme == "rediss" {
            return self.tls_address();
        }
        self.option("", &[])?;
        self.parsed(&self.normalized())
    }

    #[cfg(not(feature = "tls"))]
    fn tls_address(&self) -> Result<ConnectionInfo, StoreUrlError> {
        Err(self.needs("tls"))
    }

    #[cfg(feature = "tls")]
    fn tls_address(&self) -> Result<ConnectionInfo, StoreUrlError> {
        let url = format!("rediss://{}", self.rest());
        let Some(path) = self.option("tls_ca", &["tls_ca"])? else {
            return self.parsed(&url);
        };
        let unusable = |why: String| malformed(self.url, format!("tls_ca={path}: {why}"));
        let pem = std::fs::read(path).map_err(|error| unusable(error.to_string()))?;
        const BEGIN: &[u8] = b"-----BEGIN CERTIFICATE-----";
        if !pem.windows(BEGIN.len()).any(|window| window == BEGIN) {
            return Err(unusable("no PEM certificate in it".into()));
        }
        let certificates = redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem),
        };
        let client = redis::Client::build_with_tls(self.parsed(&url)?, certificates)
            .map_err(|error| unusable(error.to_string()))?;
        Ok(client.get_connection_info().clone())
    }

    /// `url` as redis-rs reads it.
    fn parsed(&self, url: &str) -> Result<ConnectionInfo, StoreUrlError> {
        url.into_connection_info()
            .map_err(|error| malformed(self.url, error.to_string()))
    }
}
