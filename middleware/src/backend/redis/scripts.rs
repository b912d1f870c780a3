//! The backend's Lua scripts (`lua/*.lua`, each with its contract in a header comment), and
//! how they are called.

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, Script, ServerErrorKind};

use crate::backend::BackendError;

/// Every script the backend runs, loaded into Redis on first use.
pub(super) struct Scripts {
    pub(super) busy: LuaScript,
    pub(super) extend: LuaScript,
    pub(super) release: LuaScript,
    pub(super) fair: LuaScript,
    pub(super) shared: LuaScript,
    pub(super) many: LuaScript,
}

impl Scripts {
    /// The scripts, announcing releases with `SPUBLISH` (sharded pub/sub, on the lock's shard)
    /// when `sharded`, else with `PUBLISH`.
    pub(super) fn new(sharded: bool) -> Self {
        let script = |code: &str| match sharded {
            true => LuaScript::new(&code.replace("'PUBLISH'", "'SPUBLISH'")),
            false => LuaScript::new(code),
        };
        Self {
            busy: script(include_str!("lua/busy.lua")),
            extend: script(include_str!("lua/extend.lua")),
            release: script(include_str!("lua/release.lua")),
            fair: script(include_str!("lua/fair.lua")),
            shared: script(include_str!("lua/shared.lua")),
            many: script(include_str!("lua/many.lua")),
        }
    }
}

/// A Lua script, sent by `EVALSHA` (its SHA1 only) and loaded when the server does not know it
/// (first use, or after a restart).
pub(super) struct LuaScript(Script);

impl LuaScript {
    fn new(code: &str) -> Self {
        Self(Script::new(code))
    }

    /// An `EVALSHA` of this script for `keys` keys, with room for `args` more arguments after
    /// them: the caller appends the keys, then the arguments. Sized up front, so appending
    /// them does not reallocate.
    pub(super) fn call(&self, keys: usize, args: usize) -> Cmd {
        const BYTES_PER_ARGUMENT: usize = 64;
        let hash = self.0.get_hash();
        let mut call = Cmd::with_capacity(
            3 + keys + args,
            16 + hash.len() + BYTES_PER_ARGUMENT * (keys + args),
        );
        call.arg("EVALSHA").arg(hash).arg(keys);
        call
    }

    /// Sends `call` (built by [`call`](Self::call)); loads the script and sends it again if
    /// the server does not know it.
    pub(super) async fn run<T: FromRedisValue>(
        &self,
        call: &Cmd,
        connection: &mut impl ConnectionLike,
    ) -> Result<T, BackendError> {
        let reply = match call.query_async(connection).await {
            Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.0
                    .load_async(connection)
                    .await
                    .map_err(BackendError::new)?;
                call.query_async(connection).await
            }
            reply => reply,
        };
        reply.map_err(BackendError::new)
    }
}
