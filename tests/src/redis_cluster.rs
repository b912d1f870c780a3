//! A Redis Cluster of the test's own: `redis-server` processes in cluster mode on free loopback
//! ports, joined by `redis-cli --cluster create`, killed (and their files removed) on drop.

use std::path::PathBuf;
use std::process::Child;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::process::{free_port, send_signal};
use crate::redis_server::{self, redis_cli, try_query};

/// How long a cluster may take to form, or to settle after a change.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A Redis Cluster of `masters` masters, each with `replicas` replicas.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<ClusterNode>,
    dir: PathBuf,
}

/// One `redis-server` of the cluster.
#[derive(Debug)]
struct ClusterNode {
    port: u16,
    bus_port: u16,
    child: Option<Child>,
}

impl RedisCluster {
    /// Starts `masters × (1 + replicas)` servers and joins them into a cluster, every slot
    /// covered and every node agreeing.
    ///
    /// # Panics
    ///
    /// When `redis-server` or `redis-cli` is not installed (the message says how to install
    /// them), or the cluster did not form.
    pub fn start(masters: usize, replicas: usize) -> Self {
        let dir = std::env::temp_dir().join(format!("tower-lock-cluster-{}", free_port()));
        std::fs::create_dir_all(&dir).expect("a directory for the cluster's files");
        let mut cluster = Self {
            nodes: Vec::new(),
            dir,
        };
        for _ in 0..masters * (1 + replicas) {
            let node = cluster.spawn(free_port(), free_port());
            cluster.nodes.push(node);
        }
        let addresses: Vec<String> = cluster.nodes.iter().map(ClusterNode::address).collect();
        let created = redis_cli(
            ["--cluster", "create"]
                .into_iter()
                .map(str::to_owned)
                .chain(addresses)
                .chain(["--cluster-replicas".to_owned(), replicas.to_string()])
                .chain(["--cluster-yes".to_owned()]),
        );
        assert!(
            created.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        cluster.wait_until_settled();
        cluster.wait_until_replicas_synced();
        cluster
    }

    /// Waits until every replica has its master's data and a live link to it.
    fn wait_until_replicas_synced(&self) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        for node in self.live() {
            loop {
                let info = try_query(node.port, &["INFO", "replication"]).unwrap_or_default();
                let replica = info.contains("role:slave");
                if !replica || info.contains("master_link_status:up") {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the replica on port {} did not sync within {SETTLE_TIMEOUT:?}",
                    node.port
                );
                sleep(Duration::from_millis(20));
            }
        }
    }

    fn spawn(&self, port: u16, bus_port: u16) -> ClusterNode {
        let config = self.dir.join(format!("nodes-{port}.conf"));
        let bus_text = bus_port.to_string();
        let config = config.to_string_lossy();
        let cluster = [
            "--cluster-enabled",
            "yes",
            "--cluster-port",
            &bus_text,
            "--cluster-config-file",
            &config,
            "--cluster-node-timeout",
            "1000",
            // Replicas sync at once (Redis waits 5 s for more of them by default): one that
            // has not cannot take over from its master.
            "--repl-diskless-sync-delay",
            "0",
        ];
        let child = redis_server::spawn(port, &self.dir, (None, &cluster));
        let node = ClusterNode {
            port,
            bus_port,
            child: Some(child),
        };
        node.wait_for_ping();
        node
    }

    /// The addresses of every node, `127.0.0.1:PORT`.
    pub fn addresses(&self) -> Vec<String> {
        self.nodes.iter().map(ClusterNode::address).collect()
    }

