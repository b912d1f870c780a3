//! ZooKeeper ensembles for tests: one server (standalone) or several, on free loopback ports,
//! each with a data directory of its own, killed on drop; servers can be killed, restarted
//! (same ports, same data) and paused.
//!
//! The servers tick every 500 ms (a lost leader is noticed within seconds), grant sessions of
//! up to 60 s unless told otherwise (the conformance suite's 30 s leases need 45 s sessions;
//! ZooKeeper's own cap would be 20 ticks, 10 s) and delete empty
//! container nodes every second (by default every minute).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::private_server::{START_TIMEOUT, ServerDir, ServerProcess};
use crate::process::free_port;

/// Where Debian's `zookeeper` package puts the server and its logging configuration.
const CLASSPATH: &str = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar";
const SERVER_JAR: &str = "/usr/share/java/zookeeper.jar";

const INSTALL_HINT: &str = "ZooKeeper is not installed; the ZooKeeper tests start their own \
     servers from /usr/share/java/zookeeper.jar with `java`. Install them with \
     `apt-get install zookeeper` (Debian/Ubuntu).";

/// An ensemble of ZooKeeper servers on loopback ports, killed when dropped.
#[derive(Debug)]
pub struct ZookeeperEnsemble {
    servers: Vec<Server>,
    /// The longest session the servers grant.
    max_session: Duration,
}

#[derive(Debug)]
struct Server {
    client_port: u16,
    quorum_port: u16,
    election_port: u16,
    dir: ServerDir,
    process: ServerProcess,
}

impl ZookeeperEnsemble {
    /// Starts an ensemble of `size` servers (one runs standalone) and waits until every
    /// server serves.
    ///
    /// # Panics
    ///
    /// When ZooKeeper is not installed (the message says how to install it), or a server did
    /// not serve within 30 s.
    pub fn start(size: usize) -> Self {
        Self::granting_sessions_up_to(size, Duration::from_secs(60))
    }

    /// Starts an ensemble of `size` servers that grant sessions of at most `max_session`
    /// (ZooKeeper's own default is 20 ticks: 10 s here).
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn granting_sessions_up_to(size: usize, max_session: Duration) -> Self {
        assert!(Path::new(SERVER_JAR).exists(), "{INSTALL_HINT}");
        let servers = (0..size)
            .map(|_| Server {
                client_port: free_port(),
                quorum_port: free_port(),
                election_port: free_port(),
                dir: ServerDir::create("zookeeper", None),
                process: ServerProcess::default(),
            })
            .collect();
        let mut ensemble = Self {
            servers,
            max_session,
        };
        for index in 0..size {
            ensemble.configure(index);
            ensemble.spawn(index);
        }
        for index in 0..size {
            assert!(
                ensemble.wait_serving(index),
                "ZooKeeper server {index} did not serve within {START_TIMEOUT:?}"
            );
        }
        ensemble
    }

    /// The connect string of every server, `127.0.0.1:PORT,127.0.0.1:PORT,…`.
    pub fn connect_string(&self) -> String {
        let servers: Vec<String> = (0..self.servers.len())
            .map(|index| self.endpoint(index))
            .collect();
        servers.join(",")
    }

    /// The ensemble as a `--lock-store` URL: `zk://127.0.0.1:PORT,127.0.0.1:PORT,…`.
    pub fn url(&self) -> String {
        format!("zk://{}", self.connect_string())
    }

    /// Server `index`'s client address, `127.0.0.1:PORT`.
    pub fn endpoint(&self, index: usize) -> String {
        format!("127.0.0.1:{}", self.servers[index].client_port)
    }

    /// The index of the server that leads the ensemble now, as the servers still running see
    /// it; `None` while none leads (standalone counts as leading).
    pub fn leader(&self) -> Option<usize> {
        (0..self.servers.len()).find(|index| {
            self.mode(*index)
                .is_some_and(|mode| mode == "leader" || mode == "standalone")
        })
    }

