//! The operator's view of Redis locks: the holders' records read in one pipeline, held lock
//! keys paged through with `SCAN`, and the operator's release through the holders' own release
//! scripts, so that waiters are handed the lock or told as after any release.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::time::Duration;

use super::keys::LockKey;
use super::{RedisBackend, RedisConnection, ReleaseKeys};
use crate::backend::store_support::recorded_holder::{RecordedHolder, lock_state};
use crate::backend::{BackendError, FencingToken, Hold, Holding, Inspect, Listing, LockState};
use crate::token::OwnerToken;

/// How many `SCAN` calls one page may make, at most.
const SCANS_PER_PAGE: usize = 16;

impl<C: RedisConnection> RedisBackend<C> {
    /// Every holder of lock `name` the store records, and how many wait in its line, among the
    /// waiting writers or the readers' claims.
    pub(super) async fn recorded(
        &self,
        name: &str,
    ) -> Result<(Vec<RecordedHolder<OwnerToken>>, usize), BackendError> {
        let mut pipeline = redis::Pipeline::with_capacity(8);
        pipeline
            .cmd("GET")
            .arg(LockKey::lock(name))
            .cmd("PTTL")
            .arg(LockKey::lock(name))
            .cmd("ZRANGE")
            .arg(LockKey::shared(name))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .cmd("HGETALL")
            .arg(LockKey::holders(name))
            .cmd("LLEN")
            .arg(LockKey::line(name))
            .cmd("HLEN")
            .arg(LockKey::writers(name))
            .cmd("ZCARD")
            .arg(LockKey::claims(name))
            .cmd("TIME");
        type Replies = (
            Option<String>,
            i64,
            Vec<(String, u64)>,
            HashMap<String, String>,
            usize,
            usize,
            usize,
            (u64, u64),
        );
        let (value, pttl, shared, records, line, writers, claims, (secs, micros)): Replies =
            (pipeline.query_async(&mut self.connection.clone()).await)
                .map_err(BackendError::new)?;
        let now = secs * 1000 + micros / 1000;
        let mut holders = Vec::new();
        if let Some(holder) = value.as_deref().and_then(|value| exclusive(value, now)) {
            let lease_left = u64::try_from(pttl).ok().map(Duration::from_millis);
            holders.push(RecordedHolder {
                holding: Holding {
                    lease_left,
                    ..holder.holding
                },
                ..holder
            });
        }
        for (token, expiry) in shared.into_iter().filter(|(_, expiry)| *expiry > now) {
            let Some(owner) = OwnerToken::parse(&token) else {
                continue;
            };
            let record = records.get(&token).map_or("", String::as_str);
            let holding = shared_holding(record, now, Duration::from_millis(expiry - now));
            holders.push(RecordedHolder {
                handle: owner,
                holding,
            });
        }
        Ok((holders, line + writers + claims))
    }
}

/// The exclusive holder a lock key's value records: `<token><mark><since> <fence> <m|w>
/// <label>` (see `release.lua`); `None` while readers hold the lock.
fn exclusive(value: &str, now: u64) -> Option<RecordedHolder<OwnerToken>> {
    let token = OwnerToken::parse(value.get(..32)?)?;
    let mut fields = value.get(33..)?.splitn(4, ' ');
    let since: u64 = fields.next()?.parse().ok()?;
    let fence: u64 = fields.next()?.parse().ok()?;
    let hold = match fields.next()? {
        "w" => Hold::Write,
        _ => Hold::Mutex,
    };
    let label = fields.next().unwrap_or_default();
    let held_for = Duration::from_millis(now.saturating_sub(since));
    let holding = Holding::new(hold, label, held_for, None).fence(fence_of(fence));
    Some(RecordedHolder {
        handle: token,
        holding,
    })
}

/// A shared holder from its record, `<since> <permits, 0 for a reader> <label>`: an unknown
/// label and no time held when the record is missing.
fn shared_holding(record: &str, now: u64, lease_left: Duration) -> Holding {
    let mut fields = record.splitn(3, ' ');
    let since = fields.next().and_then(|since| since.parse::<u64>().ok());
    let permits = fields
        .next()
        .and_then(|permits| permits.parse::<u32>().ok());
    let hold = match permits.and_then(NonZeroU32::new) {
        Some(permits) => Hold::Permit { permits },
        None => Hold::Read,
    };
    let label = fields.next().unwrap_or("unknown");
    let held_for = Duration::from_millis(since.map_or(0, |since| now.saturating_sub(since)));
    Holding::new(hold, label, held_for, Some(lease_left))
}

