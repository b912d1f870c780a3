//! A PostgreSQL server of a test's own (`initdb` + `postgres` on a free loopback port), for
//! the faults the machine's shared server must not suffer: killed and restarted.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::certificates::TlsFiles;
use crate::private_server::{Account, ServerDir, ServerProcess, wait_until_it_answers};
use crate::process::free_port;

const INSTALL_HINT: &str = "PostgreSQL's server programs (initdb, postgres) are not installed \
     under /usr/lib/postgresql/*/bin; the restart tests start a server of their own. Install \
     them with `apt-get install postgresql`.";

/// A private PostgreSQL cluster on a loopback port, killed and deleted when dropped.
#[derive(Debug)]
pub struct PostgresServer {
    bin: PathBuf,
    account: Option<Account>,
    port: u16,
    process: ServerProcess,
    dir: ServerDir,
    tls: Option<TlsFiles>,
}

impl PostgresServer {
    /// Makes a cluster (trust authentication, user `postgres`) and starts it; returns once it
    /// accepts connections.
    ///
    /// # Panics
    ///
    /// When PostgreSQL is not installed (the message says how to install it) or the server
    /// did not come up.
    pub fn start() -> Self {
        Self::start_with(false)
    }

    /// Starts a cluster as [`start`](Self::start) does, that takes connections over TLS only
    /// (`hostssl` alone in its `pg_hba.conf`): its certificate for `127.0.0.1` signed by a CA
    /// of the test's own ([`tls_files`](Self::tls_files)).
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_tls() -> Self {
        Self::start_with(true)
    }

    /// The certificates of a cluster [started with TLS](Self::start_tls).
    ///
    /// # Panics
    ///
    /// When it takes plain connections.
    pub fn tls_files(&self) -> &TlsFiles {
        self.tls.as_ref().expect("a cluster started with TLS")
    }

    fn start_with(tls: bool) -> Self {
        let bin = server_bin_dir();
        let account = Account::for_root("postgres");
        let dir = ServerDir::create("postgres", account);
        let status = as_account(Command::new(bin.join("initdb")), account)
            .arg("-D")
            .arg(dir.path().join("data"))
            .args(["-A", "trust", "-U", "postgres", "--no-sync"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("initdb runs");
        assert!(status.success(), "initdb failed in {:?}", dir.path());
        let tls = tls.then(|| {
            let only_tls = "local all all trust\nhostssl all all 127.0.0.1/32 trust\n";
            std::fs::write(dir.path().join("data/pg_hba.conf"), only_tls).expect("pg_hba.conf");
            TlsFiles::create(dir.path(), account)
        });
        let mut server = Self {
            bin,
            account,
            port: free_port(),
            process: ServerProcess::default(),
            dir,
            tls,
        };
        server.run();
        server
    }

    /// A URL of its database `postgres`, as user `postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Freezes the server and every backend it forked with SIGSTOP: connections stay open, nothing is
    /// answered.
    pub fn pause(&self) {
        self.process.signal_with_children("STOP");
    }

    /// Thaws a paused server with SIGCONT.
    pub fn resume(&self) {
        self.process.signal_with_children("CONT");
    }

    /// Kills the server and every backend it forked with SIGKILL: a crash.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts the killed server again on the same data and port (it recovers from its
    /// write-ahead log, as after a crash); returns once it accepts connections.
    pub fn restart(&mut self) {
        self.kill();
        self.run();
    }

    fn run(&mut self) {
        let mut postgres = as_account(Command::new(self.bin.join("postgres")), self.account);
        postgres
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-p", &self.port.to_string()])
            .arg("-k")
            .arg(self.dir.path())
            .args(["-c", "listen_addresses=127.0.0.1"]);
        if let Some(files) = &self.tls {
            postgres
                .args(["-c", "ssl=on"])
                .arg("-c")
                .arg(format!("ssl_cert_file={}", files.certificate.display()))
                .arg("-c")
                .arg(format!("ssl_key_file={}", files.key.display()));
        }
        self.process.spawn(postgres, INSTALL_HINT);
        let mut ready = Command::new(self.bin.join("pg_isready"));
        ready.args([
            "-h",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "-U",
            "postgres",
        ]);
        assert!(
            wait_until_it_answers(ready),
            "postgres on port {} did not accept connections",
            self.port
        );
    }
}

/// Runs `command` as `account` (when running as root).
fn as_account(mut command: Command, account: Option<Account>) -> Command {
    if let Some(account) = account {
        command.uid(account.uid).gid(account.gid);
    }
    command
}

/// The newest installed version's `bin` directory.
fn server_bin_dir() -> PathBuf {
    let versions =
        std::fs::read_dir("/usr/lib/postgresql").unwrap_or_else(|_| panic!("{INSTALL_HINT}"));
    versions
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .max()
        .map(|(_, bin)| bin)
        .unwrap_or_else(|| panic!("{INSTALL_HINT}"))
}
