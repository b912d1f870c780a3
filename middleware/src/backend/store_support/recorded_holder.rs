//! A holder as a store records it, which the stores that keep records (Redis, SQL, etcd,
//! ZooKeeper) read for the operator's view.

use crate::backend::{Holding, LockState};

/// A holder as its store records it: what the store knows it by, to release it by force (a
/// Redis owner token, a row's lease, etcd's key and its create revision, ZooKeeper's node path),
/// and what an operator sees.
pub(in crate::backend) struct RecordedHolder<H> {
    pub(in crate::backend) handle: H,
    pub(in crate::backend) holding: Holding,
}

/// What an operator sees of a lock whose store records `holders`, with `waiting` waiters.
pub(in crate::backend) fn lock_state<H>(
    (holders, waiting): (Vec<RecordedHolder<H>>, usize),
) -> LockState {
    let holders = holders.into_iter().map(|holder| holder.holding).collect();
    LockState::new(holders, waiting)
}
