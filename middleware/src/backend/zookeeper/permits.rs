//! Semaphores, as Curator's `InterProcessSemaphoreV2` keeps them: a permit is a shared node in
//! the lock's directory, held while no exclusive node and fewer than `permits` shared nodes are
//! ahead of it.
//!
//! A caller that asks once deletes its node again when it is kept out. A caller that will ask
//! again keeps its node while it waits — its place in line — and reads the directory (watching
//! it, if it listens) at each attempt: waiters are served in the order they came, and a change
//! costs each waiter one read. A waiter that deleted and created its node at each attempt was
//! kept out by the others' nodes coming and going, and woke them all with its own: 3 320 round
//! trips an acquisition with 64 waiters on a semaphore of 2. A waiter that gives up deletes its
//! node (`abandon`).

use std::num::NonZeroU32;

use tokio::time::Instant;
use zookeeper_client::{Error as ZkError, OneshotWatcher};

use super::nodes::{Children, Kind, LockDir};
use super::shared_holds::SharedWait;
use super::watches::Watch;
use super::{ZookeeperBackend, ZookeeperLease};
use crate::backend::store_support::holder_record::record;
use crate::backend::{Attempt, BackendError, Granted, Hold, LockRequest, Patience, Semaphores};

impl Semaphores for ZookeeperBackend {
    async fn acquire_permit(
        &self,
        name: &str,
        request: LockRequest,
        permits: NonZeroU32,
    ) -> Result<Attempt<Granted<ZookeeperLease>>, BackendError> {
        if request.patience == Patience::Once {
            return (self.shared(name, request, SharedWait::Permit(permits.get()))).await;
        }
        self.permit_in_line(name, request, permits).await
    }
}

impl ZookeeperBackend {
    /// A permit for a caller that will ask again: its node, kept in line from its first
    /// attempt, holds once nothing keeps it out.
    async fn permit_in_line(
        &self,
        name: &str,
        request: LockRequest,
        permits: NonZeroU32,
    ) -> Result<Attempt<Granted<ZookeeperLease>>, BackendError> {
        let (dir, sent) = (self.dir(name), Instant::now());
        let watches = &self.inner.watches;
        let listens = request.patience == Patience::Listens;
        let mut kept = watches.place(request.token);
        // Twice at most: once more if the node kept in line is gone (its session expired).
        for _ in 0..2 {
            let mine = match kept.take() {
                Some(place) => place,
                None => {
                    let record = record(&request, Hold::Permit { permits });
                    let place = (self.create(&dir, Kind::Shared, request.token, &record)).await?;
                    watches.took_place(request.token, place.clone());
                    place
                }
            };
            let (children, watcher) = self.read_line(&dir, listens).await?;
            let in_line = (children.mine(Kind::Shared, request.token))
                .is_some_and(|node| node.sequence == mine.sequence());
            if !in_line {
                watches.forget(request.token);
                continue;
            }
            if children
                .permit_blockers(mine.sequence(), permits.get())
                .is_empty()
            {
                watches.forget(request.token);
                let lease = self.vouch_for(mine, sent, request.ttl).await?;
                return Ok(Attempt::Acquired(Granted { lease, fence: None }));
            }
            if let Some(watcher) = watcher {
                watches.watch(Watch {
                    name: name.to_owned(),
                    ticket: request.token,
                    place: None,
                    hands_over: false,
                    watchers: vec![watcher],
                });
            }
            return Ok(Attempt::Busy { holder_ttl: None });
        }
        Err(BackendError::new(
            "a permit's node kept in line was gone twice: the ZooKeeper session keeps expiring",
        ))
    }

    /// The directory's nodes, with a watch on them when the caller `listens`.
    async fn read_line(
        &self,
        dir: &LockDir,
        listens: bool,
    ) -> Result<(Children, Option<OneshotWatcher>), BackendError> {
        if !listens {
            return Ok((self.children(dir).await?, None));
        }
        let client = self.client();
        match (self.inner.reach)
            .call(client.list_and_watch_children(dir.path()))
            .await?
        {
            Ok((names, watcher)) => Ok((Children::new(&names), Some(watcher))),
            Err(ZkError::NoNode) => Ok((Children::default(), None)),
            Err(error) => Err(BackendError::new(error)),
        }
    }
}
