//! Read-write locks and semaphores, as Curator's `InterProcessReadWriteLock` and semaphore
//! keep them: a shared hold (a reader, a permit) is a shared node in the lock's directory.
//!
//! * A reader holds once no exclusive node (a holder, a place in line) and no writer's intent
//!   is ahead of its node; else its node is deleted again, and a reader that will wait leaves
//!   a claim node on the next turn (deleted once it holds, or gives up).
//! * A writer takes the lock as a mutex does, only while no reader's claim is there (unless its
//!   own intent is) and no other writer's place came before its own. A writer that will wait
//!   keeps a place among the writers (a `w` node, until it takes the lock or gives up), so
//!   writers take turns across processes in the order they came, as Curator's keep their
//!   nodes: a process whose run of holds ends asks again behind the writers of the others
//!   that waited meanwhile. Only one writer of a locker asks the store at a time (the others
//!   wait in its line, `engine/line/`), so each process has at most one place per lock, and
//!   the store's order of processes never disagrees with a process's own order of its
//!   writers. The first writer in line leaves an intent node when readers alone keep it out
//!   (every reader that claimed the turn came in): it bars readers that come after it while
//!   the writer waits, and goes when the writer takes the lock or gives up. So readers that
//!   waited for a writer come in before the next writer, and a writer that waited for readers
//!   before the readers after it. Places, intents and claims hold no place in the line of
//!   holds. A writer that asks once (one attempt per lock from a process at a time,
//!   `in_flight.rs`) leaves nothing, and goes after every writer that waits.
//! * A permit is held by the first `permits` shared nodes with no exclusive node ahead.
//!
//! Shared holds are not fenced. A reader or writer that waits for announcements watches the
//! node that kept it out (for a writer, the place of the writer just before it, else the node
//! just ahead of its node) and asks again when it goes. A permit that asks once is a shared
//! node kept if nothing keeps it out; one that waits keeps its node in line (`permits.rs`).

use std::num::NonZeroU32;

use tokio::time::Instant;

use super::nodes::{Kind, LockDir, Node, Standing};
use super::watches::Watch;
use super::{ZookeeperBackend, ZookeeperLease};
use crate::backend::store_support::holder_record::record;
use crate::backend::{Attempt, BackendError, Granted, Hold, LockRequest, Patience, SharedLocks};

