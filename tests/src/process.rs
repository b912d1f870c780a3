//! Child-process plumbing shared by the Redis and demo fixtures.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Child, Command};
use std::sync::Mutex;

/// Ports this process has handed out, each with the file whose lock keeps the other test
/// processes off it while this one lives: a server started on one may not be listening yet, and
/// the kernel hands a just-closed port straight out again.
static HANDED_OUT: Mutex<BTreeMap<u16, File>> = Mutex::new(BTreeMap::new());

/// The ports handed out: below the kernel's ephemeral range (from 32768), so that no client
/// socket of any test holds one.
const PORTS: std::ops::Range<u16> = 20_000..32_768;

/// A loopback port nobody listens on right now and that no test process running (this one
/// included) has handed out, so two calls in a row (a server's client and peer ports) never
/// give the same port, nor do two tests running at once in processes of their own (`cargo
/// nextest`). Each port handed out is locked (a file per port under the system's temporary
/// directory) until this process exits.
pub fn free_port() -> u16 {
    let mut handed_out = HANDED_OUT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let locks = std::env::temp_dir().join("tower-lock-ports");
    std::fs::create_dir_all(&locks).expect("a directory for the ports' locks");
    let span = PORTS.end - PORTS.start;
    let first = fastrand::u16(..span);
    for offset in 0..span {
        let port = PORTS.start + (first + offset) % span;
        if handed_out.contains_key(&port) {
            continue;
        }
        let lock = File::create(locks.join(port.to_string())).expect("a port's lock file");
        if lock.try_lock().is_ok() && is_free(port) {
            handed_out.insert(port, lock);
            return port;
        }
    }
    panic!(
        "no free loopback port from {} to {}",
        PORTS.start,
        PORTS.end - 1
    );
}

/// Whether a server may listen on loopback `port` now.
fn is_free(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
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
