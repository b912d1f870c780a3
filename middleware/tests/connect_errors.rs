//! Every store's `connect`, given a closed port or a server that accepts and never answers: it
//! fails within the connect timeout (5 s), naming what it tried to reach, never the password.
//! Nothing listens on a closed port and nothing speaks on a silent one, so no server is needed.
#![cfg(any(
    feature = "redis",
    feature = "postgres",
    feature = "mysql",
    feature = "etcd",
    feature = "zookeeper"
))]

use std::fmt::Display;
use std::future::Future;
use std::net::TcpListener;
use std::time::{Duration, Instant};

/// The connect timeout, and what a slow machine may add to it.
const WITHIN: Duration = Duration::from_secs(5 + 2);

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A loopback listener whose connections complete (the kernel accepts them) and hear nothing.
#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
fn silent_server() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// Connects with `connecting` and checks its failure: in time, naming `target`, no `secret`.
async fn fails_clearly<T, E: Display>(
    connecting: impl Future<Output = Result<T, E>>,
    target: &str,
    secret: Option<&str>,
) -> String {
    let started = Instant::now();
    let Err(error) = connecting.await else {
        panic!("connected to {target}, where nothing answers");
    };
    let (took, message) = (started.elapsed(), error.to_string());
    assert!(took < WITHIN, "{target}: failed after {took:?}: {message}");
    assert!(
        message.contains(target),
        "the error does not name {target}: {message}"
    );
    if let Some(secret) = secret {
        assert!(
            !message.contains(secret),
            "the error shows the password: {message}"
        );
    }
    message
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use tower_lock::RedisBackend;

    #[tokio::test]
    async fn a_closed_port_is_named() {
        let port = closed_port();
        let url = format!("redis://:s3cret@127.0.0.1:{port}");
        let target = format!("127.0.0.1:{port}");
        fails_clearly(RedisBackend::connect(url.as_str()), &target, Some("s3cret")).await;
    }

    #[tokio::test]
    async fn a_silent_server_is_given_up_on() {
        let (_listener, port) = silent_server();
        let url = format!("redis://127.0.0.1:{port}");
        let target = format!("127.0.0.1:{port}");
        fails_clearly(RedisBackend::connect(url.as_str()), &target, None).await;
    }
}

#[cfg(feature = "redis-cluster")]
mod redis_cluster {
    use super::*;
    use tower_lock::RedisBackend;

    #[tokio::test]
    async fn closed_ports_are_named() {
        let ports = [closed_port(), closed_port()];
        let nodes = ports.map(|port| format!("redis://127.0.0.1:{port}"));
        let target = format!("127.0.0.1:{},127.0.0.1:{}", ports[0], ports[1]);
        let connecting = RedisBackend::connect_cluster(nodes.iter().map(String::as_str));
        fails_clearly(connecting, &target, None).await;
    }
}

#[cfg(feature = "redis-sentinel")]
mod redis_sentinel {
    use super::*;
    use tower_lock::RedisBackend;

    #[tokio::test]
    async fn a_closed_port_is_named() {
        let port = closed_port();
        let sentinels = [format!("redis://127.0.0.1:{port}")];
        let target = format!("127.0.0.1:{port}");
        let connecting =
            RedisBackend::connect_sentinel(sentinels.iter().map(String::as_str), "locks");
        fails_clearly(connecting, &target, None).await;
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use tower_lock::backend::postgres::{AdvisoryBackend, PostgresBackend};

    #[tokio::test]
    async fn a_closed_port_is_named() {
        let port = closed_port();
        let url = format!("postgres://app:s3cret@127.0.0.1:{port}/test");
        let target = format!("postgres://app:***@127.0.0.1:{port}/test");
        fails_clearly(PostgresBackend::connect(&url), &target, Some("s3cret")).await;
        fails_clearly(AdvisoryBackend::connect(&url), &target, Some("s3cret")).await;
    }

    #[tokio::test]
    async fn a_silent_server_is_given_up_on() {
        let (_listener, port) = silent_server();
        let url = format!("postgres://app@127.0.0.1:{port}/test");
        fails_clearly(PostgresBackend::connect(&url), &url, None).await;
    }
}

#[cfg(feature = "mysql")]
mod mysql {
    use super::*;
    use tower_lock::backend::mysql::{MysqlBackend, NowaitBackend};

    #[tokio::test]
    async fn a_closed_port_is_named() {
        let port = closed_port();
        let url = format!("mysql://app:s3cret@127.0.0.1:{port}/test");
        let target = format!("mysql://app:***@127.0.0.1:{port}/test");
        fails_clearly(MysqlBackend::connect(&url), &target, Some("s3cret")).await;
        fails_clearly(NowaitBackend::connect(&url), &target, Some("s3cret")).await;
    }

    #[tokio::test]
    async fn a_silent_server_is_given_up_on() {
        let (_listener, port) = silent_server();
        let url = format!("mysql://app@127.0.0.1:{port}/test");
        fails_clearly(MysqlBackend::connect(&url), &url, None).await;
    }
}

#[cfg(feature = "etcd")]
mod etcd {
    use super::*;
    use tower_lock::backend::etcd::EtcdBackend;

    #[tokio::test]
    async fn a_closed_port_is_named() {
        let port = closed_port();
        let target = format!("127.0.0.1:{port}");
        fails_clearly(EtcdBackend::connect([&target]), &target, None).await;
    }
}

#[cfg(feature = "zookeeper")]
mod zookeeper {
    use super::*;
    use tower_lock::backend::zookeeper::ZookeeperBackend;

    #[tokio::test]
    async fn a_closed_port_is_named() {
        let port = closed_port();
        let target = format!("127.0.0.1:{port}");
        fails_clearly(ZookeeperBackend::connect(&target), &target, None).await;
    }
}
