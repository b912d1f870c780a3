//! The wait queue: a queued waiter's exclusive node stays in the lock's directory, in line by
//! its sequence, and watches its predecessor (`watches.rs`). The first node in line holds the
//! lock once no shared hold is ahead of it (none can be added ahead). A place needs no
//! refreshing: it lives as long as the session, or until the waiter leaves.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::nodes::{Kind, Standing};
use super::watches::Watch;
use super::{ZookeeperBackend, ZookeeperLease};
use crate::backend::store_support::holder_record::record;
use crate::backend::waiting::WaitingRoom;
use crate::backend::{BackendError, Hold, LockRequest, QueuedAttempt, WaitQueue};
use crate::token::OwnerToken;

/// How many times a queued attempt looks at the line again when what it read changed before
/// its watch stood.
const READS: usize = 8;

impl WaitQueue<ZookeeperLease> for ZookeeperBackend {
    fn room(&self) -> &Arc<WaitingRoom> {
        &self.inner.room
    }

    fn acquire_queued<'a>(
        &'a self,
        name: &'a str,
        request: LockRequest,
        _ticket_ttl: Duration,
    ) -> BoxFuture<'a, Result<QueuedAttempt<ZookeeperLease>, BackendError>> {
        Box::pin(self.in_line(name, request))
    }

    fn leave_queue<'a>(
        &'a self,
        name: &'a str,
        token: OwnerToken,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(self.give_up(name, token))
    }
}

impl ZookeeperBackend {
    /// Takes the lock if the caller's node is first in line; else puts a node in line (once)
    /// and watches the node just ahead of it.
    async fn in_line(
        &self,
        name: &str,
        request: LockRequest,
    ) -> Result<QueuedAttempt<ZookeeperLease>, BackendError> {
        let watches = &self.inner.watches;
        if let Some(place) = watches.waiting(name, request.token) {
            return Ok(QueuedAttempt::in_line_at(place));
        }
        let dir = self.dir(name);
        let sent = Instant::now();
        let record = record(&request, Hold::Mutex);
        let mut place = match watches.place(request.token) {
            Some(place) => place,
            None => {
                let place = self
                    .create(&dir, Kind::Exclusive, request.token, &record)
                    .await?;
                watches.took_place(request.token, place.clone());
                place
            }
        };
        for _ in 0..READS {
            let children = self.children(&dir).await?;
            let (predecessor, only_one_ahead) = match children.exclusive_standing(place.sequence())
            {
                Standing::Holds => {
                    watches.forget(request.token);
                    let grant = self.vouched(place, sent, request.ttl).await?;
                    return Ok(QueuedAttempt::Acquired(grant));
                }
                Standing::Behind {
                    predecessor,
                    only_one_ahead,
                } => (dir.child(predecessor), only_one_ahead),
                Standing::Gone => {
                    // The session that kept the place expired: take a new one.
                    self.inner
                        .session
                        .disown(super::nodes::owner_prefix(&place.path));
                    place = self
                        .create(&dir, Kind::Exclusive, request.token, &record)
                        .await?;
                    watches.took_place(request.token, place.clone());
                    continue;
                }
            };
            let (stat, watcher) = (self.inner.reach)
                .call(self.client().check_and_watch_stat(&predecessor))
                .await?
                .map_err(BackendError::new)?;
            if stat.is_none() {
                // Gone between the listing and the watch: look again.
                continue;
            }
            watches.watch(Watch {
                name: name.to_owned(),
                ticket: request.token,
                place: Some(place.clone()),
                hands_over: only_one_ahead,
                watchers: vec![watcher],
            });
            return Ok(QueuedAttempt::in_line_at(place));
        }
        Err(BackendError::new(
            "the lock's line kept changing under a queued attempt",
        ))
    }
}
