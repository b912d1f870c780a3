//! A Redis master with replicas, watched by Sentinels, all of the test's own on free loopback
//! ports: killed (and their files removed) on drop.

use std::path::PathBuf;
use std::process::Child;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::process::{free_port, send_signal};
use crate::redis_server;

/// The name the Sentinels know the master by.
pub const MASTER_NAME: &str = "locks";

/// How long the group may take to form, or to fail over.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A master, its replicas and three Sentinels (quorum two, a master down after 1 s without
/// an answer).
#[derive(Debug)]
pub struct RedisSentinels {
    servers: Vec<Server>,
    sentinels: Vec<Server>,
    dir: PathBuf,
}

#[derive(Debug)]
struct Server {
    port: u16,
    child: Option<Child>,
}

impl RedisSentinels {
    /// Starts a master with `replicas` replicas and three Sentinels, and waits until every
    /// replica has synced and every Sentinel knows them.
    ///
    /// # Panics
    ///
    /// When `redis-server` is not installed (the message says how), or the group did not form.
    pub fn start(replicas: usize) -> Self {
        let dir = std::env::temp_dir().join(format!("tower-lock-sentinels-{}", free_port()));
        std::fs::create_dir_all(&dir).expect("a directory for the Sentinels' files");
        let mut group = Self {
            servers: Vec::new(),
            sentinels: Vec::new(),
            dir,
        };
        let master = free_port();
        group.servers.push(group.server(master, &[]));
        for _ in 0..replicas {
            let replica = ["--replicaof", "127.0.0.1", &master.to_string()].map(str::to_owned);
            let replica: Vec<&str> = replica.iter().map(String::as_str).collect();
            group.servers.push(group.server(free_port(), &replica));
        }
        for _ in 0..3 {
            let sentinel = group.sentinel(free_port(), master);
            group.sentinels.push(sentinel);
        }
        group.wait_until_known(replicas);
        group
    }

    fn server(&self, port: u16, extra: &[&str]) -> Server {
        let mut settings = vec!["--repl-diskless-sync-delay", "0"];
        settings.extend(extra);
        let child = redis_server::spawn(port, &self.dir, (None, &settings));
        let server = Server {
            port,
            child: Some(child),
        };
        server.wait_for_ping();
        server
    }

    fn sentinel(&self, port: u16, master: u16) -> Server {
        let config = self.dir.join(format!("sentinel-{port}.conf"));
        let text = format!(
            "sentinel monitor {MASTER_NAME} 127.0.0.1 {master} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
             sentinel failover-timeout {MASTER_NAME} 3000\n\
             sentinel parallel-syncs {MASTER_NAME} 2\n"
        );
        std::fs::write(&config, text).expect("the Sentinel's config is written");
        let child = redis_server::spawn(port, &self.dir, (Some(&config), &["--sentinel"]));
        let sentinel = Server {
            port,
            child: Some(child),
        };
        sentinel.wait_for_ping();
        sentinel
    }

