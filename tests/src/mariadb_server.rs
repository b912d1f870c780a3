//! A MariaDB server of a test's own (`mariadb-install-db` + `mariadbd` on a free loopback
//! port), for the faults the machine's shared server must not suffer: killed and restarted.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::certificates::TlsFiles;
use crate::private_server::{ServerDir, ServerProcess, wait_until_it_answers};
use crate::process::free_port;

const INSTALL_HINT: &str = "MariaDB's server programs (mariadb-install-db, mariadbd) are not \
     installed; the restart tests start a server of their own. Install them with `apt-get \
     install mariadb-server`.";

/// A private MariaDB server on a loopback port, with a database `test`, killed and deleted
/// when dropped. A plain server skips the grant tables: any user connects without a password.
#[derive(Debug)]
pub struct MariadbServer {
    port: u16,
    process: ServerProcess,
    dir: ServerDir,
    tls: Option<TlsFiles>,
}

impl MariadbServer {
    /// Makes the data directory, starts the server and creates database `test`; returns once
    /// it answers.
    ///
    /// # Panics
    ///
    /// When MariaDB is not installed (the message says how to install it) or the server did
    /// not come up.
    pub fn start() -> Self {
        Self::start_with(false)
    }

    /// Starts a server as [`start`](Self::start) does, that takes connections over TLS only:
    /// its certificate for `127.0.0.1` signed by a CA of the test's own
    /// ([`tls_files`](Self::tls_files)). Its grant tables are kept (a server that skips them
    /// lets plain connections in too): `root` connects without a password.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_tls() -> Self {
        Self::start_with(true)
    }

    /// The certificates of a server [started with TLS](Self::start_tls).
    ///
    /// # Panics
    ///
    /// When it takes plain connections.
    pub fn tls_files(&self) -> &TlsFiles {
        self.tls.as_ref().expect("a server started with TLS")
    }

    fn start_with(tls: bool) -> Self {
        // Once in a while, in a loaded full run, the install failed: its output says why, and a
        // second try in a fresh directory tells a passing hiccup from a broken machine.
        let dir = install().unwrap_or_else(|first| {
            eprintln!("{first}; trying once more");
            install().unwrap_or_else(|second| panic!("{first}\n{second}"))
        });
        let tls = tls.then(|| TlsFiles::create(dir.path(), None));
        let mut server = Self {
            port: free_port(),
            process: ServerProcess::default(),
            dir,
            tls,
        };
        server.run();
        let created = server
            .client()
            .args(["-e", "CREATE DATABASE IF NOT EXISTS test"])
            .status()
            .is_ok_and(|status| status.success());
        assert!(created, "database `test` is created");
        server
    }

    /// A URL of its database `test`, as user `root`.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/test", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Freezes the server and its threads with SIGSTOP: connections stay open, nothing is
    /// answered.
    pub fn pause(&self) {
        self.process.signal_with_children("STOP");
    }

    /// Thaws a paused server with SIGCONT.
    pub fn resume(&self) {
        self.process.signal_with_children("CONT");
    }

    /// Kills the server with SIGKILL: a crash.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts the killed server again on the same data and port (InnoDB recovers from its
    /// redo log, as after a crash); returns once it answers.
    pub fn restart(&mut self) {
        self.kill();
        self.run();
    }

    fn run(&mut self) {
        let path = self.dir.path();
        let mut mariadbd = Command::new(mariadbd());
        mariadbd
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data(&self.dir).display()))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", path.join("socket").display()))
            .arg(format!("--pid-file={}", path.join("pid").display()))
            .arg("--user=root");
        match &self.tls {
            None => {
                mariadbd.arg("--skip-grant-tables");
            }
            Some(files) => {
                mariadbd
                    .arg(format!("--ssl-cert={}", files.certificate.display()))
                    .arg(format!("--ssl-key={}", files.key.display()))
                    .arg(format!("--ssl-ca={}", files.ca.display()))
                    .arg("--require-secure-transport=ON");
            }
        }
        self.process.spawn(mariadbd, INSTALL_HINT);
        let mut ping = self.client();
        ping.args(["-e", "SELECT 1"]);
        assert!(
            wait_until_it_answers(ping),
            "mariadbd on port {} did not answer",
            self.port
        );
    }

    /// The command-line client, connected to it.
    fn client(&self) -> Command {
        let mut client = Command::new("mariadb");
        client
            .arg("--no-defaults")
            .args([
                "-h",
                "127.0.0.1",
                "-P",
                &self.port.to_string(),
                "-u",
                "root",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        client
    }
}

/// A fresh server directory with a data directory `mariadb-install-db` made, or what it said
/// when it failed.
fn install() -> Result<ServerDir, String> {
    let dir = ServerDir::create("mariadb", None);
    let output = Command::new("mariadb-install-db")
        .arg("--no-defaults")
        .arg(format!("--datadir={}", data(&dir).display()))
        .args(["--user=root", "--auth-root-authentication-method=normal"])
        .arg("--skip-test-db")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|_| panic!("{INSTALL_HINT}"));
    if output.status.success() {
        return Ok(dir);
    }
    let said = String::from_utf8_lossy(&output.stderr);
    let said = said.lines().rev().take(20).collect::<Vec<_>>();
    Err(format!(
        "mariadb-install-db failed in {:?} ({}): {}",
        dir.path(),
        output.status,
        said.into_iter().rev().collect::<Vec<_>>().join("\n")
    ))
}

fn data(dir: &ServerDir) -> PathBuf {
    dir.path().join("data")
}

/// The server program: `mariadbd`, where Debian installs it.
fn mariadbd() -> PathBuf {
    ["/usr/sbin/mariadbd", "/usr/bin/mariadbd"]
        .iter()
        .map(PathBuf::from)
        .find(|path| path.exists())
        .unwrap_or_else(|| PathBuf::from("mariadbd"))
}
