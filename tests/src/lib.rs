//! Test support for tower-lock's end-to-end tests: real `redis-server` processes on free
//! loopback ports, started per test and killed on drop, with fault injection (kill, restart on
//! the same port, pause with SIGSTOP).
//!
//! Tests never use a Redis somebody left running: each starts its own.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

const INSTALL_HINT: &str = "redis-server is not on PATH; the integration tests start their own \
     Redis processes. Install it with `apt-get install redis-server` (Debian/Ubuntu) or \
     `brew install redis` (macOS).";

/// How long a started server may take to answer PING.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A `redis-server` child process on a loopback port, killed when dropped.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers PING.
    ///
    /// # Panics
    ///
    /// When `redis-server` is not installed (the message says how to install it), or no
    /// server came up after a few ports were tried.
    pub fn start() -> Self {
        for _ in 0..5 {
            let port = free_port();
            if let Some(child) = spawn_and_wait(port) {
                return Self {
                    port,
                    child: Some(child),
                };
            }
        }
        panic!("redis-server did not start on any of 5 free ports");
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its URL, `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A client for checks and fault injection from the test itself.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("a valid Redis URL")
    }

    /// Kills the server with SIGKILL (no shutdown, no goodbye to clients).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().ok();
            child.wait().ok();
        }
    }

    /// Kills the server if it runs, then starts a fresh one (empty, no data kept) on the same
    /// port, and waits until it answers PING.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(child) = spawn_and_wait(self.port) {
                self.child = Some(child);
                return;
            }
            sleep(Duration::from_millis(50));
        }
        panic!("redis-server did not restart on port {}", self.port);
    }

    /// Freezes the server with SIGSTOP: connections stay open, nothing is answered.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Thaws a paused server with SIGCONT.
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("the server is running");
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(child.id().to_string())
            .status()
            .expect("`kill` runs");
        assert!(status.success(), "kill -{signal} failed");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if self.child.is_some() {
            // A paused server would ignore SIGKILL's siblings; SIGKILL itself always works.
            self.kill();
        }
    }
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// Spawns `redis-server` on `port`; returns it once it answers PING, or `None` when it exited
/// (the port was taken meanwhile).
fn spawn_and_wait(port: u16) -> Option<Child> {
    let mut child = Command::new("redis-server")
        .args(["--port", &port.to_string()])
        .args(["--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .args(["--dir", &std::env::temp_dir().to_string_lossy()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|error| match error.kind() {
            std::io::ErrorKind::NotFound => panic!("{INSTALL_HINT}"),
            _ => panic!("could not start redis-server: {error}"),
        });
    let deadline = Instant::now() + START_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return None;
        }
        if answers_ping(port) {
            return Some(child);
        }
        sleep(Duration::from_millis(10));
    }
    child.kill().ok();
    child.wait().ok();
    None
}

fn answers_ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else {
        return false;
    };
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .ok();
    let mut reply = [0; 7];
    stream.write_all(b"PING\r\n").is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}

/// What a service answered, with the body read to the end.
#[derive(Debug)]
pub struct Reply {
    /// The status code.
    pub status: http::StatusCode,
    /// The headers.
    pub headers: http::HeaderMap,
    /// The body, as UTF-8 (lossily).
    pub body: String,
}

/// Sends `request` to a clone of `app` in-process and reads the whole answer.
pub async fn send(app: &axum::Router, request: http::Request<axum::body::Body>) -> Reply {
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    let response = app
        .clone()
        .oneshot(request)
        .await
        .expect("axum routers are infallible");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("a readable body").to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// A `POST` with an empty body.
pub fn post(uri: &str) -> http::Request<axum::body::Body> {
    http::Request::post(uri)
        .body(axum::body::Body::empty())
        .expect("a valid request")
}

/// Counts how many handlers are inside a critical section at once, and the most ever seen.
#[derive(Debug, Default)]
pub struct Occupancy {
    inside: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl Occupancy {
    /// Stays inside for `work`, counting itself while there.
    pub async fn visit(&self, work: Duration) {
        use std::sync::atomic::Ordering::SeqCst;

        let now = self.inside.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        tokio::time::sleep(work).await;
        self.inside.fetch_sub(1, SeqCst);
    }

    /// The most visitors that were inside at the same time.
    pub fn most(&self) -> usize {
        self.most.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A handler that reports when it is entered and stays inside until the test lets it out.
#[derive(Clone, Debug)]
pub struct Gate {
    entered: tokio::sync::mpsc::UnboundedSender<String>,
    exit: std::sync::Arc<tokio::sync::Semaphore>,
}

/// The test's side of a [`Gate`].
#[derive(Debug)]
pub struct GateControl {
    entered: tokio::sync::mpsc::UnboundedReceiver<String>,
    exit: std::sync::Arc<tokio::sync::Semaphore>,
}

impl Gate {
    /// A closed gate and its control.
    pub fn new() -> (Self, GateControl) {
        let (entered, entered_rx) = tokio::sync::mpsc::unbounded_channel();
        let exit = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
        (
            Self {
                entered,
                exit: exit.clone(),
            },
            GateControl {
                entered: entered_rx,
                exit,
            },
        )
    }

    /// Announces `who` has entered, then waits until the test lets one visitor out.
    pub async fn pass(&self, who: String) {
        self.entered.send(who).ok();
        self.exit
            .acquire()
            .await
            .expect("the gate is never closed")
            .forget();
    }
}

impl GateControl {
    /// Waits until somebody enters (at most 10 s) and says who.
    pub async fn entered(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(10), self.entered.recv())
            .await
            .expect("nobody entered the gate within 10 s")
            .expect("the gate is alive")
    }

    /// Whoever entered since the last look, without waiting.
    pub fn entered_now(&mut self) -> Option<String> {
        self.entered.try_recv().ok()
    }

    /// Lets `count` visitors out.
    pub fn let_out(&self, count: usize) {
        self.exit.add_permits(count);
    }
}
