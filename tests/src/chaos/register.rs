//! The data the chaos workers protect with their locks: one counter per lock key in a Redis of
//! the runner's own (never the store under test), read and written with the holder's fencing
//! token. A fenced register refuses a read or write whose token is smaller than one it has
//! seen, as a store protected by fencing should; unfenced (the twin), it takes everything.
//!
//! Each holder reads the counter and writes it back plus one, so a stale holder's write that
//! lands loses an update: `writes` (the writes taken) ends larger than `value`.

use redis::aio::MultiplexedConnection;
use redis::{Commands, Script};

/// Reads (`ARGV[1]` = `read`) or writes (`write`, value `ARGV[3]`) the counter `KEYS[1]` with
/// fence `ARGV[2]`, refusing a fence smaller than the largest seen when `ARGV[4]` is `1` (else
/// counting it as stale): the value read, `1` for a write taken, `-1` when refused.
const ACCESS: &str = r"
local fence = tonumber(ARGV[2])
local seen = tonumber(redis.call('HGET', KEYS[1], 'fence') or '-1')
if fence < seen then
  if ARGV[4] == '1' then
    redis.call('HINCRBY', KEYS[1], 'refused', 1)
    return -1
  end
  redis.call('HINCRBY', KEYS[1], 'stale', 1)
end
if fence > seen then redis.call('HSET', KEYS[1], 'fence', fence) end
if ARGV[1] == 'read' then
  redis.call('INCR', 'chaos:reads')
  return tonumber(redis.call('HGET', KEYS[1], 'value') or '0')
end
redis.call('HSET', KEYS[1], 'value', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'writes', 1)
return 1
";

/// A worker's handle on the register.
#[derive(Clone)]
pub(crate) struct Register {
    connection: MultiplexedConnection,
    script: Script,
    fenced: bool,
}

impl Register {
    /// Connects to the register's Redis at `url`; `fenced`: whether it checks fences.
    pub(crate) async fn connect(url: &str, fenced: bool) -> redis::RedisResult<Self> {
        let client = redis::Client::open(url)?;
        Ok(Self {
            connection: client.get_multiplexed_async_connection().await?,
            script: Script::new(ACCESS),
            fenced,
        })
    }

    /// Reads `key`'s counter with `fence`: `None` when refused.
    pub(crate) async fn read(&self, key: &str, fence: u64) -> redis::RedisResult<Option<u64>> {
        let answer = self.access(key, "read", fence, 0).await?;
        Ok(u64::try_from(answer).ok())
    }

    /// Writes `value` to `key`'s counter with `fence`: whether it was taken.
    pub(crate) async fn write(
        &self,
        key: &str,
        fence: u64,
        value: u64,
    ) -> redis::RedisResult<bool> {
        Ok(self.access(key, "write", fence, value).await? == 1)
    }

    async fn access(&self, key: &str, op: &str, fence: u64, value: u64) -> redis::RedisResult<i64> {
        let mut invocation = self.script.key(format!("chaos:register:{key}"));
        invocation
            .arg(op)
            .arg(fence)
            .arg(value)
            .arg(u8::from(self.fenced));
        invocation.invoke_async(&mut self.connection.clone()).await
    }
}

/// What the register holds at the end of a run, summed over its counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Reads taken: holders that got to the data.
    pub reads: u64,
    /// Writes taken.
    pub writes: u64,
    /// The counters' sum: writes that survived.
    pub value: u64,
    /// Reads and writes refused for a stale fence.
    pub refused: u64,
    /// Reads and writes with a stale fence taken (by a register that does not check fences).
    pub stale: u64,
}

impl Tally {
    /// Updates lost to a stale holder's write landing between another's read and write.
    pub fn lost_updates(&self) -> u64 {
        self.writes.saturating_sub(self.value)
    }

    /// Reads the register's Redis at `url`.
    ///
    /// # Errors
    ///
    /// Redis did not answer.
    pub fn read(url: &str) -> redis::RedisResult<Self> {
        let mut connection = redis::Client::open(url)?.get_connection()?;
        let mut tally = Self {
            reads: Commands::get::<_, Option<u64>>(&mut connection, "chaos:reads")?.unwrap_or(0),
            ..Self::default()
        };
        let keys: Vec<String> = Commands::keys(&mut connection, "chaos:register:*")?;
        for key in keys {
            let field = |connection: &mut redis::Connection, field: &str| {
                Commands::hget::<_, _, Option<u64>>(connection, &key, field)
                    .map(Option::unwrap_or_default)
            };
            tally.writes += field(&mut connection, "writes")?;
            tally.value += field(&mut connection, "value")?;
            tally.refused += field(&mut connection, "refused")?;
            tally.stale += field(&mut connection, "stale")?;
        }
        Ok(tally)
    }
}
