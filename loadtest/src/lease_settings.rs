//! The lease settings every implementation lockbench measures uses.

use std::time::Duration;

/// Lease TTL every implementation uses.
pub const TTL: Duration = Duration::from_secs(10);

/// The etcd session's TTL and ZooKeeper's session timeout: long enough for [`TTL`] (a locker
/// leases two thirds of it).
pub const SESSION: Duration = Duration::from_secs(15);
