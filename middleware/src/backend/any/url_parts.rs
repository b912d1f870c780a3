//! A store URL taken apart: its scheme, the hosts and path before its query, and the options
//! in it — what every store's `connect` in `url.rs` reads.

#[cfg(any(feature = "etcd", feature = "zookeeper"))]
use std::time::Duration;

use super::url::{SCHEMES, StoreUrlError};
use crate::backend::store_support::masked_url::masked;

/// A store URL taken apart: its scheme (in lower case: schemes are case-insensitive, RFC 3986
/// §3.1), what follows it up to the query, and the query's pairs.
pub(super) struct Parts<'a> {
    pub(super) url: &'a str,
    pub(super) scheme: String,
    pub(super) query: Vec<(String, String)>,
}

impl<'a> Parts<'a> {
    pub(super) fn of(url: &'a str) -> Result<Self, StoreUrlError> {
        let Some((scheme, after)) = url.split_once("://") else {
            return Err(malformed(
                url,
                format!("no scheme; the known ones: {SCHEMES}"),
            ));
        };
        let (authority, query) = after.split_once('?').unwrap_or((after, ""));
        let query = form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
        let authority = authority.split('/').next().unwrap_or_default();
        let authority = authority.rsplit('@').next().unwrap_or_default();
        for host in authority.split(',') {
            let port = host.rsplit_once(':').map_or("", |(_, port)| port);
            let digits = !port.is_empty() && port.bytes().all(|byte| byte.is_ascii_digit());
            if digits && !matches!(port.parse::<u16>(), Ok(1..)) {
                let why = format!("port {port} of {host} is not a port (1 to 65535)");
                return Err(malformed(url, why));
            }
        }
        let scheme = scheme.to_ascii_lowercase();
        Ok(Self { url, scheme, query })
    }

    /// The URL with its scheme in lower case, as the stores' clients read it.
    #[cfg(feature = "redis")]
    pub(super) fn normalized(&self) -> String {
        let after = self.url.split_once("://").map_or("", |(_, after)| after);
        format!("{}://{after}", self.scheme)
    }

