//! A Redis Cluster's masters as the cluster link knows them: which master serves each hash
//! slot, a connection to each, and how that knowledge is renewed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, Weak};
use std::time::Duration;

use futures_util::future::{BoxFuture, select_ok};
use redis::aio::ConnectionManager;
use redis::{Client, ConnectionAddr, ConnectionInfo, RedisError, RedisResult, Value};
use tokio::time::Instant;

use super::hash_slot::SLOTS;

/// How long commands may wait with nothing answered before their master counts as stalled
/// (frozen, or failed over while its connection stays open): the slots are asked for again.
const STALLED_AFTER: Duration = Duration::from_secs(1);
/// How often the watch looks for a stalled master.
const WATCH_EVERY: Duration = Duration::from_millis(250);
/// How long a node may take to say which master serves which slots.
const ASK_SLOTS_WITHIN: Duration = Duration::from_secs(1);
/// The least time between two askings for the slots.
const REFRESH_GAP: Duration = Duration::from_millis(100);
/// A slot no master serves.
const UNSERVED: u16 = u16::MAX;

/// The cluster as known: every node connected to, the master of each slot, and where to ask
/// when that is out of date.
pub(super) struct Topology {
    /// The settings (password, TLS) of the nodes given, for the nodes found.
    template: ConnectionInfo,
    /// The nodes given, asked for the slots when no known master answers.
    seeds: Vec<String>,
    nodes: Mutex<HashMap<String, Node>>,
    slots: RwLock<Arc<SlotMap>>,
    /// Held while the slots are asked for; when they last were.
    refreshing: tokio::sync::Mutex<Option<Instant>>,
    /// A refresh is asked for and not started yet.
    refresh_asked: AtomicBool,
    epoch: Instant,
}

/// A connection to one node, counting the commands that wait for its answer.
#[derive(Clone)]
pub(super) struct Node(Arc<NodeLink>);

pub(super) struct NodeLink {
    pub(super) address: String,
    pub(super) connection: ConnectionManager,
    /// Commands sent and not answered yet.
    waiting: AtomicUsize,
    /// When the node last answered anything, or commands started waiting (ms since `epoch`).
    progress: AtomicU64,
    /// A command was given up on (its caller's timeout) before the node answered it, and
    /// nothing was answered since: the stall it may show is not forgotten when nothing waits.
    unanswered: AtomicBool,
    epoch: Instant,
}

/// Which master serves each slot.
#[derive(Clone)]
struct SlotMap {
    masters: Vec<Node>,
    /// Per slot, its master's index in `masters`, or [`UNSERVED`].
    owner: Box<[u16]>,
}

impl Topology {
    /// The topology of the cluster `seeds` belong to, asked of the first of them that answers;
    /// watched for stalled masters while it lives.
    pub(super) async fn discover(seeds: Vec<ConnectionInfo>) -> RedisResult<Arc<Self>> {
        let template = seeds.first().cloned().ok_or_else(|| {
            RedisError::from((redis::ErrorKind::Client, "no Redis Cluster node given"))
        })?;
        let topology = Arc::new(Self {
            template,
            seeds: seeds.iter().map(|seed| seed.addr().to_string()).collect(),
            nodes: Mutex::new(HashMap::new()),
            slots: RwLock::new(Arc::new(SlotMap::empty())),
            refreshing: tokio::sync::Mutex::new(None),
            refresh_asked: AtomicBool::new(false),
            epoch: Instant::now(),
        });
        topology.refresh().await?;
        tokio::spawn(watch(Arc::downgrade(&topology)));
        Ok(topology)
    }

    /// The master serving `slot`, if any does.
    pub(super) fn master_of(&self, slot: u16) -> Option<Node> {
        let slots = self.slots.read().unwrap_or_else(PoisonError::into_inner);
        let index = *slots.owner.get(usize::from(slot))?;
        slots.masters.get(usize::from(index)).cloned()
    }

