//! Plain commands the backend sends, built in place, and how it reads script answers.

use std::time::Duration;

use redis::{Cmd, RedisWrite, ToRedisArgs};
use tokio::time::Instant;

use super::keys::{FenceCounter, LockKey};
use crate::backend::{Attempt, BackendError, FencingToken, LockRequest, Patience, lease_deadline};
use crate::token::OwnerToken;

/// `SET <lock> <token and record> NX PX <ttl>`: takes lock `name` for `holder` if nobody holds
/// it. The record's fence is 0: the `INCR` beside it issues the fence, which the holder's first
/// renewal writes in.
pub(super) fn set_nx(name: &str, record: HolderRecord<'_>, ttl: Duration) -> Cmd {
    let mut set = Cmd::with_capacity(6, 128 + name.len() + record.holder.len());
    set.arg("SET")
        .arg(LockKey::lock(name))
        .arg(record)
        .arg("NX")
        .arg("PX")
        .arg(millis(ttl));
    set
}

/// A lock key's value as a plain `SET` writes it: `<token> <since ms> 0 <kind> <label>` — the
/// owner token's 32 hex digits, a space where a waiter's `*` goes, when the lock was taken (ms
/// since the epoch, by this process's clock; the scripts use Redis's), its fence (0: not known
/// to the store yet), `m` for a mutex or `w` for a writer, and the holder's label. Written into
/// the command's buffer directly.
#[derive(Clone, Copy, Debug)]
pub(super) struct HolderRecord<'a> {
    pub(super) token: OwnerToken,
    pub(super) writer: bool,
    pub(super) holder: &'a str,
}

impl<'a> HolderRecord<'a> {
    /// The record of `request`'s mutex.
    pub(super) fn mutex(request: LockRequest) -> HolderRecord<'static> {
        HolderRecord {
            token: request.token,
            writer: false,
            holder: request.holder,
        }
    }
}

impl ToRedisArgs for HolderRecord<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        use std::io::Write;
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis());
        let mut buf = [0; 32];
        let mut arg = out.writer_for_next_arg();
        // Writing into a command's buffer cannot fail.
        let kind = if self.writer { 'w' } else { 'm' };
        let token = self.token.encode(&mut buf);
        let _ = write!(arg, "{token} {since} 0 {kind} {}", self.holder);
    }
}

/// `INCR` of the fencing counter of lock `name`'s slot.
pub(super) fn fence_incr(name: &str) -> Cmd {
    let mut incr = Cmd::with_capacity(2, 32);
    incr.arg("INCR").arg(FenceCounter::of_lock(name));
    incr
}

/// `PTTL` of lock `name`: how long its holder has left, asked without marking the lock.
pub(super) fn pttl(name: &str) -> Cmd {
    let mut pttl = Cmd::with_capacity(2, 16 + name.len());
    pttl.arg("PTTL").arg(LockKey::lock(name));
    pttl
}

/// A remaining lease as Redis reports it (`PTTL`): -2 (gone: ask again at once), -1 (no
/// expiry: unknown), or milliseconds.
pub(super) fn holder_ttl(pttl: i64) -> Option<Duration> {
    match pttl {
        -2 => Some(Duration::ZERO),
        ms => u64::try_from(ms).ok().map(Duration::from_millis),
    }
}

/// How `shared.lua` names a caller's patience.
pub(super) fn patience_arg(patience: Patience) -> &'static str {
    match patience {
        Patience::Once => "once",
        Patience::Polls => "polls",
        Patience::Listens => "listens",
    }
}

/// A fence as Redis issued it: 0 when fencing is off (counters start at 1).
pub(super) fn fence(value: u64) -> Option<FencingToken> {
    (value > 0).then_some(FencingToken::new(value))
}

/// Whether an acquire of lock `name` sent at `sent` with `ttl`, and taken, came back while its
/// lease certainly ran (the lease's own reckoning, [`lease_deadline`]): only then did the
/// fencing `INCR` pipelined after the `SET` run while the lock was held.
pub(super) fn answered_within_lease(
    name: &str,
    sent: Instant,
    ttl: Duration,
) -> Result<(), BackendError> {
    if Instant::now() < lease_deadline(sent, ttl) {
        return Ok(());
    }
    Err(BackendError::new(format!(
        "Redis answered the acquire of {name} after {:?}, too late for its {ttl:?} lease: the \
         fencing token may be older than a later holder's",
        sent.elapsed()
    )))
}

/// Reads an acquire script's `{1, fence}` or `{0, wait ms}`.
pub(super) fn acquire_reply(
    reply: Vec<i64>,
) -> Result<Attempt<Option<FencingToken>>, BackendError> {
    match reply[..] {
        [1, value] => u64::try_from(value)
            .map(|value| Attempt::Acquired(fence(value)))
            .map_err(|_| unexpected_reply(&reply)),
        [0, pttl] => Ok(Attempt::Busy {
            holder_ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        }),
        _ => Err(unexpected_reply(&reply)),
    }
}

/// A duration in whole milliseconds, at least 1 (Redis refuses a zero expiry).
pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

pub(super) fn unexpected_reply(reply: &[i64]) -> BackendError {
    BackendError::new(format!("unexpected reply from a lock script: {reply:?}"))
}

/// An argument of a script call after its keys: a number or a word.
#[derive(Clone, Copy, Debug)]
pub(super) enum ScriptArg {
    Int(u64),
    Word(&'static str),
}

impl ToRedisArgs for ScriptArg {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        match self {
            ScriptArg::Int(value) => value.write_redis_args(out),
            ScriptArg::Word(word) => word.write_redis_args(out),
        }
    }
}
