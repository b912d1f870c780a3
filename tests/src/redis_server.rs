//! `redis-server` child processes for tests.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use crate::certificates::TlsFiles;
use crate::private_server::ServerDir;
use crate::process::{free_port, send_signal};
use std::thread::sleep;
use std::time::{Duration, Instant};

const INSTALL_HINT: &str = "redis-server or redis-cli is not on PATH; the integration tests start their own \
     Redis processes. Install it with `apt-get install redis-server` (Debian/Ubuntu) or \
     `brew install redis` (macOS).";

/// How long a started server may take to answer PING.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A `redis-server` child process on a loopback port, killed when dropped.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    /// Where a durable server keeps its append-only file; `None`: nothing kept.
    durable: Option<ServerDir>,
    /// A TLS server's certificates, and the directory they lie in.
    tls: Option<(TlsFiles, ServerDir)>,
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
            if let Some(child) = spawn_and_wait(port, None) {
                return Self {
                    port,
                    child: Some(child),
                    durable: None,
                    tls: None,
                };
            }
        }
        panic!("redis-server did not start on any of 5 free ports");
    }

    /// Starts a server that keeps its data: an append-only file in a directory of its own,
    /// synced to disk before each write is answered (`appendfsync always`), so a
    /// [`restart`](Self::restart) after a kill finds every write it acknowledged.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_durable() -> Self {
        let dir = ServerDir::create("redis", None);
        for _ in 0..5 {
            let port = free_port();
            if let Some(child) = spawn_and_wait(port, Some(dir.path())) {
                return Self {
                    port,
                    child: Some(child),
                    durable: Some(dir),
                    tls: None,
                };
            }
        }
        panic!("redis-server did not start on any of 5 free ports");
    }

    /// Starts a server that speaks TLS only, its certificate for `127.0.0.1` signed by a CA
    /// of the test's own ([`tls_files`](Self::tls_files)), and waits until it answers PING
    /// over TLS. Not [restarted](Self::restart): a restart serves plain TCP.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_tls() -> Self {
        let dir = ServerDir::create("redis-tls", None);
        let files = TlsFiles::create(dir.path(), None);
        let path = |file: &Path| file.to_string_lossy().into_owned();
        for _ in 0..5 {
            let port = free_port();
            let tls = [
                "--port".to_owned(),
                "0".to_owned(),
                "--tls-port".to_owned(),
                port.to_string(),
                "--tls-cert-file".to_owned(),
                path(&files.certificate),
                "--tls-key-file".to_owned(),
                path(&files.key),
                "--tls-ca-cert-file".to_owned(),
                path(&files.ca),
                "--tls-auth-clients".to_owned(),
                "no".to_owned(),
            ];
            let tls: Vec<&str> = tls.iter().map(String::as_str).collect();
            let mut child = spawn(port, dir.path(), (None, &tls));
            if answers_ping_over_tls(&mut child, port, &files.ca) {
                return Self {
                    port,
                    child: Some(child),
                    durable: None,
                    tls: Some((files, dir)),
                };
            }
        }
        panic!("redis-server did not start with TLS on any of 5 free ports");
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its URL, `redis://127.0.0.1:PORT` (`rediss://` when it [speaks TLS](Self::start_tls)).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The certificates of a server [started with TLS](Self::start_tls).
    ///
    /// # Panics
    ///
    /// When it speaks plain TCP.
    pub fn tls_files(&self) -> &TlsFiles {
        let (files, _) = self.tls.as_ref().expect("a server started with TLS");
        files
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

    /// Kills the server if it runs, then starts it again on the same port — empty, unless it
    /// was started [durable](Self::start_durable) —, and waits until it answers PING.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            let durable = self.durable.as_ref().map(ServerDir::path);
            if let Some(child) = spawn_and_wait(self.port, durable) {
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
        send_signal(self.child.as_ref().expect("the server is running"), signal);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Spawns `redis-server` on `port` — keeping an append-only file in `durable`, if given —;
/// returns it once it answers PING, or `None` when it exited (the port was taken meanwhile).
fn spawn_and_wait(port: u16, durable: Option<&Path>) -> Option<Child> {
    const APPEND_ALWAYS: &[&str] = &["--appendonly", "yes", "--appendfsync", "always"];
    let mut child = match durable {
        Some(dir) => spawn(port, dir, (None, APPEND_ALWAYS)),
        None => spawn(port, &std::env::temp_dir(), (None, &[])),
    };
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

/// Waits until `child`, serving TLS on `port`, answers `redis-cli --tls`'s PING; `false` (and
/// the child killed) when it exited or did not answer in time.
fn answers_ping_over_tls(child: &mut Child, port: u16, ca: &Path) -> bool {
    let deadline = Instant::now() + START_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        let cacert = ca.to_string_lossy().into_owned();
        let ping = [
            "--tls",
            "--cacert",
            &cacert,
            "-p",
            &port.to_string(),
            "PING",
        ];
        let output = redis_cli(ping.map(str::to_owned));
        if output.stdout.starts_with(b"PONG") {
            return true;
        }
        sleep(Duration::from_millis(20));
    }
    child.kill().ok();
    child.wait().ok();
    false
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

/// Spawns `redis-server` on loopback `port`, keeping nothing on disk but what `extra` settings
/// ask for, in `dir`; its configuration file first, when it has one (a Sentinel's).
///
/// # Panics
///
/// When `redis-server` is not installed (the message says how to install it).
pub(crate) fn spawn(port: u16, dir: &Path, (config, extra): (Option<&Path>, &[&str])) -> Child {
    Command::new("redis-server")
        .args(config)
        .args(["--port", &port.to_string()])
        .args(["--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .args(["--dir", &dir.to_string_lossy()])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|error| match error.kind() {
            std::io::ErrorKind::NotFound => panic!("{INSTALL_HINT}"),
            _ => panic!("could not start redis-server: {error}"),
        })
}

/// Stalls replication from the master on `port`: freezes `replicas` (SIGSTOP), then writes
/// 64 MiB to `junk_key` on the master, more than the replicas' sockets and its own can buffer,
/// so that whatever the master writes next waits in its memory until they are thawed. Killed
/// meanwhile, the master takes it with it: a replication lag, as a master dying on a real
/// network has, which a master killed on loopback has not (its kernel delivers what it wrote).
pub(crate) fn stall_replication(port: u16, replicas: &[&Child], junk_key: &str) {
    for replica in replicas {
        send_signal(replica, "STOP");
    }
    let mut cli = Command::new("redis-cli")
        .args(["-p", &port.to_string(), "-x", "SET", junk_key])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-cli runs");
    let mut stdin = cli.stdin.take().expect("redis-cli's stdin");
    stdin
        .write_all(&vec![b'x'; 64 << 20])
        .expect("the junk is written");
    drop(stdin);
    let status = cli.wait().expect("redis-cli runs");
    assert!(status.success(), "SET {junk_key} on port {port} failed");
}

/// Runs `redis-cli` with `args`.
///
/// # Panics
///
/// When `redis-cli` is not installed (the message says how to install it).
pub(crate) fn redis_cli(args: impl IntoIterator<Item = String>) -> Output {
    Command::new("redis-cli")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| match error.kind() {
            std::io::ErrorKind::NotFound => panic!("{INSTALL_HINT}"),
            _ => panic!("could not run redis-cli: {error}"),
        })
}

/// The answer of the server on `port` to `args`, as `redis-cli` prints it; `None` when it did
/// not answer.
pub(crate) fn try_query(port: u16, args: &[&str]) -> Option<String> {
    let command = ["-p".to_owned(), port.to_string()]
        .into_iter()
        .chain(args.iter().map(|arg| (*arg).to_owned()));
    let output = redis_cli(command);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    (output.status.success() && !text.starts_with("Could not connect")).then_some(text)
}