fn fence_of(value: u64) -> Option<FencingToken> {
    (value > 0).then_some(FencingToken::new(value))
}

/// Redis's holders' records: the holder's label and start in the lock key's value (written by
/// the acquire itself, at no extra command), its fence there too — except for a lock taken by
/// the one-round-trip `SET NX PX`, whose fence the holder's first renewal writes in, so a hold
/// younger than a third of its TTL may show none. Waiters counted: tickets in the lock's line,
/// waiting writers and readers' claims (one that gave up within the last 2 s may still count);
/// a waiter that only listens for the release leaves nothing to count. Listing pages through
/// the keys with `SCAN`, on a Redis Cluster master after master in order of their addresses (a
/// failover or resharding during the listing may repeat or skip a lock, as `SCAN` may); not
/// through redis-rs's own `ClusterConnection`, which cannot address one master.
impl<C: RedisConnection> Inspect for RedisBackend<C> {
    async fn inspect(&self, name: &str) -> Result<LockState, BackendError> {
        Ok(lock_state(self.recorded(name).await?))
    }

    async fn held_names(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Listing, BackendError> {
        let nodes = self.connection.key_nodes().ok_or_else(|| {
            BackendError::new(
                "redis-rs's own ClusterConnection routes by key and cannot page through one \
                 master's keys: listing held locks needs RedisBackend::connect_cluster",
            )
        })?;
        let limit = limit.max(1);
        let ScanCursor {
            node,
            mut cursor,
            mut skip,
        } = ScanCursor::parse(after)?;
        // The node the cursor names, or the next in address order if it is gone.
        let Some(mut index) = nodes.iter().position(|(address, _)| *address >= node) else {
            return Ok(Listing::default());
        };
        if nodes[index].0 != node {
            (cursor, skip) = (0, 0);
        }
        let pattern = format!("{{{}*}}", escape_glob(prefix));
        let mut names = Vec::new();
        for _ in 0..SCANS_PER_PAGE {
            let (address, connection) = &nodes[index];
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(limit.max(64))
                .query_async(&mut connection.clone())
                .await
                .map_err(BackendError::new)?;
            let batch: Vec<String> = keys.iter().filter_map(|key| lock_name(key)).collect();
            let room = limit - names.len();
            let fresh = batch.len().saturating_sub(skip);
            names.extend(batch.into_iter().skip(skip).take(room));
            if fresh > room {
                let rest = ScanCursor::at(address, cursor, skip + room);
                return Ok(Listing::new(names, Some(rest)));
            }
            (cursor, skip) = (next, 0);
            if cursor == 0 {
                index += 1;
                if index == nodes.len() {
                    return Ok(Listing::new(names, None));
                }
            }
            if names.len() == limit {
                break;
            }
        }
        let next = ScanCursor::at(&nodes[index].0, cursor, 0);
        Ok(Listing::new(names, Some(next)))
    }

    async fn force_release(&self, name: &str, by: &str) -> Result<Vec<Holding>, BackendError> {
        let (holders, _) = self.recorded(name).await?;
        let mut freed = Vec::new();
        for holder in holders {
            let released: i64 = if holder.holding.hold.is_exclusive() {
                self.run_release(name, holder.handle, ReleaseKeys::WithLine)
                    .await?
            } else {
                self.run_shared(name, "release", holder.handle, &[]).await?
            };
            if released == 1 {
                let left = holder.holding.lease_left;
                if let Err(error) = self.record_release(name, holder.handle, by, left).await {
                    tracing::warn!(lock = name, %error, "who released the lock was not recorded");
                }
                freed.push(holder.holding);
            }
        }
        Ok(freed)
    }
}

impl<C: RedisConnection> RedisBackend<C> {
    /// Records that the operator labelled `by` freed `token`'s lease on `name`, for as long as
    /// the lease had `left` (at least a second): `{name}:released:<token>`, in the lock's slot.
    async fn record_release(
        &self,
        name: &str,
        token: OwnerToken,
        by: &str,
        left: Option<Duration>,
    ) -> Result<(), BackendError> {
        let keep_ms = left.map_or(1000, |left| left.as_millis().max(1000)) as u64;
        let mut command = redis::cmd("SET");
        command
            .arg(released_key(name, token))
            .arg(by)
            .arg("PX")
            .arg(keep_ms);
        (command
            .query_async::<()>(&mut self.connection.clone())
            .await)
            .map_err(BackendError::new)
    }

