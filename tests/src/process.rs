//! Child-process plumbing shared by the Redis and demo fixtures.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Child, Command};
use std::sync::Mutex;

/// Ports this process has handed out: a server started on one may not be listening yet, and
/// the kernel hands a just-closed port straight out again.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A loopback port nobody listens on right now and that this process has not handed out
/// before, so two calls in a row (a server's client and peer ports) never give the same port.
pub fn free_port() -> u16 {
    let mut handed_out = HANDED_OUT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    loop {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|listener| listener.local_addr())
            .expect("a free loopback port")
            .port();
        if handed_out.insert(port) {
            return port;
        }
    }
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
