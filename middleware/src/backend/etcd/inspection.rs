//! The operator's view of etcd locks: the lock's keys read in one transaction (each contender
//! key's value is its holder's record, `holder_record.rs`), held lock names paged through the
//! namespace in key order, and the operator's release: the holders' keys deleted, as their
//! session's end would.

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};

use super::keys::{LockKeys, unescape};
use super::{EtcdBackend, read};
use crate::backend::holder_record::parse;
use crate::backend::{BackendError, FencingToken, Hold, Holding, Inspect, Listing, LockState};

/// How many keys one page of the listing reads, per name asked for: a lock's keys are its
/// holders' and those waiting in its line.
const KEYS_PER_NAME: usize = 4;

/// A holder as the lock's keys record it: its key, that key's create revision, and what an
/// operator sees.
struct Recorded {
    key: Vec<u8>,
    revision: i64,
    holding: Holding,
}

impl EtcdBackend {
    /// Every holder of lock `name`, and how many wait: exclusive keys behind the holder,
    /// waiting writers' places, readers' claims.
    async fn recorded(&self, name: &str) -> Result<(Vec<Recorded>, usize), BackendError> {
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
        let mut holders: Vec<Recorded> = Vec::new();
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
fn recorded(kv: &KeyValue) -> Recorded {
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
    Recorded {
        key: kv.key().to_vec(),
        revision: kv.create_revision(),
        holding: Holding::new(hold, label, asked_ago, None).fence(fence),
    }
}

/// etcd's holders: each contender key carries its holder's record, written by the put that
/// makes it. Time held counts from when the holder asked (its key was put, by its process's
/// clock): for a holder that waited in line, its wait too. Leases are the holders' sessions
/// (none is shown). Waiters counted: keys in line behind the holder, waiting writers and
/// readers' claims. Listing reads the namespace's keys in order, a bounded number per page.
impl Inspect for EtcdBackend {
    async fn inspect(&self, name: &str) -> Result<LockState, BackendError> {
        let (holders, waiting) = self.recorded(name).await?;
        let holders = holders.into_iter().map(|holder| holder.holding).collect();
        Ok(LockState::new(holders, waiting))
    }

    async fn held_names(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Listing, BackendError> {
        let limit = limit.max(1);
        let namespace = &self.inner.namespace;
        let escaped = |name: &str| {
            let mut prefix = LockKeys::new(namespace, name).prefix().to_vec();
            prefix.pop();
            prefix
        };
        let under = escaped(prefix);
        let from = match after {
            // Past every key of that lock, `<name>/…`.
            Some(after) => [escaped(after).as_slice(), b"0"].concat(),
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
        let read = answer.kvs().len();
        let mut names: Vec<String> = Vec::new();
        let mut last = None;
        for kv in answer.kvs() {
            let Some(name) = lock_name(&kv.key()[namespace.len()..]) else {
                continue;
            };
            last = Some(name.clone());
            if names.last() != Some(&name) {
                if names.len() == limit {
                    let next = names.last().cloned();
                    return Ok(Listing::new(names, next));
                }
                names.push(name);
            }
        }
        let next = (read == rows).then_some(last).flatten();
        Ok(Listing::new(names, next))
    }

    async fn force_release(&self, name: &str) -> Result<Vec<Holding>, BackendError> {
        let (holders, _) = self.recorded(name).await?;
        let mut freed = Vec::new();
        for holder in holders {
            let still =
                Compare::create_revision(holder.key.clone(), CompareOp::Equal, holder.revision);
            let txn = Txn::new()
                .when([still])
                .and_then([TxnOp::delete(holder.key, None)]);
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
