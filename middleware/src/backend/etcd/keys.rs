//! Where a lock's keys live: `<namespace><name>/<token>`, one key per holder or waiter, bound
//! to the process's session lease and ordered by their create revision.
//!
//! The name is escaped (`%` as `%25`, `/` as `%2F`), so one lock's keys never fall under
//! another lock's prefix (`a/` would otherwise hold the keys of lock `a/b`).

use crate::OwnerToken;

/// The keys of one lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct LockKeys {
    /// `<namespace><escaped name>/`: every key of the lock starts with it.
    prefix: Vec<u8>,
}

impl LockKeys {
    /// The keys of lock `name` under `namespace`.
    pub(super) fn new(namespace: &str, name: &str) -> Self {
        let mut prefix = namespace.as_bytes().to_vec();
        for byte in name.bytes() {
            match byte {
                b'%' => prefix.extend_from_slice(b"%25"),
                b'/' => prefix.extend_from_slice(b"%2F"),
                byte => prefix.push(byte),
            }
        }
        prefix.push(b'/');
        Self { prefix }
    }

    /// The prefix every key of the lock starts with.
    pub(super) fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// The key of `token`'s hold or place in line.
    pub(super) fn of(&self, token: OwnerToken) -> Vec<u8> {
        let mut key = self.prefix.clone();
        key.extend_from_slice(token.to_string().as_bytes());
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_with_a_slash_is_no_prefix_of_another_lock() {
        let a = LockKeys::new("ns/", "a");
        let ab = LockKeys::new("ns/", "a/b");
        assert_eq!(a.prefix(), b"ns/a/");
        assert_eq!(ab.prefix(), b"ns/a%2Fb/");
        assert!(!ab.prefix().starts_with(a.prefix()));
        assert_ne!(
            LockKeys::new("ns/", "a%2Fb").prefix(),
            ab.prefix(),
            "escapes are escaped"
        );
    }

    #[test]
    fn a_tokens_key_lies_under_its_locks_prefix() {
        let keys = LockKeys::new("tower-lock/", "lock:coupon:42");
        let token = OwnerToken::new();
        let key = keys.of(token);
        assert!(key.starts_with(keys.prefix()));
        assert!(key.ends_with(token.to_string().as_bytes()));
    }
}
