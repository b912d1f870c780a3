use std::sync::LazyLock;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{AsyncCommands, Cmd, Pipeline, RedisFuture, Script, Value};
use tower_lock::RedisBackend;
use tower_lock::backend::any::AnyBackend;
use tower_lock::backend::redis::{ClusterLink, SentinelConnection};

use super::{Stock, StoreError, Summary, duplicates};

static READ_STOCK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("read_stock.lua")));
static COMMIT_CLAIM: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("commit_claim.lua")));

/// Coupons in Redis — one node (`ConnectionManager`) or a Redis Cluster (`ClusterLink`):
/// `coupon:{<id>}` is a hash of `supply`, `remaining` and `fence` (the largest fencing token
/// that has read it for a claim), `coupon:{<id>}:claims` a list with one user id per claim
/// record (the braces keep a coupon's two keys in one hash slot, for the claim's script), and
/// `demo:coupons` the set of every id.
#[derive(Clone)]
pub struct RedisStore {
    connection: RedisConnection,
}

/// The connection of a [`RedisStore`]: to one node, or to a cluster.
#[derive(Clone)]
pub enum RedisConnection {
    /// One Redis node.
    Node(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterLink),
    /// The master Redis Sentinels name.
    Sentinel(SentinelConnection),
}

impl RedisConnection {
    /// The connection of `backend` when its store is Redis (a node, a cluster, or the master
    /// Sentinels name): coupons kept there travel with the locks.
    pub fn of(backend: &AnyBackend) -> Option<Self> {
        if let Some(node) = backend.downcast_ref::<RedisBackend>() {
            return Some(Self::Node(node.connection()));
        }
        if let Some(cluster) = backend.downcast_ref::<RedisBackend<ClusterLink>>() {
            return Some(Self::Cluster(cluster.connection()));
        }
        let master = backend.downcast_ref::<RedisBackend<SentinelConnection>>()?;
        Some(Self::Sentinel(master.connection()))
    }
}

impl std::fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Node(_) => "RedisConnection::Node",
            Self::Cluster(_) => "RedisConnection::Cluster",
            Self::Sentinel(_) => "RedisConnection::Sentinel",
        })
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Node(connection) => connection.req_packed_command(cmd),
            Self::Cluster(connection) => connection.req_packed_command(cmd),
            Self::Sentinel(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Node(connection) => connection.req_packed_commands(pipeline, offset, count),
            Self::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
            Self::Sentinel(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Node(connection) => connection.get_db(),
            Self::Cluster(connection) => connection.get_db(),
            Self::Sentinel(connection) => connection.get_db(),
        }
    }
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").finish_non_exhaustive()
    }
}

/// The hash of every replica's latest dashboard report.
const REPORTS_KEY: &str = "demo:replicas";

/// The set of every coupon's id.
const COUPONS_KEY: &str = "demo:coupons";

fn coupon_key(id: &str) -> String {
    format!("coupon:{{{id}}}")
}

fn claims_key(id: &str) -> String {
    format!("coupon:{{{id}}}:claims")
}

impl From<redis::RedisError> for StoreError {
    fn from(error: redis::RedisError) -> Self {
        Self(error.to_string())
    }
}

impl RedisStore {
    /// A store on this connection.
    pub fn new(connection: RedisConnection) -> Self {
        Self { connection }
    }

    /// The coupon's keys at once; its id in the set of every id after (on a cluster, another
    /// slot's).
    pub(super) async fn reset(&self, id: &str, stock: i64) -> Result<(), StoreError> {
        let mut connection = self.connection.clone();
        redis::pipe()
            .atomic()
            .del(claims_key(id))
            .hset_multiple(coupon_key(id), &[("supply", stock), ("remaining", stock)])
            .exec_async(&mut connection)
            .await?;
        let _: u64 = connection.sadd(COUPONS_KEY, id).await?;
        Ok(())
    }

    pub(super) async fn stock(
        &self,
        id: &str,
        fence: Option<u64>,
    ) -> Result<Option<Stock>, StoreError> {
        let mut connection = self.connection.clone();
        let (supply, remaining): (Option<i64>, Option<i64>) = match fence {
            Some(fence) => {
                READ_STOCK
                    .key(coupon_key(id))
                    .arg(fence)
                    .invoke_async(&mut connection)
                    .await?
            }
            None => {
                redis::cmd("HMGET")
                    .arg(coupon_key(id))
                    .arg("supply")
                    .arg("remaining")
                    .query_async(&mut connection)
                    .await?
            }
        };
        Ok(supply
            .zip(remaining)
            .map(|(supply, remaining)| Stock { supply, remaining }))
    }

    pub(super) async fn has_claim(&self, id: &str, user: &str) -> Result<bool, StoreError> {
        let position: Option<i64> = redis::cmd("LPOS")
            .arg(claims_key(id))
            .arg(user)
            .query_async(&mut self.connection.clone())
            .await?;
        Ok(position.is_some())
    }

    pub(super) async fn commit_claim(
        &self,
        id: &str,
        user: &str,
        remaining: i64,
        fence: Option<u64>,
    ) -> Result<bool, StoreError> {
        let written: i64 = COMMIT_CLAIM
            .key(coupon_key(id))
            .key(claims_key(id))
            .arg(remaining)
            .arg(user)
            .arg(fence.map(|fence| fence.to_string()).unwrap_or_default())
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok(written == 1)
    }

    pub(super) async fn set_stock(&self, id: &str, stock: Stock) -> Result<(), StoreError> {
        let fields = [("supply", stock.supply), ("remaining", stock.remaining)];
        let _: () = self
            .connection
            .clone()
            .hset_multiple(coupon_key(id), &fields)
            .await?;
        Ok(())
    }

    /// Adds `delta` to the count of running audits; returns the new count.
    pub(super) async fn audits(&self, delta: i64) -> Result<i64, StoreError> {
        Ok(self
            .connection
            .clone()
            .incr("demo:audits:running", delta)
            .await?)
    }

    pub(super) async fn publish_report(
        &self,
        replica: &str,
        report: &str,
    ) -> Result<(), StoreError> {
        let () = (self.connection.clone())
            .hset(REPORTS_KEY, replica, report)
            .await?;
        Ok(())
    }

    pub(super) async fn coupon_ids(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.connection.clone().smembers(COUPONS_KEY).await?)
    }

    pub(super) async fn reports(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.connection.clone().hvals(REPORTS_KEY).await?)
    }

    pub(super) async fn forget_reports(&self, replicas: &[String]) -> Result<(), StoreError> {
        if replicas.is_empty() {
            return Ok(());
        }
        let _: u64 = (self.connection.clone())
            .hdel(REPORTS_KEY, replicas)
            .await?;
        Ok(())
    }

    pub(super) async fn summary(&self, id: &str) -> Result<Option<Summary>, StoreError> {
        let Some(stock) = self.stock(id, None).await? else {
            return Ok(None);
        };
        let claims: Vec<String> = self
            .connection
            .clone()
            .lrange(claims_key(id), 0, -1)
            .await?;
        Ok(Some(Summary {
            stock,
            claimed: i64::try_from(claims.len()).unwrap_or(i64::MAX),
            duplicate_claims: duplicates(claims.iter().map(String::as_str)),
        }))
    }
}
