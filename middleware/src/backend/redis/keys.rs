//! The Redis keys of a lock, written straight into commands.

use std::fmt;
use std::io::Write;

use redis::{RedisWrite, ToRedisArgs};

use super::hash_slot;

/// One of lock `name`'s keys: `{name}` and a suffix. The braces make `name` the hash tag, so
/// every key of a lock lives in the same Redis Cluster slot. As a command argument it is
/// written into the command's buffer directly, with no string of its own.
#[derive(Clone, Copy, Debug)]
pub(super) struct LockKey<'a> {
    name: &'a str,
    suffix: &'static str,
}

impl<'a> LockKey<'a> {
    /// The lock itself: a string holding the owner token, whether it is waited for, and the
    /// holder's record (see [`HolderRecord`](super::commands::HolderRecord)), with the lease as
    /// its expiry.
    pub(super) fn lock(name: &'a str) -> Self {
        Self { name, suffix: "" }
    }

    /// Shared holders (readers, permits): a sorted set of owner token → lease expiry.
    pub(super) fn shared(name: &'a str) -> Self {
        Self {
            name,
            suffix: ":shared",
        }
    }

    /// Shared holders' records: a hash of token → `<since ms> <permits, 0 for a reader>
    /// <label>`.
    pub(super) fn holders(name: &'a str) -> Self {
        Self {
            name,
            suffix: ":holders",
        }
    }

    /// Waiting writers: a hash of token → `<arrival µs> <expiry ms>`, followed by `!` once
    /// readers alone held the first of them back, when it also bars new readers.
    pub(super) fn writers(name: &'a str) -> Self {
        Self {
            name,
            suffix: ":writers",
        }
    }

    /// Readers' claims on the next turn: a sorted set of waiting reader's token → expiry.
    pub(super) fn claims(name: &'a str) -> Self {
        Self {
            name,
            suffix: ":claims",
        }
    }

    /// The line of tickets in arrival order: fair mode's waiters, and each process's head of
    /// line in notified mode.
    pub(super) fn line(name: &'a str) -> Self {
        Self {
            name,
            suffix: ":line",
        }
    }

    /// Each ticket's expiry.
    pub(super) fn tickets(name: &'a str) -> Self {
        Self {
            name,
            suffix: ":tickets",
        }
    }

    /// The channel releases are announced on (not a key; the scripts derive it from the lock
    /// key the same way).
    pub(super) fn channel(name: &'a str) -> Self {
        Self {
            name,
            suffix: ":free",
        }
    }

    /// The lock name of an announcement channel.
    pub(super) fn name_of_channel(channel: &str) -> Option<&str> {
        channel.strip_prefix('{')?.strip_suffix("}:free")
    }
}

impl fmt::Display for LockKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{}}}{}", self.name, self.suffix)
    }
}

impl ToRedisArgs for LockKey<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        let mut arg = out.writer_for_next_arg();
        // Writing into a command's buffer cannot fail.
        let _ = arg
            .write_all(b"{")
            .and_then(|()| arg.write_all(self.name.as_bytes()))
            .and_then(|()| arg.write_all(b"}"))
            .and_then(|()| arg.write_all(self.suffix.as_bytes()));
    }
}

/// The fencing counter that serves lock `name`: `tower-lock:fence:{<tag>}`, in the lock key's
/// own hash slot (see [`hash_slot`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct FenceCounter {
    tag: u32,
}

impl FenceCounter {
    pub(super) fn of_lock(name: &str) -> Self {
        Self {
            tag: hash_slot::counter_tag(hash_slot::of_lock_key(name)),
        }
    }
}

impl ToRedisArgs for FenceCounter {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        // Writing into a command's buffer cannot fail.
        let _ = write!(out.writer_for_next_arg(), "{self}");
    }
}

impl fmt::Display for FenceCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tower-lock:fence:{{{}}}", self.tag)
    }
}

/// A key of a script call on one lock: one of its keys, or its fencing counter.
#[derive(Clone, Copy, Debug)]
pub(super) enum ScriptKey<'a> {
    Lock(LockKey<'a>),
    Fence(FenceCounter),
}

impl<'a> From<LockKey<'a>> for ScriptKey<'a> {
    fn from(key: LockKey<'a>) -> Self {
        Self::Lock(key)
    }
}

impl From<FenceCounter> for ScriptKey<'_> {
    fn from(counter: FenceCounter) -> Self {
        Self::Fence(counter)
    }
}

impl ToRedisArgs for ScriptKey<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        match self {
            Self::Lock(key) => key.write_redis_args(out),
            Self::Fence(counter) => counter.write_redis_args(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(arg: impl ToRedisArgs) -> String {
        let args = arg.to_redis_args();
        assert_eq!(args.len(), 1, "one argument");
        String::from_utf8(args[0].clone()).unwrap()
    }

    #[test]
    fn keys_are_the_name_in_braces_and_a_suffix() {
        assert_eq!(written(LockKey::lock("lock:coupon:42")), "{lock:coupon:42}");
        assert_eq!(written(LockKey::shared("lock:a")), "{lock:a}:shared");
        assert_eq!(LockKey::channel("lock:a").to_string(), "{lock:a}:free");
        assert_eq!(LockKey::name_of_channel("{lock:a}:free"), Some("lock:a"));
    }

    #[test]
    fn the_fence_counter_shares_the_lock_keys_slot() {
        for name in ["lock:coupon:42", "lock:a", "", "a}b", "}a"] {
            let counter = written(FenceCounter::of_lock(name));
            let lock = written(LockKey::lock(name));
            assert!(counter.starts_with("tower-lock:fence:{"), "{counter}");
            assert_eq!(
                hash_slot::of_key(&counter),
                hash_slot::of_key(&lock),
                "{name:?}"
            );
        }
    }
}
