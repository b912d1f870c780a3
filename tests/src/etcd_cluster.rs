//! `etcd` clusters for tests: one member or several, on free loopback ports, each with a data
//! directory of its own, killed on drop; members can be killed, restarted (same ports, same
//! data) and paused.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::private_server::{START_TIMEOUT, ServerDir, ServerProcess};
use crate::process::free_port;

const INSTALL_HINT: &str = "etcd is not on PATH; the etcd tests start their own clusters. \
     Install it with `apt-get install etcd-server` (Debian/Ubuntu) or `brew install etcd` (macOS).";

/// A cluster of `etcd` members on loopback ports, killed when dropped.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<Member>,
    initial_cluster: String,
}

#[derive(Debug)]
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    dir: ServerDir,
    process: ServerProcess,
}

impl EtcdCluster {
    /// Starts a cluster of `size` members and waits until it has a leader.
    ///
    /// # Panics
    ///
    /// When `etcd` is not installed (the message says how to install it), or the cluster did
    /// not elect a leader within 30 s.
    pub fn start(size: usize) -> Self {
        let members: Vec<Member> = (0..size)
            .map(|index| Member {
                name: format!("m{index}"),
                client_port: free_port(),
                peer_port: free_port(),
                dir: ServerDir::create("etcd", None),
                process: ServerProcess::default(),
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|member| format!("{}=http://127.0.0.1:{}", member.name, member.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Self {
            members,
            initial_cluster,
        };
        for index in 0..size {
            cluster.spawn(index);
        }
        for index in 0..size {
            assert!(
                cluster.wait_healthy(index),
                "etcd member {index} did not become healthy within {START_TIMEOUT:?}"
            );
        }
        cluster
    }

    /// The client URLs of every member, `http://127.0.0.1:PORT`.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.members.len())
            .map(|index| self.endpoint(index))
            .collect()
    }

    /// The cluster as a `--lock-store` URL: `etcd://127.0.0.1:PORT,127.0.0.1:PORT,…`.
    pub fn url(&self) -> String {
        let members: Vec<String> = self
            .members
            .iter()
            .map(|member| format!("127.0.0.1:{}", member.client_port))
            .collect();
        format!("etcd://{}", members.join(","))
    }

    /// Member `index`'s client URL.
    pub fn endpoint(&self, index: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[index].client_port)
    }

    /// The index of the member that leads the cluster now, as the members still running see
    /// it; `None` while no leader is known.
    pub fn leader(&self) -> Option<usize> {
        self.members.iter().enumerate().find_map(|(index, member)| {
            let status = http_post(member.client_port, "/v3/maintenance/status", "{}")?;
            let status: serde_json::Value = serde_json::from_str(&status).ok()?;
            // The JSON gateway writes 64-bit numbers as strings.
            let leader = status["leader"].as_str()?;
            (status["header"]["member_id"].as_str()? == leader).then_some(index)
        })
    }

    /// How many gRPC requests to `service` (`etcdserverpb.KV`, `etcdserverpb.Lease`, ...)
    /// member `index` has started since it started, by its own metrics.
    pub fn requests_started(&self, index: usize, service: &str) -> u64 {
        let metrics = http_get(self.members[index].client_port, "/metrics")
            .expect("the member serves its metrics");
        let service = format!("grpc_service=\"{service}\"");
        metrics
            .lines()
            .filter(|line| {
                line.starts_with("grpc_server_started_total{") && line.contains(&service)
            })
            .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
            .map(|count| count as u64)
            .sum()
    }

    /// How many keys lie under `prefix`, as member `index` reads them (a linearizable read
    /// through etcd's JSON gateway).
    pub fn keys_under(&self, index: usize, prefix: &str) -> u64 {
        let mut end = prefix.as_bytes().to_vec();
        let last = end.last_mut().expect("a non-empty prefix");
        *last += 1;
        let body = format!(
            r#"{{"key":"{}","range_end":"{}","count_only":true}}"#,
            base64(prefix.as_bytes()),
            base64(&end)
        );
        let answer = http_post(self.members[index].client_port, "/v3/kv/range", &body)
            .expect("the member answers a range read");
        let answer: serde_json::Value =
            serde_json::from_str(&answer).expect("the gateway answers JSON");
        // The JSON gateway writes 64-bit numbers as strings, and leaves out zeros.
        answer["count"]
            .as_str()
            .map_or(0, |count| count.parse().expect("a count"))
    }

    /// Puts `key` (an empty value) through member `index`'s JSON gateway, sent once and waited
    /// for as long as the member takes to answer (up to 30 s): the error etcd answered, if any.
    pub fn put_through(&self, index: usize, key: &str) -> Result<(), String> {
        let body = format!(r#"{{"key":"{}","value":""}}"#, base64(key.as_bytes()));
        let request = post("/v3/kv/put", &body);
        let port = self.members[index].client_port;
        match answer(port, &request, Duration::from_secs(30)) {
            Some((status, _)) if status == "200" => Ok(()),
            Some((status, body)) => Err(format!("{status}: {body}")),
            None => Err("no answer within 30 s".to_owned()),
        }
    }

    /// Kills member `index` with SIGKILL.
    pub fn kill(&mut self, index: usize) {
        self.members[index].process.kill();
    }

    /// Starts member `index` again (after [`kill`](Self::kill)) on its ports with its data,
    /// without waiting for it to rejoin.
    pub fn restart(&mut self, index: usize) {
        self.members[index].process.kill();
        self.spawn(index);
    }

    /// Freezes member `index` with SIGSTOP.
    pub fn pause(&self, index: usize) {
        self.members[index].process.signal("STOP");
    }

    /// Thaws member `index` with SIGCONT.
    pub fn resume(&self, index: usize) {
        self.members[index].process.signal("CONT");
    }

    /// Whether member `index` answers that the cluster is healthy (has a leader), waiting up
    /// to 30 s.
    pub fn wait_healthy(&self, index: usize) -> bool {
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            let health = http_get(self.members[index].client_port, "/health");
            if health.is_some_and(|body| body.contains("\"health\":\"true\"")) {
                return true;
            }
            sleep(Duration::from_millis(50));
        }
        false
    }

    fn spawn(&mut self, index: usize) {
        let member = &mut self.members[index];
        let client = format!("http://127.0.0.1:{}", member.client_port);
        let peer = format!("http://127.0.0.1:{}", member.peer_port);
        let mut command = Command::new("etcd");
        command
            .args(["--name", &member.name])
            .arg("--data-dir")
            .arg(member.dir.path())
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "tower-lock-tests"])
            .args(["--log-level", "error"]);
        member.process.spawn(command, INSTALL_HINT);
    }
}

