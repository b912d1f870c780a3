//! The operator's view of ZooKeeper locks: the lock directory's children read, each holder's
//! node's data being its record (`holder_record.rs`), held lock names paged through the root's
//! directories, and the operator's release: the holders' nodes deleted, as their session's end
//! would.

use std::time::Duration;

use zookeeper_client::Error as ZkError;

use super::ZookeeperBackend;
use super::nodes::{Children, Kind, LockDir, Node, Standing, unescape};
use crate::backend::store_support::holder_record::parse;
use crate::backend::store_support::recorded_holder::{RecordedHolder, lock_state};
use crate::backend::{BackendError, FencingToken, Hold, Holding, Inspect, Listing, LockState};

/// How many lock directories one page of the listing looks into, per name asked for: an
/// empty directory lingers until the server deletes it.
const DIRECTORIES_PER_NAME: usize = 4;

impl ZookeeperBackend {
    /// Every holder of lock `name`, and how many wait: nodes in line behind the holders,
    /// waiting writers' places, readers' claims.
    async fn recorded(
        &self,
        name: &str,
    ) -> Result<(Vec<RecordedHolder<String>>, usize), BackendError> {
        let dir = self.dir(name);
        let children = self.children(&dir).await?;
        let mut holders = Vec::new();
        let mut waiting = 0;
        for node in children.nodes() {
            match node.kind {
                Kind::Writer | Kind::Claim => waiting += 1,
                Kind::Intent => {}
                Kind::Exclusive | Kind::Shared => {
                    match self.read_holder(&dir, &children, node).await? {
                        Some(holder) => holders.push(holder),
                        None => waiting += 1,
                    }
                }
            }
        }
        Ok((holders, waiting))
    }

    /// The holder `node` records, if it holds the lock (`None` when it waits, or is gone).
    async fn read_holder(
        &self,
        dir: &LockDir,
        children: &Children,
        node: &Node,
    ) -> Result<Option<RecordedHolder<String>>, BackendError> {
        if node.kind == Kind::Exclusive
            && children.exclusive_standing(node.sequence) != Standing::Holds
        {
            return Ok(None);
        }
        let path = dir.child(node);
        let (data, stat) = match (self.inner.reach)
            .call(self.client().get_data(&path))
            .await?
        {
            Ok(read) => read,
            Err(ZkError::NoNode) => return Ok(None),
            Err(error) => return Err(BackendError::new(error)),
        };
        let unknown = (Hold::Mutex, String::new(), Duration::ZERO);
        let (hold, label, asked_ago) = parse(&data).unwrap_or(unknown);
        let holds = match (node.kind, hold) {
            (Kind::Exclusive, _) => true,
            (_, Hold::Permit { permits }) => {
                (children.permit_blockers(node.sequence, permits.get())).is_empty()
            }
            _ => children.reader_blocker(node.sequence).is_none(),
        };
        let fence =
            (node.kind == Kind::Exclusive).then(|| FencingToken::new(stat.czxid.unsigned_abs()));
        let holding = Holding::new(hold, label, asked_ago, None).fence(fence);
        Ok(holds.then_some(RecordedHolder {
            handle: path,
            holding,
        }))
    }
}

/// ZooKeeper's holders: each node's data is its holder's record, written by the create that
/// makes it. Time held counts from when the holder asked (its node was created, by its
/// process's clock): for a holder that waited in line, its wait too. Leases are the holders'
/// sessions (none is shown). Waiters counted: nodes in line behind the holders, waiting
/// writers' places, readers' claims. Listing reads the root's directory names in one answer
/// (ZooKeeper cannot page a node's children) and looks into a bounded number of directories
/// per page.
impl Inspect for ZookeeperBackend {
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
        let root = &self.inner.root;
        let under = LockDir::new(root, prefix).escaped_name().to_owned();
        let after = after.map(|after| LockDir::new(root, after).escaped_name().to_owned());
        let mut directories = match (self.inner.reach)
            .call(self.client().list_children(root))
            .await?
        {
            Ok(names) => names,
            Err(ZkError::NoNode) => Vec::new(),
            Err(error) => return Err(BackendError::new(error)),
        };
        directories.retain(|dir| {
            dir.starts_with(&under) && after.as_ref().is_none_or(|after| dir > after)
        });
        directories.sort_unstable();
        let looked_into = limit.saturating_mul(DIRECTORIES_PER_NAME);
        let mut names = Vec::new();
        for escaped in directories.iter().take(looked_into) {
            let Some(name) = unescape(escaped) else {
                continue;
            };
            let children = self.children(&self.dir(&name)).await?;
            if children.nodes().iter().any(|node| node.kind.in_line()) {
                names.push(name);
                if names.len() == limit {
                    let next = names.last().cloned();
                    return Ok(Listing::new(names, next));
                }
            }
        }
        let next = (directories.len() > looked_into)
            .then(|| {
                directories
                    .get(looked_into - 1)
                    .and_then(|escaped| unescape(escaped))
            })
            .flatten();
        Ok(Listing::new(names, next))
    }

    async fn force_release(&self, name: &str, _by: &str) -> Result<Vec<Holding>, BackendError> {
        let (holders, _) = self.recorded(name).await?;
        let mut freed = Vec::new();
        for holder in holders {
            match (self.inner.reach)
                .call(self.client().delete(&holder.handle, None))
                .await?
            {
                Ok(()) => freed.push(holder.holding),
                Err(ZkError::NoNode) => {}
                Err(error) => return Err(BackendError::new(error)),
            }
        }
        Ok(freed)
    }
}