    /// How many requests server `index` has received from clients since it started (`srvr`'s
    /// `Received`, pings included).
    pub fn requests_received(&self, index: usize) -> u64 {
        let status = self
            .four_letters(index, "srvr")
            .expect("the server answers");
        status
            .lines()
            .find_map(|line| line.strip_prefix("Received: "))
            .and_then(|count| count.trim().parse().ok())
            .expect("srvr reports what it received")
    }

    /// How many ephemeral nodes lie under `path`, as the leader `index` lists them by session
    /// (its `dump`; only a leader or a standalone server answers it).
    pub fn ephemerals_under(&self, index: usize, path: &str) -> usize {
        let dump = self
            .four_letters(index, "dump")
            .expect("the server answers");
        dump.lines()
            .filter(|line| line.trim_start().starts_with(path))
            .count()
    }

    /// Kills server `index` with SIGKILL.
    pub fn kill(&mut self, index: usize) {
        self.servers[index].process.kill();
    }

    /// Starts server `index` again (after [`kill`](Self::kill)) on its ports with its data,
    /// without waiting for it to rejoin.
    pub fn restart(&mut self, index: usize) {
        self.servers[index].process.kill();
        self.spawn(index);
    }

    /// Freezes server `index` with SIGSTOP.
    pub fn pause(&self, index: usize) {
        self.servers[index].process.signal("STOP");
    }

    /// Thaws server `index` with SIGCONT.
    pub fn resume(&self, index: usize) {
        self.servers[index].process.signal("CONT");
    }

    /// Whether server `index` serves clients (it is in a quorum), waiting up to 30 s.
    pub fn wait_serving(&self, index: usize) -> bool {
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if self.mode(index).is_some() {
                return true;
            }
            sleep(Duration::from_millis(100));
        }
        false
    }

    /// Server `index`'s mode (`leader`, `follower`, `standalone`) while it serves.
    fn mode(&self, index: usize) -> Option<String> {
        let status = self.four_letters(index, "srvr")?;
        let mode = status
            .lines()
            .find_map(|line| line.strip_prefix("Mode: "))?;
        Some(mode.trim().to_owned())
    }

    /// What server `index` answers to a four-letter command.
    fn four_letters(&self, index: usize, command: &str) -> Option<String> {
        let port = self.servers[index].client_port;
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        stream.write_all(command.as_bytes()).ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).ok()?;
        Some(answer)
    }

    /// Writes server `index`'s `zoo.cfg` and `myid`.
    fn configure(&self, index: usize) {
        let server = &self.servers[index];
        let dir = server.dir.path();
        let mut config = format!(
            "tickTime=500\ninitLimit=20\nsyncLimit=5\nmaxSessionTimeout={}\n\
             dataDir={}\nclientPort={}\nclientPortAddress=127.0.0.1\n\
             admin.enableServer=false\n4lw.commands.whitelist=srvr,dump,ruok\n",
            self.max_session.as_millis(),
            dir.display(),
            server.client_port,
        );
        if self.servers.len() > 1 {
            for (id, peer) in self.servers.iter().enumerate() {
                config.push_str(&format!(
                    "server.{}=127.0.0.1:{}:{}\n",
                    id + 1,
                    peer.quorum_port,
                    peer.election_port
                ));
            }
        }
        std::fs::write(dir.join("zoo.cfg"), config).expect("the server's configuration");
        std::fs::write(dir.join("myid"), format!("{}\n", index + 1)).expect("the server's id");
    }

    fn spawn(&mut self, index: usize) {
        let server = &mut self.servers[index];
        let mut command = Command::new("java");
        command
            .args([
                "-Xmx256m",
                "-XX:+UseSerialGC",
                // A server that lives seconds gains nothing from the optimizing compiler: the
                // quick one alone answers in 170 ms instead of 450, at two thirds of the CPU.
                "-XX:TieredStopAtLevel=1",
                "-XX:CICompilerCount=1",
                "-Dzookeeper.root.logger=ERROR,CONSOLE",
                // Empty container nodes go within a second, not the default minute.
                "-Dznode.container.checkIntervalMs=1000",
            ])
            .args(["-cp", CLASSPATH])
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(server.dir.path().join("zoo.cfg"));
        server.process.spawn(command, INSTALL_HINT);
    }
}