/// The body of `GET path` on a loopback port, if it answered 200.
fn http_get(port: u16, path: &str) -> Option<String> {
    exchange(port, &format!("GET {path} HTTP/1.0\r\n\r\n"))
}

/// The body of `POST path` with a JSON `body`, if it answered 200.
fn http_post(port: u16, path: &str, body: &str) -> Option<String> {
    exchange(port, &post(path, body))
}

fn post(path: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// The body of a 200 answer to `request`, waiting up to 2 s.
fn exchange(port: u16, request: &str) -> Option<String> {
    let (status, body) = answer(port, request, Duration::from_secs(2))?;
    (status == "200").then_some(body)
}

/// The status and body of the answer to `request`, waiting up to `patience`.
fn answer(port: u16, request: &str, patience: Duration) -> Option<(String, String)> {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).ok()?;
    stream.set_read_timeout(Some(patience)).ok()?;
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?;
    Some((status.to_owned(), body.to_owned()))
}

/// Standard base64 with padding, as etcd's JSON gateway takes keys.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut text = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let group = chunk
            .iter()
            .fold(0u32, |group, byte| group << 8 | u32::from(*byte))
            << (8 * (3 - chunk.len()));
        for position in 0..4 {
            if position <= chunk.len() {
                let index = (group >> (18 - 6 * position)) & 63;
                text.push(char::from(ALPHABET[index as usize]));
            } else {
                text.push('=');
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_pads_like_the_standard() {
        assert_eq!(super::base64(b""), "");
        assert_eq!(super::base64(b"f"), "Zg==");
        assert_eq!(super::base64(b"fo"), "Zm8=");
        assert_eq!(super::base64(b"foo"), "Zm9v");
        assert_eq!(super::base64(b"tower-lock/"), "dG93ZXItbG9jay8=");
    }
}
