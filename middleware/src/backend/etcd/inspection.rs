//! The operator's view of etcd locks: the lock's keys read in one transaction (each contender
//! key's value is its holder's record, `holder_record.rs`), held lock names paged through the
//! namespace in key order, and the operator's release: the holders' keys deleted, as their
//! session's end would.

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};

use super::keys::{LockKeys, unescape};
use super::{EtcdBackend, read};
use crate::backend::store_support::holder_record::parse;
use crate::backend::store_support::recorded_holder::{RecordedHolder, lock_state};
use crate::backend::{BackendError, FencingToken, Hold, Holding, Inspect, Listing, LockState};

/// How many keys one page of the listing reads, per name asked for: a lock's keys are its
/// holders' and those waiting in its line.
const KEYS_PER_NAME: usize = 4;

impl EtcdBackend {
    /// Every holder of lock `name`, and how many wait: exclusive keys behind the holder,
    /// waiting writers' places, readers' claims.
    async fn recorded(
        &self,
        name: &str,
    ) -> Result<(Vec<RecordedHolder<(Vec<u8>, i64)>>, usize), BackendError> {
        let keys = self.keys(name);
        let in_order = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend);
        let counted = GetOptions::new().with_prefix().with_count_only();
        let txn = Txn::new().and_then([
            TxnOp::get(keys.exclusive_prefix(), Some(in_order.clone())),
            TxnOp::get(keys.shared_prefix(), Some(in_order)),
            TxnOp::get(keys.writer_prefix(), Some(counted.clone())),
            TxnOp::get(keys.claim_prefix(), Some(counted)),
        ]);
        let answer = self.txn(txn).await?;
        let (exclusive, shared) = (read(&answer, 0)?, read(&answer, 1)?);
        let counts: Vec<i64> = (answer.op_responses().into_iter().skip(2))
            .map(|response| match response {
                TxnOpResponse::Get(get) => get.count(),
                _ => 0,
            })
            .collect();
        let marks = usize::try_from(counts.iter().sum::<i64>()).unwrap_or(0);
        let mut holders: Vec<RecordedHolder<(Vec<u8>, i64)>> = Vec::new();
        if shared.is_empty() {
            holders.extend(exclusive.first().map(recorded));
        } else {
            for kv in &shared {
                let holder = recorded(kv);
                if let Hold::Permit { permits } = holder.holding.hold {
                    let limit = usize::try_from(permits.get()).unwrap_or(usize::MAX);
                    if holders.len() >= limit {
                        continue;
                    }
                }
                holders.push(holder);
            }
        }
        let in_line = exclusive.len() - usize::from(shared.is_empty() && !exclusive.is_empty());
        Ok((holders, in_line + marks))
    }
}

/// The holder `kv` records: a mutex or writer is fenced by its key's create revision.
fn recorded(kv: &KeyValue) -> RecordedHolder<(Vec<u8>, i64)> {
    let (hold, label, asked_ago) =
        parse(kv.value()).unwrap_or((Hold::Mutex, String::new(), Default::default()));
    let fence = hold
        .is_exclusive()
        .then(|| {
            u64::try_from(kv.create_revision())
                .ok()
                .map(FencingToken::new)
        })
        .flatten();
    RecordedHolder {
        handle: (kv.key().to_vec(), kv.create_revision()),
        holding: Holding::new(hold, label, asked_ago, None).fence(fence),
    }
}

/// etcd's holders: each contender key carries its holder's record, written by the put that
/// makes it. Time held counts from when the holder asked (its key was put, by its process's
/// clock): for a holder that waited in line, its wait too. Leases are the holders' sessions
/// (none is shown). Waiters counted: keys in line behind the holder, waiting writers and
/// readers' claims. Listing reads the namespace's keys in order, a bounded number per page (its
/// cursor is the key the next page starts at).
impl Inspect for EtcdBackend {
    async fn inspect(&self, name: &str) -> Result<LockState, BackendError> {
        Ok(lock_state(self.recorded(name).await?))
    }

