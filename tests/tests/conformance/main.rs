//! The conformance suite (`tower_lock::conformance_suite!`) on every store that runs as a
//! server: each case against a server, database or schema of its own, with two backends
//! standing in for two processes. (The memory backend runs it beside its code.)

// The `AnyBackend` cases nest one more layer of futures than rustc's default layout depth
// allows for.
#![recursion_limit = "256"]

mod any_store;
mod etcd;
mod mysql;
mod postgres;
mod redis;
mod redis_cluster;
mod redis_sentinel;
mod redlock;
mod zookeeper;
