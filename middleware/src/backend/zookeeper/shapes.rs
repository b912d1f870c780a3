//! Read-write locks and semaphores, as Curator's `InterProcessReadWriteLock` and semaphore
//! keep them: a shared hold (a reader, a permit) is a shared node in the lock's directory.
//!
//! * A reader holds once no exclusive node (a holder, a place in line) and no writer's intent
//!   is ahead of its node; else its node is deleted again.
//! * A writer takes the lock as a mutex does. A writer that will wait leaves an intent node
//!   when busy: it bars readers that come after it while the writer waits, and goes when the
//!   writer takes the lock or gives up. Intents hold no place in line: each process's waiting
//!   writers line up in its waiting room, and a line in the store as well would make two
//!   orders that can disagree.
//! * A permit is held by the first `permits` shared nodes with no exclusive node ahead.
//!
//! Shared holds are not fenced. A reader, writer or permit holder that waits for announcements
//! watches the node that kept it out (for a writer, the one just ahead of its node) and asks
//! again when it goes.

use std::num::NonZeroU32;

use tokio::time::Instant;

use super::nodes::{Children, Kind, LockDir, Node, Standing};
use super::watches::Watch;
use super::{ZookeeperBackend, ZookeeperLease};
use crate::backend::{
    Attempt, BackendError, Granted, LockBackend, LockRequest, Patience, Semaphores, SharedLocks,
};

impl SharedLocks for ZookeeperBackend {
    async fn acquire_read(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<ZookeeperLease>>, BackendError> {
        self.shared(name, request, |children, mine| {
            children.reader_blocker(mine).cloned()
        })
        .await
    }

    async fn acquire_write(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<ZookeeperLease>>, BackendError> {
        if request.patience == Patience::Once {
            return self.acquire(name, request).await;
        }
        let dir = self.dir(name);
        let sent = Instant::now();
        let mine = self.create(&dir, Kind::Exclusive, request.token).await?;
        let children = self.children(&dir).await?;
        let intent = children.mine(Kind::Intent, request.token).cloned();
        let blocker = match children.exclusive_standing(mine.sequence()) {
            Standing::Holds => {
                if let Some(intent) = intent {
                    self.delete(&dir.child(&intent)).await?;
                }
                return Ok(Attempt::Acquired(
                    self.vouched(mine, sent, request.ttl).await?,
                ));
            }
            Standing::Behind { predecessor, .. } => Some(predecessor.clone()),
            Standing::Gone => None,
        };
        self.delete(&mine.path).await?;
        if intent.is_none() {
            self.create(&dir, Kind::Intent, request.token).await?;
        }
        self.busy(name, request, &dir, blocker).await
    }
}

impl Semaphores for ZookeeperBackend {
    async fn acquire_permit(
        &self,
        name: &str,
        request: LockRequest,
        permits: NonZeroU32,
    ) -> Result<Attempt<Granted<ZookeeperLease>>, BackendError> {
        self.shared(name, request, |children, mine| {
            children.permit_blocker(mine, permits.get()).cloned()
        })
        .await
    }
}

impl ZookeeperBackend {
    /// A shared hold on `name`, kept if `blocker` finds nothing keeping the node out.
    async fn shared(
        &self,
        name: &str,
        request: LockRequest,
        blocker: impl Fn(&Children, i64) -> Option<Node>,
    ) -> Result<Attempt<Granted<ZookeeperLease>>, BackendError> {
        let dir = self.dir(name);
        let sent = Instant::now();
        let mine = self.create(&dir, Kind::Shared, request.token).await?;
        let children = self.children(&dir).await?;
        match blocker(&children, mine.sequence()) {
            None => {
                let lease = self.vouch_for(mine, sent, request.ttl).await?;
                Ok(Attempt::Acquired(Granted { lease, fence: None }))
            }
            Some(blocker) => {
                self.delete(&mine.path).await?;
                self.busy(name, request, &dir, Some(blocker)).await
            }
        }
    }

    /// A busy shared answer; a caller that listens for the release watches `blocker` and
    /// hears it go (at once, if it went already).
    async fn busy<T>(
        &self,
        name: &str,
        request: LockRequest,
        dir: &LockDir,
        blocker: Option<Node>,
    ) -> Result<Attempt<T>, BackendError> {
        if request.patience == Patience::Listens
            && let Some(blocker) = blocker
        {
            let (stat, watcher) = self
                .client()
                .check_and_watch_stat(&dir.child(&blocker))
                .await
                .map_err(BackendError::new)?;
            if stat.is_none() {
                // Gone already: a watch on it would fire only when it is created again.
                self.inner.watches.wake(name, request.token);
            } else {
                self.inner.watches.watch(Watch {
                    name: name.to_owned(),
                    ticket: request.token,
                    place: None,
                    hands_over: false,
                    watcher,
                });
            }
        }
        Ok(Attempt::Busy { holder_ttl: None })
    }
}
