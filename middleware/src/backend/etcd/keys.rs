//! Where a lock's keys live: one key per holder or waiter, bound to the process's session
//! lease and ordered by their create revision — `<namespace><name>/x/<token>` for an
//! exclusive hold (mutex, writer) or a place in line for one, `<namespace><name>/s/<token>`
//! for a shared hold (reader, permit). A waiting writer's place among the writers,
//! `<namespace>%writer/<name>/<token>` (writers take the lock in the order of their places'
//! create revisions), and its intent, which bars new readers, hold no place in the line of
//! holds and lie outside the lock's prefix, `<namespace>%intent/<name>/<token>`, so that
//! "nothing under the lock's prefix" means free for a mutex in one comparison; so does a
//! waiting reader's claim on the next turn, `<namespace>%claim/<name>/<token>`.
//!
//! The name is escaped (`%` as `%25`, `/` as `%2F`), so one lock's keys never fall under
//! another lock's prefix (`a/` would otherwise hold the keys of lock `a/b`).

use crate::token::OwnerToken;

/// The key that marks `token`'s attempts as given up: a put still on its way when the
/// attempt was abandoned finds it and does nothing. `<namespace>%given-up/<token>`: no lock's
/// keys start so (in an escaped name `%` is always followed by `25` or `2F`).
pub(super) fn given_up(namespace: &str, token: OwnerToken) -> Vec<u8> {
    format!("{namespace}%given-up/{token}").into_bytes()
}

/// The keys of one lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct LockKeys {
    /// `<namespace><escaped name>/`: every key of the lock starts with it.
    prefix: Vec<u8>,
    /// `<namespace>%intent/<escaped name>/`: every waiting writer's intent starts with it.
    intents: Vec<u8>,
    /// `<namespace>%claim/<escaped name>/`: every waiting reader's claim starts with it.
    claims: Vec<u8>,
    /// `<namespace>%writer/<escaped name>/`: every waiting writer's place starts with it.
    writers: Vec<u8>,
}

impl LockKeys {
    /// The keys of lock `name` under `namespace`.
    pub(super) fn new(namespace: &str, name: &str) -> Self {
        let mut escaped = Vec::with_capacity(name.len() + 1);
        for byte in name.bytes() {
            match byte {
                b'%' => escaped.extend_from_slice(b"%25"),
                b'/' => escaped.extend_from_slice(b"%2F"),
                byte => escaped.push(byte),
            }
        }
        escaped.push(b'/');
        let prefix = [namespace.as_bytes(), &escaped].concat();
        let intents = [namespace.as_bytes(), b"%intent/", &escaped].concat();
        let claims = [namespace.as_bytes(), b"%claim/", &escaped].concat();
        let writers = [namespace.as_bytes(), b"%writer/", &escaped].concat();
        Self {
            prefix,
            intents,
            claims,
            writers,
        }
    }

    /// The prefix every key of the lock starts with.
    pub(super) fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// The prefix of the exclusive holds and places in line.
    pub(super) fn exclusive_prefix(&self) -> Vec<u8> {
        self.under(b"x/")
    }

    /// The prefix of the shared holds.
    pub(super) fn shared_prefix(&self) -> Vec<u8> {
        self.under(b"s/")
    }

    /// The prefix of the waiting writers' intents.
    pub(super) fn intent_prefix(&self) -> &[u8] {
        &self.intents
    }

    /// The key of `token`'s intent to write.
    pub(super) fn intent(&self, token: OwnerToken) -> Vec<u8> {
        [self.intents.as_slice(), token.to_string().as_bytes()].concat()
    }

    /// The prefix of the waiting readers' claims.
    pub(super) fn claim_prefix(&self) -> &[u8] {
        &self.claims
    }

    /// The key of `token`'s claim on the next turn, as a waiting reader.
    pub(super) fn claim(&self, token: OwnerToken) -> Vec<u8> {
        [self.claims.as_slice(), token.to_string().as_bytes()].concat()
    }

    /// The prefix of the waiting writers' places.
    pub(super) fn writer_prefix(&self) -> &[u8] {
        &self.writers
    }

    /// The key of `token`'s place among the writers.
    pub(super) fn writer(&self, token: OwnerToken) -> Vec<u8> {
        [self.writers.as_slice(), token.to_string().as_bytes()].concat()
    }

    /// The key of `token`'s exclusive hold or place in line.
    pub(super) fn exclusive(&self, token: OwnerToken) -> Vec<u8> {
        self.token_under(b"x/", token)
    }

    /// The key of `token`'s shared hold.
    pub(super) fn shared(&self, token: OwnerToken) -> Vec<u8> {
        self.token_under(b"s/", token)
    }

    fn under(&self, kind: &[u8]) -> Vec<u8> {
        [self.prefix.as_slice(), kind].concat()
    }

    fn token_under(&self, kind: &[u8], token: OwnerToken) -> Vec<u8> {
        let mut key = self.under(kind);
        key.extend_from_slice(token.to_string().as_bytes());
        key
    }
}

/// The lock name an escaped one stands for (`None` when it is no escaped name: the
/// backend's marks, intents, claims and places start with `%` and a word).
pub(super) fn unescape(escaped: &[u8]) -> Option<String> {
    let mut name = Vec::with_capacity(escaped.len());
    let mut bytes = escaped.iter();
    while let Some(&byte) = bytes.next() {
        if byte != b'%' {
            name.push(byte);
            continue;
        }
        match (bytes.next(), bytes.next()) {
            (Some(b'2'), Some(b'5')) => name.push(b'%'),
            (Some(b'2'), Some(b'F')) => name.push(b'/'),
            _ => return None,
        }
    }
    String::from_utf8(name).ok()
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
    fn an_escaped_name_is_read_back() {
        for name in ["a", "a/b", "100%", "%2F", ""] {
            let mut escaped = LockKeys::new("", name).prefix().to_vec();
            escaped.pop();
            assert_eq!(unescape(&escaped).as_deref(), Some(name));
        }
        assert_eq!(unescape(b"%intent"), None);
    }

    #[test]
    fn a_given_up_mark_lies_under_no_locks_prefix() {
        let token = OwnerToken::new();
        let mark = given_up("ns/", token);
        for name in ["%given-up", "%given-up/x", "%", "given-up"] {
            assert!(
                !mark.starts_with(LockKeys::new("ns/", name).prefix()),
                "{name}"
            );
        }
    }

    #[test]
    fn a_tokens_keys_lie_under_their_kinds_prefix() {
        let keys = LockKeys::new("tower-lock/", "lock:coupon:42");
        let token = OwnerToken::new();
        let (exclusive, shared) = (keys.exclusive(token), keys.shared(token));
        assert!(exclusive.starts_with(&keys.exclusive_prefix()));
        assert!(shared.starts_with(&keys.shared_prefix()));
        assert!(keys.exclusive_prefix().starts_with(keys.prefix()));
        assert!(keys.shared_prefix().starts_with(keys.prefix()));
        assert_ne!(keys.exclusive_prefix(), keys.shared_prefix());
        assert!(keys.intent(token).starts_with(keys.intent_prefix()));
        assert!(
            !keys.intent(token).starts_with(keys.prefix()),
            "intents lie outside"
        );
        assert!(keys.writer(token).starts_with(keys.writer_prefix()));
        assert!(
            !keys.writer(token).starts_with(keys.prefix()),
            "writers' places lie outside"
        );
        assert!(exclusive.ends_with(token.to_string().as_bytes()));
    }
}
