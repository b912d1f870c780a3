//! What a session's locks and waiters own in the store — etcd's keys, ZooKeeper's node paths
//! (less their sequence) — so that the session's sweep, which deletes what its session left
//! behind, leaves them alone. A key is owned from before it is written until it is deleted: a
//! [`Deletion`] keeps its keys owned while it runs, so the sweep never deletes a key that the
//! deletion is about to (which would leave that deletion finding nothing, and a release told its
//! lock had been lost).

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The keys a session's locks and waiters own.
#[derive(Debug)]
pub(in crate::backend) struct OwnedKeys<K> {
    keys: Mutex<HashSet<K>>,
}

impl<K> Default for OwnedKeys<K> {
    fn default() -> Self {
        Self {
            keys: Mutex::default(),
        }
    }
}

impl<K: Eq + Hash> OwnedKeys<K> {
    /// A lock or a waiter is about to write `key`.
    pub(in crate::backend) fn own(&self, key: K) {
        self.keys().insert(key);
    }

    /// Nobody here owns `key` any more: if its owner's deletion does not remove it, the next
    /// sweep does.
    pub(in crate::backend) fn disown<Q: Eq + Hash + ?Sized>(&self, key: &Q)
    where
        K: Borrow<Q>,
    {
        self.keys().remove(key);
    }

    /// Whether a lock or waiter owns `key`.
    #[cfg(feature = "etcd")]
    pub(in crate::backend) fn contains<Q: Eq + Hash + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.keys().contains(key)
    }

    /// Of `listed`, what nobody owns (by the key `owner_key` tells of each): what a sweep may
    /// delete.
    pub(in crate::backend) fn strays<T, Q: Eq + Hash + ?Sized>(
        &self,
        listed: impl IntoIterator<Item = T>,
        owner_key: impl Fn(&T) -> &Q,
    ) -> Vec<T>
    where
        K: Borrow<Q>,
    {
        let keys = self.keys();
        let listed = listed.into_iter();
        listed
            .filter(|item| !keys.contains(owner_key(item)))
            .collect()
    }

    /// A deletion of `keys` begins: they stay owned until it ends, then are disowned. Unless it
    /// is seen through ([`Deletion::done`]) — it failed, or its caller gave up on it (a store
    /// timeout) — `unfinished` runs then: the session sweeps soon, so that a lock whose
    /// release was lost while the store elected a leader is freed as soon as it answers, not a
    /// renewal period later.
    pub(in crate::backend) fn deleting<F: FnOnce()>(
        &self,
        keys: Vec<K>,
        unfinished: F,
    ) -> Deletion<'_, K, F> {
        Deletion {
            owned: self,
            keys,
            unfinished: Some(unfinished),
        }
    }

    fn keys(&self) -> MutexGuard<'_, HashSet<K>> {
        // Every update leaves the set consistent.
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A deletion of owned keys on its way ([`OwnedKeys::deleting`]).
pub(in crate::backend) struct Deletion<'a, K: Eq + Hash, F: FnOnce()> {
    owned: &'a OwnedKeys<K>,
    keys: Vec<K>,
    /// What runs at the end unless the deletion was seen through.
    unfinished: Option<F>,
}

impl<K: Eq + Hash, F: FnOnce()> Deletion<'_, K, F> {
    /// The deletion went through.
    pub(in crate::backend) fn done(mut self) {
        self.unfinished = None;
    }
}

impl<K: Eq + Hash, F: FnOnce()> Drop for Deletion<'_, K, F> {
    fn drop(&mut self) {
        let mut owned = self.owned.keys();
        for key in &self.keys {
            owned.remove(key);
        }
        drop(owned);
        if let Some(unfinished) = self.unfinished.take() {
            unfinished();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[test]
    fn a_deleted_key_stays_owned_until_its_deletion_ends() {
        let owned = OwnedKeys::default();
        owned.own("a".to_owned());
        let deletion = owned.deleting(vec!["a".to_owned()], || {});
        assert!(owned.strays(["a"], |key| *key).is_empty());
        deletion.done();
        assert_eq!(owned.strays(["a"], |key| *key), ["a"]);
    }

    #[test]
    fn only_a_deletion_not_seen_through_calls_for_a_sweep() {
        let (owned, sweeps) = (OwnedKeys::<String>::default(), Cell::new(0));
        owned
            .deleting(Vec::new(), || sweeps.set(sweeps.get() + 1))
            .done();
        assert_eq!(sweeps.get(), 0);
        drop(owned.deleting(Vec::new(), || sweeps.set(sweeps.get() + 1)));
        assert_eq!(sweeps.get(), 1);
    }

    #[test]
    fn strays_are_what_nobody_owns() {
        let owned = OwnedKeys::default();
        owned.own("kept".to_owned());
        let listed = ["kept-0001", "stray-0002"];
        let strays = owned.strays(listed, |path| &path[..path.len() - 5]);
        assert_eq!(strays, ["stray-0002"]);
    }
}