    async fn held_names(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Listing, BackendError> {
        let limit = limit.max(1);
        let namespace = &self.inner.namespace;
        let under = escaped(namespace, prefix);
        let from = match after {
            Some(after) => parse_cursor(after)?.max(under.clone()),
            None => under.clone(),
        };
        let rows = limit.saturating_mul(KEYS_PER_NAME);
        let options = GetOptions::new()
            .with_range(range_end(&under))
            .with_keys_only()
            .with_limit(i64::try_from(rows).unwrap_or(i64::MAX));
        let call = |client: etcd_client::Client| {
            let (from, options) = (from.clone(), options.clone());
            async move { client.kv_client().get(from, Some(options)).await }
        };
        let answer = self.inner.members.call(call).await?;
        let mut names: Vec<String> = Vec::new();
        for kv in answer.kvs() {
            let Some(name) = lock_name(&kv.key()[namespace.len()..]) else {
                continue;
            };
            if names.last() == Some(&name) {
                continue;
            }
            if names.len() == limit {
                let next = names.last().map(|last| past_lock(namespace, last));
                return Ok(Listing::new(names, next));
            }
            names.push(name);
        }
        // A full page goes on past its last lock (whose other keys may follow), or past the
        // last key read when that was none of a lock's.
        let next = match (answer.kvs().len() == rows, answer.kvs().last()) {
            (true, Some(last)) => Some(match lock_name(&last.key()[namespace.len()..]) {
                Some(name) => past_lock(namespace, &name),
                None => cursor(&[last.key(), b"\0"].concat()),
            }),
            _ => None,
        };
        Ok(Listing::new(names, next))
    }

    async fn force_release(&self, name: &str, _by: &str) -> Result<Vec<Holding>, BackendError> {
        let (holders, _) = self.recorded(name).await?;
        let mut freed = Vec::new();
        for holder in holders {
            let (key, revision) = holder.handle;
            let still = Compare::create_revision(key.clone(), CompareOp::Equal, revision);
            let txn = Txn::new()
                .when([still])
                .and_then([TxnOp::delete(key, None)]);
            if self.txn(txn).await?.succeeded() {
                freed.push(holder.holding);
            }
        }
        Ok(freed)
    }
}

/// The lock name of a key (without the namespace) that holds or waits for a lock,
/// `<escaped name>/x/…` or `<escaped name>/s/…`; `None` for the backend's other keys.
fn lock_name(key: &[u8]) -> Option<String> {
    let slash = key.iter().position(|&byte| byte == b'/')?;
    let (escaped, rest) = key.split_at(slash);
    if !(rest.starts_with(b"/x/") || rest.starts_with(b"/s/")) {
        return None;
    }
    unescape(escaped)
}

/// The keys of lock `name` and of every lock whose name starts with it start with this:
/// `<namespace><escaped name>`.
fn escaped(namespace: &str, name: &str) -> Vec<u8> {
    let mut prefix = LockKeys::new(namespace, name).prefix().to_vec();
    prefix.pop();
    prefix
}

/// The cursor past every key of lock `name` (`<escaped name>/…`).
fn past_lock(namespace: &str, name: &str) -> String {
    cursor(&[escaped(namespace, name).as_slice(), b"0"].concat())
}

/// A listing's cursor: the key the next page starts at, in hex.
fn cursor(key: &[u8]) -> String {
    key.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The key a listing's cursor names.
fn parse_cursor(cursor: &str) -> Result<Vec<u8>, BackendError> {
    let digits = cursor.as_bytes();
    let bytes = (cursor.is_ascii() && digits.len().is_multiple_of(2))
        .then(|| {
            (digits.chunks(2))
                .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
                .collect::<Option<Vec<u8>>>()
        })
        .flatten();
    bytes.ok_or_else(|| BackendError::new(format!("not a listing's cursor: {cursor:?}")))
}

/// The end of the range of keys that start with `prefix`.
fn range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_is_read_back_and_a_stranger_refused() {
        let key = b"tower-lock/a%2Fb0\0\xff".to_vec();
        assert_eq!(parse_cursor(&cursor(&key)).unwrap(), key);
        assert!(parse_cursor("zz").is_err());
        assert!(parse_cursor("abc").is_err());
    }

    #[test]
    fn only_a_locks_own_keys_name_it() {
        assert_eq!(lock_name(b"a%2Fb/x/token").as_deref(), Some("a/b"));
        assert_eq!(lock_name(b"coupon:1/s/token").as_deref(), Some("coupon:1"));
        assert_eq!(lock_name(b"%intent/coupon:1/token"), None);
        assert_eq!(lock_name(b"%given-up/token"), None);
    }
}