    /// The URLs of every node, `redis://127.0.0.1:PORT`.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(ClusterNode::url).collect()
    }

    /// The hash slot of `key`.
    pub fn slot_of(&self, key: &str) -> u16 {
        let slot = self.query_any(&["CLUSTER", "KEYSLOT", key]);
        slot.trim()
            .parse()
            .expect("CLUSTER KEYSLOT answers a number")
    }

    /// The port of the master that serves hash `slot` now.
    pub fn master_of(&self, slot: u16) -> u16 {
        let slots = self.query_any(&["CLUSTER", "SHARDS"]);
        master_of_slot(&slots, slot).unwrap_or_else(|| panic!("no master serves slot {slot}"))
    }

    /// The slot ranges the master on `port` serves now.
    pub fn slots_of(&self, port: u16) -> Vec<(u16, u16)> {
        let slots = self.query_any(&["CLUSTER", "SHARDS"]);
        let mut shards = shards(&slots).into_iter();
        let served = shards.find(|(_, master)| *master == port);
        served.map(|(ranges, _)| ranges).unwrap_or_default()
    }

    /// The ports of the live masters.
    pub fn masters(&self) -> Vec<u16> {
        let slots = self.query_any(&["CLUSTER", "SHARDS"]);
        shard_masters(&slots)
    }

    /// Moves hash `slot` (and its keys) from the master on port `from` to the one on `to`, the
    /// way `redis-cli --cluster reshard` does: importing, migrating, the keys, then the new
    /// owner told to every master.
    pub fn migrate_slot(&self, slot: u16, from: u16, to: u16) {
        self.begin_migration(slot, from, to);
        let (slot, to_id) = (slot.to_string(), node_id(to));
        loop {
            let keys = query(from, &["CLUSTER", "GETKEYSINSLOT", &slot, "100"]);
            let keys: Vec<&str> = keys.lines().filter(|key| !key.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let mut migrate = vec!["MIGRATE", "127.0.0.1"];
            let port = to.to_string();
            migrate.extend([port.as_str(), "", "0", "5000", "KEYS"]);
            migrate.extend(keys);
            query(from, &migrate);
        }
        for master in self.masters() {
            query(master, &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
        }
        self.wait_until_settled();
    }

    /// Starts moving hash `slot` from the master on port `from` to the one on `to`, and leaves
    /// it half moved: importing on `to`, migrating on `from`, every key still on `from`. A
    /// command for a key of the slot that `from` lacks is sent on to `to` (`ASK`).
    pub fn begin_migration(&self, slot: u16, from: u16, to: u16) {
        let slot = slot.to_string();
        let (from_id, to_id) = (node_id(from), node_id(to));
        query(to, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]);
        query(from, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]);
    }

    /// Kills the node on `port` with SIGKILL.
    pub fn kill(&mut self, port: u16) {
        if let Some(node) = self.nodes.iter_mut().find(|node| node.port == port) {
            node.kill();
        }
    }

    /// Starts the killed node on `port` again on its cluster configuration (empty: nothing is
    /// kept on disk), once it answers; [`wait_until_settled`](Self::wait_until_settled) tells
    /// when the cluster has it back.
    pub fn restart(&mut self, port: u16) {
        let Some(index) = self.nodes.iter().position(|node| node.port == port) else {
            panic!("no node of the cluster on port {port}");
        };
        self.nodes[index].kill();
        let node = self.spawn(port, self.nodes[index].bus_port);
        self.nodes[index] = node;
    }

    /// Freezes the node on `port` (SIGSTOP): connections stay open, nothing is answered.
    pub fn pause(&self, port: u16) {
        let node = self.nodes.iter().find(|node| node.port == port);
        let child = node.and_then(|node| node.child.as_ref());
        send_signal(child.expect("a live node on that port"), "STOP");
    }

    /// Stalls replication from the master on `port` (see `redis_server::stall_replication`):
    /// its replicas frozen, and its links to them full. Their ports, to thaw with `resume`.
    pub fn stall_replication(&self, port: u16) -> Vec<u16> {
        let following = format!("master_port:{port}");
        let replicas: Vec<&ClusterNode> = (self.live())
            .filter(|node| {
                let info = try_query(node.port, &["INFO", "replication"]).unwrap_or_default();
                info.contains("role:slave") && info.lines().any(|line| line.trim() == following)
            })
            .collect();
        let ranges = self.slots_of(port);
        let served = |key: &String| {
            let slot = self.slot_of(key);
            (ranges.iter()).any(|&(low, high)| low <= slot && slot <= high)
        };
        let junk = (0..).map(|n| format!("junk-{n}")).find(served);
        let junk = junk.expect("some key is served by the master");
        let children: Vec<&Child> = replicas
            .iter()
            .filter_map(|node| node.child.as_ref())
            .collect();
        redis_server::stall_replication(port, &children, &junk);
        replicas.iter().map(|node| node.port).collect()
    }

    /// Thaws the node on `port` (SIGCONT).
    pub fn resume(&self, port: u16) {
        let node = self.nodes.iter().find(|node| node.port == port);
        let child = node.and_then(|node| node.child.as_ref());
        send_signal(child.expect("a live node on that port"), "CONT");
    }

    /// Waits until every live node says the cluster is ok and agrees on which master serves
    /// every slot, each of them a live node (a killed master's replica has taken over).
    pub fn wait_until_settled(&self) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        let live: Vec<u16> = self.live().map(|node| node.port).collect();
        loop {
            let views: Vec<Option<String>> = (self.live().map(|node| {
                let info = try_query(node.port, &["CLUSTER", "INFO"])?;
                let ok = info.contains("cluster_state:ok");
                let shards = try_query(node.port, &["CLUSTER", "SHARDS"])?;
                let masters_live = shard_masters(&shards)
                    .iter()
                    .all(|port| live.contains(port));
                (ok && masters_live).then(|| normalized_masters(&shards))
            }))
            .collect();
            let first = views.first().cloned().flatten();
            if first.is_some() && views.iter().all(|view| *view == first) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not settle within {SETTLE_TIMEOUT:?}"
            );
            sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the other nodes name a master other than the frozen one on `port` for every
    /// slot it served (its replica took over), asking only them: a frozen node answers nobody.
    pub fn wait_until_replaced(&self, port: u16) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        let others: Vec<u16> = (self.live())
            .map(|node| node.port)
            .filter(|&other| other != port)
            .collect();
        loop {
            let replaced = others.iter().all(|&other| {
                let ok = try_query(other, &["CLUSTER", "INFO"])
                    .is_some_and(|info| info.contains("cluster_state:ok"));
                let shards = try_query(other, &["CLUSTER", "SHARDS"]).unwrap_or_default();
                ok && !shard_masters(&shards).contains(&port)
            });
            if replaced {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no replica took over from the master on port {port} within {SETTLE_TIMEOUT:?}"
            );
            sleep(Duration::from_millis(50));
        }
    }

    fn live(&self) -> impl Iterator<Item = &ClusterNode> {
        self.nodes.iter().filter(|node| node.child.is_some())
    }

    fn query_any(&self, args: &[&str]) -> String {
        (self.live())
            .find_map(|node| try_query(node.port, args))
            .expect("a live node answers")
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

impl ClusterNode {
    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn wait_for_ping(&self) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        while try_query(self.port, &["PING"]).is_none() {
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} (bus {}) did not answer",
                self.port,
                self.bus_port
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

/// The answer of the node on `port` to `args`, as `redis-cli` prints it.
fn query(port: u16, args: &[&str]) -> String {
    try_query(port, args).unwrap_or_else(|| panic!("node {port} did not answer {args:?}"))
}

/// The id of the node on `port`.
fn node_id(port: u16) -> String {
    query(port, &["CLUSTER", "MYID"]).trim().to_owned()
}

/// `CLUSTER SHARDS` as `redis-cli` prints it: per shard, its slot ranges and nodes, each node's
/// fields as name and value on lines of their own. Every shard's master: its slot ranges and
/// port.
fn shards(text: &str) -> Vec<(Vec<(u16, u16)>, u16)> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut shards = Vec::new();
    let mut index = 0;
    while index < lines.len() {
        if lines[index] != "slots" {
            index += 1;
            continue;
        }
        index += 1;
        let mut bounds = Vec::new();
        while let Some(bound) = lines.get(index).and_then(|line| line.parse::<u16>().ok()) {
            bounds.push(bound);
            index += 1;
        }
        let ranges = bounds.chunks(2).map(|pair| (pair[0], pair[1])).collect();
        let shard_end = (index..lines.len())
            .find(|&at| lines[at] == "slots")
            .unwrap_or(lines.len());
        if let Some(port) = master_port(&lines[index..shard_end]) {
            shards.push((ranges, port));
        }
        index = shard_end;
    }
    shards
}

/// The port of the node whose role is master and whose health is online, among one shard's
/// lines.
fn master_port(lines: &[&str]) -> Option<u16> {
    let field = |node: &[&str], name: &str| {
        let at = node.iter().position(|line| *line == name)?;
        node.get(at + 1).map(|value| (*value).to_owned())
    };
    let starts: Vec<usize> = (lines.iter().enumerate())
        .filter(|(_, line)| **line == "id")
        .map(|(at, _)| at)
        .collect();
    starts.iter().enumerate().find_map(|(n, &start)| {
        let end = starts.get(n + 1).copied().unwrap_or(lines.len());
        let node = &lines[start..end];
        let master = field(node, "role").as_deref() == Some("master")
            && field(node, "health").as_deref() == Some("online");
        master.then(|| field(node, "port")?.parse().ok()).flatten()
    })
}

fn master_of_slot(text: &str, slot: u16) -> Option<u16> {
    shards(text)
        .into_iter()
        .find(|(ranges, _)| {
            ranges
                .iter()
                .any(|&(low, high)| low <= slot && slot <= high)
        })
        .map(|(_, port)| port)
}

fn shard_masters(text: &str) -> Vec<u16> {
    let mut ports: Vec<u16> = shards(text)
        .into_iter()
        .filter(|(ranges, _)| !ranges.is_empty())
        .map(|(_, port)| port)
        .collect();
    ports.sort_unstable();
    ports
}

/// Which master serves which slot ranges, in a form two nodes' views can be compared in.
fn normalized_masters(text: &str) -> String {
    let mut shards: Vec<String> = shards(text)
        .into_iter()
        .filter(|(ranges, _)| !ranges.is_empty())
        .map(|(ranges, port)| format!("{ranges:?}@{port}"))
        .collect();
    shards.sort();
    shards.join(" ")
}