    /// What follows the scheme, up to the query.
    #[cfg(any(
        feature = "redis",
        feature = "redis-cluster",
        feature = "redis-sentinel",
        feature = "postgres",
        feature = "mysql",
        feature = "etcd",
        feature = "zookeeper"
    ))]
    pub(super) fn rest(&self) -> &'a str {
        let after = self.url.split_once("://").map_or("", |(_, after)| after);
        after.split_once('?').map_or(after, |(rest, _)| rest)
    }

    /// The value of query option `key`, refusing any option not in `known`.
    pub(super) fn option(&self, key: &str, known: &[&str]) -> Result<Option<&str>, StoreUrlError> {
        if let Some((unknown, _)) = self
            .query
            .iter()
            .find(|(k, _)| !known.contains(&k.as_str()))
        {
            let known = if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            };
            let why = format!(
                "{}:// takes no option `{unknown}` (its options: {known})",
                self.scheme
            );
            return Err(malformed(self.url, why));
        }
        Ok(self
            .query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str()))
    }

    /// The value of query option `key` as milliseconds, refusing any option not in `known`.
    #[cfg(any(feature = "etcd", feature = "zookeeper"))]
    pub(super) fn millis(
        &self,
        key: &str,
        known: &[&str],
    ) -> Result<Option<Duration>, StoreUrlError> {
        let Some(value) = self.option(key, known)? else {
            return Ok(None);
        };
        match value.parse::<u64>() {
            Ok(millis) if millis > 0 => Ok(Some(Duration::from_millis(millis))),
            _ => Err(malformed(
                self.url,
                format!("{key}={value}: a number of milliseconds, like {key}=15000"),
            )),
        }
    }

    /// The comma-separated `host:port` list before any path, and the path (without its `/`).
    #[cfg(any(
        feature = "redis",
        feature = "redis-sentinel",
        feature = "etcd",
        feature = "zookeeper"
    ))]
    pub(super) fn hosts_and_path(&self) -> (Vec<&'a str>, Option<&'a str>) {
        let (hosts, path) = match self.rest().split_once('/') {
            Some((hosts, path)) => (hosts, Some(path).filter(|path| !path.is_empty())),
            None => (self.rest(), None),
        };
        (
            hosts.split(',').filter(|host| !host.is_empty()).collect(),
            path,
        )
    }

    /// The hosts before any path, at least one: else an error asking for `whose` hosts.
    #[cfg(any(feature = "redis", feature = "etcd", feature = "zookeeper"))]
    pub(super) fn required_hosts(&self, whose: &str) -> Result<Vec<&'a str>, StoreUrlError> {
        let (hosts, _) = self.hosts_and_path();
        if hosts.is_empty() {
            return Err(malformed(self.url, format!("name {whose}, host:port,…")));
        }
        Ok(hosts)
    }

    /// The error of a store whose feature is not built.
    #[cfg(not(all(
        feature = "redis",
        feature = "redis-cluster",
        feature = "redis-sentinel",
        feature = "postgres",
        feature = "mysql",
        feature = "etcd",
        feature = "zookeeper",
        feature = "tls"
    )))]
    pub(super) fn needs(&self, feature: &'static str) -> StoreUrlError {
        StoreUrlError::NotBuilt {
            url: masked(self.url),
            scheme: self.scheme.clone(),
            feature,
        }
    }

    /// The SQL stores' `mode` option.
    pub(super) fn mode(&self) -> Option<&str> {
        let mode = self.query.iter().find(|(key, _)| key == "mode");
        mode.map(|(_, mode)| mode.as_str())
    }

    /// The URL without the options that are this crate's (`mode` and `ours`), for the
    /// database's own client, and the value of `ours` (`default` without it). An option that is
    /// neither this crate's nor one the database's client reads (which it would ignore, so that
    /// a misspelt `lock_table` would leave the default table in use) is refused, naming both
    /// lists.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub(super) fn database_url(
        &self,
        ours: &str,
        default: &str,
    ) -> Result<(String, String), StoreUrlError> {
        let (clients, prefixed) = match self.scheme.as_str() {
            "postgres" | "postgresql" => (POSTGRES_OPTIONS, Some("options[")),
            _ => (MYSQL_OPTIONS, None),
        };
        let client_reads = |key: &str| {
            clients.contains(&key) || prefixed.is_some_and(|prefix| key.starts_with(prefix))
        };
        if let Some((unknown, _)) =
            (self.query.iter()).find(|(key, _)| key != ours && key != "mode" && !client_reads(key))
        {
            let why = format!(
                "{}:// takes no option `{unknown}` (tower-lock's: {ours}, mode; its client's: {})",
                self.scheme,
                clients.join(", ")
            );
            return Err(malformed(self.url, why));
        }
        let theirs: Vec<_> = (self.query.iter())
            .filter(|(key, _)| key != ours && key != "mode")
            .collect();
        let mut url = format!("{}://{}", self.scheme, self.rest());
        if !theirs.is_empty() {
            let mut query = form_urlencoded::Serializer::new(String::new());
            query.extend_pairs(theirs);
            url = format!("{url}?{}", query.finish());
        }
        let value = self.query.iter().find(|(key, _)| key == ours);
        Ok((
            url,
            value.map_or(default.to_owned(), |(_, value)| value.clone()),
        ))
    }

    /// Refuses a `mode` (the session-lock modes): an `AnyBackend` serves every lock shape.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub(super) fn every_shape(&self) -> Result<(), StoreUrlError> {
        match self.mode() {
            None => Ok(()),
            Some(mode) => Err(malformed(
                self.url,
                format!(
                    "mode={mode} has mutexes only, and an AnyBackend serves every lock shape: \
                     connect with AnyMutexBackend"
                ),
            )),
        }
    }
}

/// The options PostgreSQL's client (sqlx) reads from a URL (and `options[<name>]`); it ignores
/// any other, with a log line.
#[cfg(any(feature = "postgres", feature = "mysql"))]
const POSTGRES_OPTIONS: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];

/// The options MySQL's client (sqlx) reads from a URL; it ignores any other, silently.
#[cfg(any(feature = "postgres", feature = "mysql"))]
const MYSQL_OPTIONS: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslca",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "charset",
    "collation",
    "statement-cache-capacity",
    "socket",
    "timezone",
    "time-zone",
];

pub(super) fn malformed(url: &str, why: String) -> StoreUrlError {
    StoreUrlError::Malformed {
        url: masked(url),
        why,
    }
}