    /// Every master serving a slot.
    pub(super) fn masters(&self) -> Vec<Node> {
        let slots = self.slots.read().unwrap_or_else(PoisonError::into_inner);
        slots.masters.clone()
    }

    /// The node at `address` (`host:port`), connected to on first use.
    pub(super) fn node(&self, address: &str) -> RedisResult<Node> {
        let mut nodes = self.nodes();
        if let Some(node) = nodes.get(address) {
            return Ok(node.clone());
        }
        let (host, port) = split_address(address)?;
        let info = self.template.clone().set_addr(match self.template.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host.to_owned(), port),
        });
        let connection = ConnectionManager::new_lazy_with_config(
            Client::open(info)?,
            super::connecting::commands_config(),
        )?;
        // Connected now, whoever waits for it: a connection made by a command alone stops half
        // made when that command is dropped (a refresh takes the first node's answer and drops
        // the others), and the timeout it started fails the next command at once.
        let mut connecting = connection.clone();
        tokio::spawn(async move {
            let _: RedisResult<Value> = redis::cmd("PING").query_async(&mut connecting).await;
        });
        let node = Node(Arc::new(NodeLink {
            address: address.to_owned(),
            connection,
            waiting: AtomicUsize::new(0),
            progress: AtomicU64::new(0),
            unanswered: AtomicBool::new(false),
            epoch: self.epoch,
        }));
        nodes.insert(address.to_owned(), node.clone());
        Ok(node)
    }

    /// `slot` is served by the node at `address` (a `MOVED` said so): the next commands for it
    /// go there, and the whole map is asked for again (a moved slot seldom moves alone). The
    /// node, for the command that was told.
    pub(super) fn moved(self: &Arc<Self>, slot: u16, address: &str) -> RedisResult<Node> {
        let node = self.node(address)?;
        {
            let mut slots = self.slots.write().unwrap_or_else(PoisonError::into_inner);
            let slots = Arc::make_mut(&mut slots);
            let index = match slots
                .masters
                .iter()
                .position(|master| master.0.address == address)
            {
                Some(index) => index,
                None => {
                    slots.masters.push(node.clone());
                    slots.masters.len() - 1
                }
            };
            if let Some(owner) = slots.owner.get_mut(usize::from(slot)) {
                *owner = u16::try_from(index).unwrap_or(UNSERVED);
            }
        }
        self.refresh_soon();
        Ok(node)
    }

    /// Asks for the slots again in the background, unless that is already asked for.
    pub(super) fn refresh_soon(self: &Arc<Self>) {
        if self.refresh_asked.swap(true, Ordering::AcqRel) {
            return;
        }
        let topology = Arc::clone(self);
        tokio::spawn(async move {
            if let Err(error) = topology.refresh().await {
                tracing::warn!(%error, "no Redis Cluster node said which master serves which slots");
            }
        });
    }

    /// Asks the known masters and the nodes given, all at once, which master serves which
    /// slots; the first answer replaces the map. Callers that come while a refresh runs wait
    /// for it and take its answer; refreshes are at least [`REFRESH_GAP`] apart.
    pub(super) async fn refresh(&self) -> RedisResult<()> {
        let asked = Instant::now();
        let mut last = self.refreshing.lock().await;
        if last.is_some_and(|last| last > asked) {
            return Ok(());
        }
        if let Some(last) = *last {
            tokio::time::sleep_until(last + REFRESH_GAP).await;
        }
        self.refresh_asked.store(false, Ordering::Release);
        let answer = self.ask_for_slots().await;
        *last = Some(Instant::now());
        let slots = answer?;
        let retired: Vec<Node> = {
            let mut nodes = self.nodes();
            let serving = |address: &String| slots.masters.iter().any(|m| &m.0.address == address);
            let retired = nodes.keys().filter(|address| !serving(address)).cloned();
            let retired: Vec<String> = retired.collect();
            retired
                .iter()
                .filter_map(|address| nodes.remove(address))
                .collect()
        };
        *self.slots.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(slots);
        drop(retired);
        Ok(())
    }

    async fn ask_for_slots(&self) -> RedisResult<SlotMap> {
        let mut addresses: Vec<String> =
            self.masters().iter().map(|m| m.0.address.clone()).collect();
        for seed in &self.seeds {
            if !addresses.contains(seed) {
                addresses.push(seed.clone());
            }
        }
        let askings = addresses
            .iter()
            .map(|address| -> BoxFuture<'_, RedisResult<SlotMap>> {
                Box::pin(self.slots_of(address))
            });
        select_ok(askings).await.map(|(slots, _)| slots)
    }

    /// What the node at `address` says of the slots (`CLUSTER SLOTS`).
    async fn slots_of(&self, address: &str) -> RedisResult<SlotMap> {
        let node = self.node(address)?;
        let mut cluster_slots = redis::cmd("CLUSTER");
        cluster_slots.arg("SLOTS");
        // Through `send`: an answer shows the node is there, a silence adds to its stall.
        let asked = node.send(async |connection| cluster_slots.query_async(connection).await);
        let reply: Value = tokio::time::timeout(ASK_SLOTS_WITHIN, asked)
            .await
            .map_err(|_| {
                RedisError::from((
                    redis::ErrorKind::Io,
                    "no answer to CLUSTER SLOTS",
                    format!("{address} within {ASK_SLOTS_WITHIN:?}"),
                ))
            })??;
        let (host, _) = split_address(address)?;
        let mut slots = SlotMap::empty();
        for (range, master) in slot_ranges(&reply, host)? {
            let index = match slots.masters.iter().position(|m| m.0.address == master) {
                Some(index) => index,
                None => {
                    slots.masters.push(self.node(&master)?);
                    slots.masters.len() - 1
                }
            };
            let index = u16::try_from(index).unwrap_or(UNSERVED);
            for slot in range {
                if let Some(owner) = slots.owner.get_mut(slot) {
                    *owner = index;
                }
            }
        }
        if slots.masters.is_empty() {
            return Err(RedisError::from((
                redis::ErrorKind::Client,
                "the Redis Cluster node serves no slots",
                address.to_owned(),
            )));
        }
        Ok(slots)
    }

    fn nodes(&self) -> MutexGuard<'_, HashMap<String, Node>> {
        self.nodes.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Node {
    pub(super) fn address(&self) -> &str {
        &self.0.address
    }

    /// This node's own connection, for commands about the node itself (its keys).
    pub(super) fn connection(&self) -> ConnectionManager {
        self.0.connection.clone()
    }

    /// Sends on this node's connection, counting the command as waiting until it is answered
    /// (or dropped).
    pub(super) async fn send<T>(
        &self,
        command: impl AsyncFnOnce(&mut ConnectionManager) -> RedisResult<T>,
    ) -> RedisResult<T> {
        let waiting = PendingCommand::start(&self.0);
        let answer = command(&mut self.0.connection.clone()).await;
        waiting.answered();
        answer
    }

    /// Whether commands wait, or one was given up on unanswered, and nothing was answered for
    /// [`STALLED_AFTER`].
    fn stalled(&self) -> bool {
        let link = &self.0;
        let quiet = link
            .now()
            .saturating_sub(link.progress.load(Ordering::Relaxed));
        let asked =
            link.waiting.load(Ordering::Relaxed) > 0 || link.unanswered.load(Ordering::Relaxed);
        asked && quiet >= STALLED_AFTER.as_millis() as u64
    }
}

