//! What the crate's own stores share beside the contract: connecting within a deadline, URLs
//! with their passwords masked, reconnecting clients, the queue rules of stores that keep their
//! queue as data, and the holders the stores record,
//! and what etcd and ZooKeeper share (holder records, a session's
//! term, the keys a session owns).
//! A store author implements the contract (`backend/mod.rs`); none of this is promised to them.

#[cfg(any(
    feature = "redis",
    feature = "postgres",
    feature = "mysql",
    feature = "zookeeper"
))]
pub(in crate::backend) mod connect;
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
pub(in crate::backend) mod holder_record;
pub(in crate::backend) mod masked_url;
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
pub(in crate::backend) mod owned_keys;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "zookeeper"))]
pub(in crate::backend) mod reach;
#[cfg(any(
    feature = "redis",
    feature = "postgres",
    feature = "mysql",
    feature = "etcd",
    feature = "zookeeper"
))]
pub(in crate::backend) mod recorded_holder;
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
pub(in crate::backend) mod session_term;
pub(in crate::backend) mod ticket_rules;
