//! Locks while things fail: holders cut off, connections killed, stores killed, restarted,
//! frozen or hung, consensus members and quorums lost, answers that come too late. Each case
//! starts the servers it breaks.

mod connection_faults;
mod consensus_failover;
mod consensus_sessions;
mod cut_off_holder;
mod database_restart;
mod etcd_resends;
mod late_acquire;
mod lease_faults;
mod redis_cluster;
mod redis_sentinel;
mod redlock;
mod release_safety;
mod store_down;
mod store_outage;
mod zookeeper_cleanup;