impl NodeLink {
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

impl SlotMap {
    fn empty() -> Self {
        Self {
            masters: Vec::new(),
            owner: vec![UNSERVED; SLOTS].into_boxed_slice(),
        }
    }
}

/// Asks for the slots again whenever a master stalls, while the topology lives.
async fn watch(topology: Weak<Topology>) {
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        let Some(topology) = topology.upgrade() else {
            return;
        };
        if topology.masters().iter().any(Node::stalled) {
            tracing::debug!("a Redis Cluster master answers nothing; asking for the slots again");
            topology.refresh_soon();
        }
    }
}

/// A command waiting for its answer: counted among the waiting until answered or dropped.
struct PendingCommand<'a> {
    link: &'a NodeLink,
    answered: bool,
}

impl<'a> PendingCommand<'a> {
    fn start(link: &'a NodeLink) -> Self {
        let first = link.waiting.fetch_add(1, Ordering::Relaxed) == 0;
        if first && !link.unanswered.load(Ordering::Relaxed) {
            link.progress.store(link.now(), Ordering::Relaxed);
        }
        Self {
            link,
            answered: false,
        }
    }

    /// Any answer, an error included, shows that the node is there.
    fn answered(mut self) {
        self.answered = true;
        self.link.progress.store(self.link.now(), Ordering::Relaxed);
        self.link.unanswered.store(false, Ordering::Relaxed);
    }
}