    /// The Sentinels' URLs, `redis://127.0.0.1:PORT`.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(Server::url).collect()
    }

    /// The Sentinels' addresses, `127.0.0.1:PORT`.
    pub fn sentinel_addresses(&self) -> Vec<String> {
        self.sentinels.iter().map(Server::address).collect()
    }

    /// The port of the master the Sentinels name now.
    pub fn master(&self) -> u16 {
        let named = self.sentinels.iter().find_map(|sentinel| {
            let answer = sentinel.query(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME])?;
            answer.lines().nth(1)?.trim().parse().ok()
        });
        named.expect("a Sentinel names the master")
    }

    /// The ports of the live servers that are not the master now.
    pub fn replicas(&self) -> Vec<u16> {
        let master = self.master();
        (self.servers.iter())
            .filter(|server| server.child.is_some() && server.port != master)
            .map(|server| server.port)
            .collect()
    }

    /// Kills the master with SIGKILL and waits until the Sentinels name another (a replica
    /// promoted): its port.
    pub fn kill_master_and_wait_for_another(&mut self) -> u16 {
        let old = self.kill_master();
        self.wait_for_another_master(old)
    }

    /// Kills the master with SIGKILL: its port.
    pub fn kill_master(&mut self) -> u16 {
        let old = self.master();
        if let Some(server) = self.servers.iter_mut().find(|server| server.port == old) {
            server.kill();
        }
        old
    }

    /// Starts the killed server on `port` again, empty, as a master (a group without
    /// replicas, whose Sentinels have nobody to promote, names it again).
    pub fn restart_as_master(&mut self, port: u16) {
        let Some(index) = self.servers.iter().position(|server| server.port == port) else {
            panic!("no server of the group on port {port}");
        };
        self.servers[index].kill();
        self.servers[index] = self.server(port, &[]);
    }

    /// Waits until the Sentinels name a master other than the one on port `old`, and it
    /// answers as a master: its port.
    pub fn wait_for_another_master(&self, old: u16) -> u16 {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let now = self.master();
            let serves = (self.servers.iter()).find(|server| server.port == now);
            let answers = serves.and_then(|server| server.query(&["ROLE"]));
            if now != old && answers.is_some_and(|role| role.starts_with("master")) {
                return now;
            }
            assert!(Instant::now() < deadline, "no replica took over from {old}");
            sleep(Duration::from_millis(50));
        }
    }

    /// Stalls replication (see `redis_server::stall_replication`): the master's replicas
    /// frozen, and its links to them full. Their ports, to thaw with `resume`.
    pub fn stall_replication(&self) -> Vec<u16> {
        let replicas = self.replicas();
        let children: Vec<&Child> = (self.servers.iter())
            .filter(|server| replicas.contains(&server.port))
            .filter_map(|server| server.child.as_ref())
            .collect();
        redis_server::stall_replication(self.master(), &children, "junk");
        replicas
    }

    /// Freezes the server on `port` (SIGSTOP).
    pub fn pause(&self, port: u16) {
        let server = self.servers.iter().find(|server| server.port == port);
        let child = server.and_then(|server| server.child.as_ref());
        send_signal(child.expect("a live server on that port"), "STOP");
    }

    /// Thaws the server on `port` (SIGCONT).
    pub fn resume(&self, port: u16) {
        let server = self.servers.iter().find(|server| server.port == port);
        let child = server.and_then(|server| server.child.as_ref());
        send_signal(child.expect("a live server on that port"), "CONT");
    }

    /// Waits until the master has `replicas` synced replicas, and every Sentinel knows them and
    /// the other Sentinels (without which they cannot agree on a failover).
    fn wait_until_known(&self, replicas: usize) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        let named = self.master();
        let master = (self.servers.iter()).find(|server| server.port == named);
        let master = master.expect("the Sentinels name one of the group's servers");
        loop {
            let info = master.query(&["INFO", "replication"]).unwrap_or_default();
            let synced = info.matches("state=online").count() >= replicas;
            let known = self.sentinels.iter().all(|sentinel| {
                let seen = sentinel.query(&["SENTINEL", "MASTER", MASTER_NAME]);
                let seen = seen.unwrap_or_default();
                let count = |name| field(&seen, name).and_then(|value| value.parse().ok());
                count("num-slaves") >= Some(replicas)
                    && count("num-other-sentinels") >= Some(self.sentinels.len() - 1)
            });
            if synced && known {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the replicas of {} did not sync, or the Sentinels did not see them and each \
                 other",
                master.port
            );
            sleep(Duration::from_millis(50));
        }
    }
}

/// The value after field `name` in a reply `redis-cli` printed as alternating lines.
fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let mut lines = text.lines();
    lines.find(|line| line.trim() == name)?;
    lines.next().map(str::trim)
}

impl Drop for RedisSentinels {
    fn drop(&mut self) {
        for server in self.servers.iter_mut().chain(&mut self.sentinels) {
            server.kill();
        }
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

impl Server {
    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn query(&self, args: &[&str]) -> Option<String> {
        redis_server::try_query(self.port, args)
    }

    fn wait_for_ping(&self) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        while self.query(&["PING"]).is_none() {
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not answer",
                self.port
            );
            sleep(Duration::from_millis(10));
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().ok();
            child.wait().ok();
        }
    }
}
