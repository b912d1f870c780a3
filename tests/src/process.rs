//! Child-process plumbing shared by the Redis and demo fixtures.

use std::net::{Ipv4Addr, TcpListener};
use std::process::{Child, Command};

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// Sends `signal` (`STOP`, `CONT`, `TERM`, ...) to `child`.
pub(crate) fn send_signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .expect("`kill` runs");
    assert!(status.success(), "kill -{signal} {} failed", child.id());
}
