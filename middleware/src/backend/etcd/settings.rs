//! How an etcd backend connects: its namespace and session TTL.

use std::time::Duration;

/// The namespace every key of the backend lies under, unless [`EtcdSettings::namespace`]
/// says otherwise.
pub const DEFAULT_NAMESPACE: &str = "tower-lock/";

/// The session lease's TTL unless [`EtcdSettings::session_ttl`] says otherwise: a crashed
/// holder's locks pass on this long after its last renewal; lockers may lease up to two thirds
/// of it (10 s, the locker's default).
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(15);

/// How the backend connects: its namespace and session TTL.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use tower_lock::backend::etcd::EtcdSettings;
///
/// let settings = EtcdSettings::default()
///     .namespace("coupons/locks/")
///     .session_ttl(Duration::from_secs(30));
/// # let _ = settings;
/// ```
#[derive(Clone, Debug)]
pub struct EtcdSettings {
    pub(super) namespace: String,
    pub(super) session_ttl: Duration,
}

impl Default for EtcdSettings {
    fn default() -> Self {
        Self {
            namespace: DEFAULT_NAMESPACE.to_owned(),
            session_ttl: DEFAULT_SESSION_TTL,
        }
    }
}

impl EtcdSettings {
    /// Every key of the backend lies under `namespace` (default `tower-lock/`): backends with
    /// different namespaces never see each other's locks.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// The session lease's TTL, in whole seconds (default 15 s; the cluster may raise it to its
    /// minimum, 2 s with etcd's default timing): how long a crashed or cut-off holder keeps
    /// its locks, and three halves of the longest TTL a locker may use.
    pub fn session_ttl(mut self, ttl: Duration) -> Self {
        self.session_ttl = ttl;
        self
    }
}