impl SharedLocks for ZookeeperBackend {
    async fn acquire_read(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<ZookeeperLease>>, BackendError> {
        self.shared(name, request, SharedWait::Reader).await
    }

    async fn acquire_write(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<ZookeeperLease>>, BackendError> {
        // A writer that waits asks for itself, to keep its own place among the writers.
        if request.patience == Patience::Once {
            self.exclusively(name, || self.take_write(name, request))
                .await
        } else {
            self.take_write(name, request).await
        }
    }
}

impl ZookeeperBackend {
    /// The write lock on `name`: taken as a mutex is while no reader's claim is there (unless
    /// its own intent is) and no writer's place came before the caller's; a writer that will
    /// wait keeps a place among the writers, and the first of them leaves its intent when
    /// readers alone keep it out.
    async fn take_write(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<Attempt<Granted<ZookeeperLease>>, BackendError> {
        let dir = self.dir(name);
        let sent = Instant::now();
        let record = record(&request, Hold::Write);
        let mine = (self.create(&dir, Kind::Exclusive, request.token, &record)).await?;
        let children = self.children(&dir).await?;
        let mut intent = children.mine(Kind::Intent, request.token).cloned();
        let place = children.mine(Kind::Writer, request.token).cloned();
        let writer_ahead = children.writer_ahead(request.token).cloned();
        let claim = children.claim_ahead_of_writer(request.token);
        if let Some(stale) = children.stale_intent(request.token) {
            self.delete(&dir.child(stale)).await?;
            intent = None;
        }
        let watched = match (children.exclusive_standing(mine.sequence()), &writer_ahead) {
            (Standing::Gone, _) => Vec::new(),
            // The writers that waited longer go first.
            (_, Some(writer)) => vec![writer.clone()],
            (Standing::Behind { predecessor, .. }, None) => vec![predecessor.clone()],
            (Standing::Holds, None) => match claim {
                Some(claim) => vec![claim.clone()],
                None => {
                    for mark in [intent, place].into_iter().flatten() {
                        self.delete(&dir.child(&mark)).await?;
                    }
                    return Ok(Attempt::Acquired(
                        self.vouched(mine, sent, request.ttl).await?,
                    ));
                }
            },
        };
        self.delete(&mine.path).await?;
        // A writer that asks once leaves nothing.
        if request.patience != Patience::Once {
            if place.is_none() {
                self.create(&dir, Kind::Writer, request.token, &[]).await?;
            }
            let first = writer_ahead.is_none();
            if first && intent.is_none() && children.only_readers_ahead(mine.sequence()) {
                self.create(&dir, Kind::Intent, request.token, &[]).await?;
            }
        }
        self.busy(name, request, &dir, &watched).await
    }
}

/// Which shared hold is asked for.
#[derive(Clone, Copy)]
pub(super) enum SharedWait {
    Reader,
    /// A permit of a semaphore of this many.
    Permit(u32),
}

impl ZookeeperBackend {
    /// A shared hold on `name`, kept if nothing keeps the node out.
    pub(super) async fn shared(
        &self,
        name: &str,
        request: LockRequest,
        wait: SharedWait,
    ) -> Result<Attempt<Granted<ZookeeperLease>>, BackendError> {
        let dir = self.dir(name);
        let sent = Instant::now();
        let hold = match wait {
            SharedWait::Reader => Hold::Read,
            SharedWait::Permit(permits) => {
                NonZeroU32::new(permits).map_or(Hold::Read, |permits| Hold::Permit { permits })
            }
        };
        let record = record(&request, hold);
        let mine = (self.create(&dir, Kind::Shared, request.token, &record)).await?;
        let children = self.children(&dir).await?;
        let blockers: Vec<Node> = match wait {
            SharedWait::Reader => (children.reader_blocker(mine.sequence()).into_iter()).collect(),
            SharedWait::Permit(permits) => children.permit_blockers(mine.sequence(), permits),
        }
        .into_iter()
        .cloned()
        .collect();
        let claim = children.mine(Kind::Claim, request.token).cloned();
        if blockers.is_empty() {
            if let Some(claim) = claim {
                self.delete(&dir.child(&claim)).await?;
            }
            let lease = self.vouch_for(mine, sent, request.ttl).await?;
            return Ok(Attempt::Acquired(Granted { lease, fence: None }));
        };
        self.delete(&mine.path).await?;
        let reader = matches!(wait, SharedWait::Reader);
        if reader && claim.is_none() && request.patience != Patience::Once {
            self.create(&dir, Kind::Claim, request.token, &[]).await?;
        }
        self.busy(name, request, &dir, &blockers).await
    }

    /// A busy shared answer; a caller that listens for the release watches the `watched`
    /// nodes (none: it asks again on its own), and is woken when the first of them goes — at
    /// once, if one is gone already.
    async fn busy<T>(
        &self,
        name: &str,
        request: LockRequest,
        dir: &LockDir,
        watched: &[Node],
    ) -> Result<Attempt<T>, BackendError> {
        if watched.is_empty() || request.patience != Patience::Listens {
            return Ok(Attempt::Busy { holder_ttl: None });
        }
        let client = self.client();
        let mut watchers = Vec::new();
        for node in watched {
            let (stat, watcher) = (self.inner.reach)
                .call(client.check_and_watch_stat(&dir.child(node)))
                .await?
                .map_err(BackendError::new)?;
            if stat.is_none() {
                // Gone already: a watch on it would fire only when it is created again.
                self.inner.watches.wake(name, request.token);
                return Ok(Attempt::Busy { holder_ttl: None });
            }
            watchers.push(watcher);
        }
        self.inner.watches.watch(Watch {
            name: name.to_owned(),
            ticket: request.token,
            place: None,
            hands_over: false,
            watchers,
        });
        Ok(Attempt::Busy { holder_ttl: None })
    }
}
