//! What the private database servers share: a data directory of their own, owned by the
//! account the server runs as, and a way to wait until a server answers.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// How long a started (or restarted, recovering) server may take to answer.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A fresh directory under the system's temporary directory, removed when dropped.
#[derive(Debug)]
pub(crate) struct ServerDir(PathBuf);

impl ServerDir {
    /// Creates `<tmp>/tower-lock-<kind>-<pid>-<n>`, owned by `account` (name and ids) when one
    /// is given: a server running as root is refused by PostgreSQL. What an earlier run of the
    /// same process id left there (a test killed before its clean-up) is removed first.
    pub(crate) fn create(kind: &str, account: Option<Account>) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "tower-lock-{kind}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("a temporary directory");
        if let Some(account) = account {
            std::os::unix::fs::chown(&path, Some(account.uid), Some(account.gid))
                .expect("the server's account owns its directory");
        }
        Self(path)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    /// Keeps the directory (for a look after the test): its path.
    pub(crate) fn keep(self) -> PathBuf {
        let path = self.0.clone();
        std::mem::forget(self);
        path
    }
}

impl Drop for ServerDir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

/// The account a server runs as.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Account {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

impl Account {
    /// `name`'s account when this process runs as root (servers refuse root, or should not run
    /// as it); `None` otherwise: the server runs as the current user.
    pub(crate) fn for_root(name: &str) -> Option<Self> {
        let id = |flag: &str| -> Option<u32> {
            let output = Command::new("id").args([flag]).output().ok()?;
            String::from_utf8(output.stdout).ok()?.trim().parse().ok()
        };
        if id("-u")? != 0 {
            return None;
        }
        let of = |flag: &str| -> u32 {
            let output = Command::new("id")
                .args([flag, name])
                .output()
                .expect("`id` runs");
            String::from_utf8_lossy(&output.stdout)
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("running as root, and there is no user {name:?}"))
        };
        Some(Self {
            uid: of("-u"),
            gid: of("-g"),
        })
    }
}

/// Runs `command` until it succeeds (the server answers), for at most [`START_TIMEOUT`].
pub(crate) fn wait_until_it_answers(mut command: Command) -> bool {
    command.stdout(Stdio::null()).stderr(Stdio::null());
    let deadline = Instant::now() + START_TIMEOUT;
    while Instant::now() < deadline {
        if command.status().is_ok_and(|status| status.success()) {
            return true;
        }
        sleep(Duration::from_millis(50));
    }
    false
}

/// A server's process, once started: killed with its whole process group (the server and the
/// processes it forked) when [`kill`](Self::kill)ed or dropped.
#[derive(Debug, Default)]
pub(crate) struct ServerProcess(Option<std::process::Child>);

impl ServerProcess {
    /// Spawns `command` as the leader of a process group of its own.
    pub(crate) fn spawn(&mut self, mut command: Command, install_hint: &str) {
        use std::os::unix::process::CommandExt;
        let child = command
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("{error}: {install_hint}"));
        self.0 = Some(child);
    }

    /// Sends `signal` (`STOP`, `CONT`, ...) to the server's leader process.
    pub(crate) fn signal(&self, signal: &str) {
        let child = self.0.as_ref().expect("the server is running");
        crate::process::send_signal(child, signal);
    }

    /// Sends `signal` to the server and to every process it forked (PostgreSQL's backends
    /// each start a session of their own, so a signal to the group would miss them).
    pub(crate) fn signal_with_children(&self, signal: &str) {
        let child = self.0.as_ref().expect("the server is running");
        crate::process::send_signal(child, signal);
        // pkill answers 1 when the server has forked nothing.
        Command::new("pkill")
            .args([&format!("-{signal}"), "-P", &child.id().to_string()])
            .status()
            .expect("`pkill` runs");
    }

    /// SIGKILL to the whole group (a crash, nothing shut down cleanly), and reaps the leader.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.0.take() {
            Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status()
                .ok();
            child.wait().ok();
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
