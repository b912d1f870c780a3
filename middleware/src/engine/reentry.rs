//! Re-entering a lock: code running under a lock that asks for it again passes through.
//!
//! Reentrancy is scoped, not per task: what counts as "already held" is what the future
//! running under the lock holds ([`scope`]) — the work of `Locker::with_lock`, a handler behind
//! the layer, and everything they await. Two branches of one task (`tokio::join!` of two
//! `with_lock` calls on the same key) still exclude each other, which a per-task rule would
//! not; a handle from `Locker::lock` held in straight-line code is not a scope.

use std::future::Future;
use std::sync::Arc;

use super::error::LockError;
use super::guard::LockGuard;
use super::names::LockNames;
use crate::backend::Hold;

tokio::task_local! {
    static HELD: Held;
}

/// The locks held by the running future, innermost first.
#[derive(Clone, Default)]
struct Held(Option<Arc<Node>>);

struct Node {
    guard: LockGuard,
    outer: Held,
}

/// What a request for `names` finds in the running future's locks.
pub(crate) enum Reentry {
    /// None of them is held: take them.
    No,
    /// All of them are held in a way that covers the request: pass through, under this guard.
    Pass(LockGuard),
    /// Some are held in a way that cannot be re-entered.
    Refused(LockError),
}

/// Runs `work` as holding `guard`'s lock, besides whatever the caller holds.
pub(crate) fn scope<F: Future>(guard: LockGuard, work: F) -> impl Future<Output = F::Output> {
    let outer = HELD.try_with(Held::clone).unwrap_or_default();
    let held = Held(Some(Arc::new(Node { guard, outer })));
    HELD.scope(held, work)
}

/// Whether the running future already holds `names`, and as what.
pub(crate) fn check(names: &LockNames, wanted: Hold) -> Reentry {
    HELD.try_with(|held| held.check(names, wanted))
        .unwrap_or(Reentry::No)
}

impl Held {
    fn guards(&self) -> impl Iterator<Item = &LockGuard> {
        std::iter::successors(self.0.as_deref(), |node| node.outer.0.as_deref())
            .map(|node| &node.guard)
    }

    /// The innermost guard holding `name`.
    fn holder_of(&self, name: &str) -> Option<&LockGuard> {
        self.guards()
            .find(|guard| guard.lock_names().contains(name))
    }

    fn check(&self, names: &LockNames, wanted: Hold) -> Reentry {
        let holders: Vec<_> = names.iter().map(|name| self.holder_of(name)).collect();
        if holders.iter().all(Option::is_none) {
            return Reentry::No;
        }
        let key_start = names.key_start();
        let mut pass = None;
        let mut held_keys = Vec::new();
        for (name, holder) in names.iter().zip(&holders) {
            let Some(holder) = holder else { continue };
            held_keys.push(&name[key_start..]);
            if !holder.hold().covers(wanted) {
                return Reentry::Refused(LockError::Upgrade {
                    key: name[key_start..].to_owned(),
                    held: holder.hold(),
                    wanted,
                });
            }
            pass.get_or_insert(*holder);
        }
        match pass {
            Some(guard) if held_keys.len() == holders.len() => Reentry::Pass(guard.clone()),
            _ => Reentry::Refused(LockError::MoreKeys {
                held: held_keys.join(", "),
                wanted: names.joined_keys(),
            }),
        }
    }
}
