//! Demo coupon service replicas as real processes.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::process::{free_port, send_signal};

/// How long a replica may take to answer `/healthz`.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A demo coupon service process on a free loopback port, killed when dropped.
///
/// Start it with the demo's binary, which Cargo builds for the demo's own tests:
/// `DemoReplica::start(env!("CARGO_BIN_EXE_demo-coupon-service"), &["--work-ms", "5"])`.
#[derive(Debug)]
pub struct DemoReplica {
    port: u16,
    child: Option<Child>,
}

impl DemoReplica {
    /// Starts `binary` with `args` and `--listen 127.0.0.1:<free port>`, and waits until it
    /// answers `GET /healthz`. Its logs go to this process's stderr, at `RUST_LOG=warn`.
    ///
    /// # Panics
    ///
    /// When it exits or does not answer within 20 s.
    pub fn start(binary: &str, args: &[&str]) -> Self {
        let port = free_port();
        let mut child = Command::new(binary)
            .args(args)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("could not start {binary}: {error}"));
        let deadline = Instant::now() + START_TIMEOUT;
        while !is_healthy(port) {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("demo replica exited at start with {status}; its stderr is above");
            }
            assert!(
                Instant::now() < deadline,
                "demo replica did not come up in 20 s"
            );
            sleep(Duration::from_millis(20));
        }
        Self {
            port,
            child: Some(child),
        }
    }

    /// Its base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Freezes it with SIGSTOP, as a long GC pause or a stalled VM would.
    pub fn pause(&self) {
        send_signal(self.child(), "STOP");
    }

    /// Thaws it with SIGCONT.
    pub fn resume(&self) {
        send_signal(self.child(), "CONT");
    }

    /// Kills it with SIGKILL: no shutdown, no releases.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().ok();
            child.wait().ok();
        }
    }

    /// Asks it to stop with SIGTERM and waits until it exited; returns whether it exited
    /// successfully.
    pub fn terminate(&mut self) -> bool {
        let mut child = self.child.take().expect("the replica is running");
        send_signal(&child, "TERM");
        child.wait().is_ok_and(|status| status.success())
    }

    fn child(&self) -> &Child {
        self.child.as_ref().expect("the replica is running")
    }
}

impl Drop for DemoReplica {
    fn drop(&mut self) {
        self.kill();
    }
}

fn is_healthy(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else {
        return false;
    };
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok();
    let request = b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n";
    let mut status_line = [0; 12];
    stream.write_all(request).is_ok()
        && stream.read_exact(&mut status_line).is_ok()
        && &status_line == b"HTTP/1.1 200"
}
