//! How a ZooKeeper backend connects: its root path and session timeout.

use std::time::Duration;

/// The path every node of the backend lies under, unless [`ZookeeperSettings::root`] says
/// otherwise.
pub const DEFAULT_ROOT: &str = "/tower-lock";

/// The session timeout asked for unless [`ZookeeperSettings::session_timeout`] says otherwise:
/// a crashed holder's locks pass on this long after the ensemble last heard from it; lockers
/// may lease up to two thirds of it (10 s, the locker's default).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(15);

/// How the backend connects: its root path and session timeout.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use tower_lock::backend::zookeeper::ZookeeperSettings;
///
/// let settings = ZookeeperSettings::default()
///     .root("/coupons/locks")
///     .session_timeout(Duration::from_secs(30));
/// # let _ = settings;
/// ```
#[derive(Clone, Debug)]
pub struct ZookeeperSettings {
    pub(super) root: String,
    pub(super) session_timeout: Duration,
}

impl Default for ZookeeperSettings {
    fn default() -> Self {
        Self {
            root: DEFAULT_ROOT.to_owned(),
            session_timeout: DEFAULT_SESSION_TIMEOUT,
        }
    }
}

impl ZookeeperSettings {
    /// Every node of the backend lies under `root` (default `/tower-lock`, created when
    /// missing): backends with different roots never see each other's locks.
    pub fn root(mut self, root: impl Into<String>) -> Self {
        self.root = root.into();
        self
    }

    /// The session timeout to ask for (default 15 s; the server keeps it between its
    /// `minSessionTimeout` and `maxSessionTimeout`, 4 s and 40 s by default): how long a
    /// crashed or cut-off holder keeps its locks, and three halves of the longest TTL a locker
    /// may use.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }
}