    /// The label of the operator who freed `token`'s lease on `name`, while its record lasts.
    pub(super) async fn recorded_release(
        &self,
        name: &str,
        token: OwnerToken,
    ) -> Result<Option<String>, BackendError> {
        let mut command = redis::cmd("GET");
        command.arg(released_key(name, token));
        (command.query_async(&mut self.connection.clone()).await).map_err(BackendError::new)
    }
}

/// The key recording who freed `token`'s lease on `name`.
fn released_key(name: &str, token: OwnerToken) -> String {
    format!("{{{name}}}:released:{token}")
}

/// Where a listing's page starts: a node (its address; empty on one node), its `SCAN` cursor,
/// and how many keys of that cursor's batch were listed already. Written
/// `[<address>@]<cursor>/<listed>`.
struct ScanCursor {
    node: String,
    cursor: u64,
    skip: usize,
}

impl ScanCursor {
    fn at(node: &str, cursor: u64, skip: usize) -> String {
        if node.is_empty() {
            format!("{cursor}/{skip}")
        } else {
            format!("{node}@{cursor}/{skip}")
        }
    }

    fn parse(after: Option<&str>) -> Result<Self, BackendError> {
        let Some(after) = after else {
            return Ok(Self {
                node: String::new(),
                cursor: 0,
                skip: 0,
            });
        };
        let (node, rest) = after.rsplit_once('@').unwrap_or(("", after));
        let parsed = (rest.split_once('/'))
            .and_then(|(cursor, skip)| Some((cursor.parse().ok()?, skip.parse().ok()?)));
        let (cursor, skip) = parsed
            .ok_or_else(|| BackendError::new(format!("not a listing's cursor: {after:?}")))?;
        Ok(Self {
            node: node.to_owned(),
            cursor,
            skip,
        })
    }
}

/// The lock name of a lock key (`{name}`), and `None` for a lock's other keys.
fn lock_name(key: &str) -> Option<String> {
    let name = key.strip_prefix('{')?.strip_suffix('}')?;
    (!name.contains(['{', '}'])).then(|| name.to_owned())
}

/// `text` with `SCAN`'s glob characters escaped.
fn escape_glob(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        if matches!(character, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(character);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exclusive_record_is_read_back() {
        let token = OwnerToken::new();
        let value = format!("{token}*1000 7 w web-1 (eu)");
        let holder = exclusive(&value, 1500).expect("a record");
        assert_eq!(holder.handle, token);
        let holding = holder.holding;
        assert_eq!(
            (holding.hold, holding.label.as_str()),
            (Hold::Write, "web-1 (eu)")
        );
        assert_eq!(holding.fence, Some(FencingToken::new(7)));
        assert_eq!(holding.held_for, Duration::from_millis(500));
        assert!(exclusive("readers*", 1500).is_none());
    }

    #[test]
    fn a_fence_not_yet_written_is_none() {
        let value = format!("{} 1000 0 m web-1", OwnerToken::new());
        assert_eq!(
            exclusive(&value, 1000).expect("a record").holding.fence,
            None
        );
    }

    #[test]
    fn lock_keys_are_told_from_the_other_keys() {
        assert_eq!(lock_name("{lock:a}").as_deref(), Some("lock:a"));
        assert_eq!(lock_name("{lock:a}:shared"), None);
        assert_eq!(escape_glob("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }

    #[test]
    fn a_cursor_names_its_node_on_a_cluster_only() {
        assert!(ScanCursor::parse(Some("nonsense")).is_err());
        for (node, cursor, skip) in [("", 42, 3), ("10.0.0.1:7001", 7, 0)] {
            let written = ScanCursor::at(node, cursor, skip);
            let read = ScanCursor::parse(Some(&written)).expect("a cursor");
            assert_eq!(
                (read.node.as_str(), read.cursor, read.skip),
                (node, cursor, skip)
            );
        }
        assert_eq!(ScanCursor::at("", 42, 3), "42/3");
    }
}