impl Drop for PendingCommand<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.link.unanswered.store(true, Ordering::Relaxed);
        }
        self.link.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The slot ranges of a `CLUSTER SLOTS` reply and their masters' addresses; a master whose
/// host is unknown (empty or `?`) is on `asked_host`, the node that answered.
fn slot_ranges(
    reply: &Value,
    asked_host: &str,
) -> RedisResult<Vec<(std::ops::RangeInclusive<usize>, String)>> {
    let unexpected = || {
        RedisError::from((
            redis::ErrorKind::Parse,
            "an unexpected CLUSTER SLOTS reply",
            format!("{reply:?}"),
        ))
    };
    let Value::Array(entries) = reply else {
        return Err(unexpected());
    };
    let number = |value: &Value| match value {
        Value::Int(number) => usize::try_from(*number).ok(),
        _ => None,
    };
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    };
    entries
        .iter()
        .map(|entry| {
            let Value::Array(fields) = entry else {
                return None;
            };
            let (start, end) = (number(fields.first()?)?, number(fields.get(1)?)?);
            let Value::Array(master) = fields.get(2)? else {
                return None;
            };
            let host = text(master.first()?)?;
            let port = number(master.get(1)?)?;
            let host = if host.is_empty() || host == "?" {
                asked_host.to_owned()
            } else {
                host
            };
            Some((start..=end, format!("{host}:{port}")))
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(unexpected)
}

/// `host:port` split at its last colon.
pub(super) fn split_address(address: &str) -> RedisResult<(&str, u16)> {
    address
        .rsplit_once(':')
        .and_then(|(host, port)| Some((host, port.parse().ok()?)))
        .ok_or_else(|| {
            RedisError::from((
                redis::ErrorKind::Client,
                "not a host:port address",
                address.to_owned(),
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn cluster_slots_replies_name_each_ranges_master() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(7000), bulk("id0")]),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(7003), bulk("id3")]),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                Value::Array(vec![bulk("?"), Value::Int(7001), bulk("id1")]),
            ]),
        ]);
        let ranges = slot_ranges(&reply, "10.0.0.9").expect("a valid reply");
        assert_eq!(
            ranges,
            [
                (0..=5460, "127.0.0.1:7000".to_owned()),
                (5461..=16383, "10.0.0.9:7001".to_owned())
            ]
        );
        assert!(slot_ranges(&Value::Int(1), "h").is_err());
    }

    #[test]
    fn addresses_split_at_the_last_colon() {
        assert_eq!(
            split_address("127.0.0.1:7000").ok(),
            Some(("127.0.0.1", 7000))
        );
        assert_eq!(split_address("::1:7000").ok(), Some(("::1", 7000)));
        assert!(split_address("nowhere").is_err());
    }
}
