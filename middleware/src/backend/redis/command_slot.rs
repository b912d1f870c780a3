//! Which hash slot a command goes to on a Redis Cluster: the slot of its first key.

use redis::{Arg, Cmd, Pipeline};

use super::hash_slot;

/// Commands without a key that the cluster link sends to every master (`WAIT` must reach the
/// master the caller wrote to, `SCRIPT LOAD` every master a script may run on); any other
/// command's first key follows its name.
const KEYLESS: [&[u8]; 14] = [
    b"WAIT",
    b"WAITAOF",
    b"SCRIPT",
    b"FUNCTION",
    b"PING",
    b"ECHO",
    b"INFO",
    b"CONFIG",
    b"CLIENT",
    b"CLUSTER",
    b"DBSIZE",
    b"FLUSHALL",
    b"FLUSHDB",
    b"TIME",
];

/// The hash slot of `command`'s first key: the argument after its name, or for scripts and
/// functions (`EVAL`, `EVALSHA`, `FCALL` and their `_RO` forms) the first after the number of
/// keys. `None` for a command without a key.
pub(super) fn of_command(command: &Cmd) -> Option<u16> {
    let mut args = command.args_iter().map(|arg| match arg {
        Arg::Simple(bytes) => bytes,
        _ => &[],
    });
    let name = args.next()?;
    if KEYLESS
        .iter()
        .any(|keyless| name.eq_ignore_ascii_case(keyless))
    {
        return None;
    }
    let key = if takes_a_key_count(name) {
        let count = args.nth(1)?;
        if count == b"0" {
            return None;
        }
        args.next()?
    } else {
        args.next()?
    };
    u16::try_from(hash_slot::of_key(key)).ok()
}

/// The hash slot of the first of `pipeline`'s commands that has a key.
pub(super) fn of_pipeline(pipeline: &Pipeline) -> Option<u16> {
    pipeline.cmd_iter().find_map(of_command)
}

fn takes_a_key_count(name: &[u8]) -> bool {
    [
        b"EVAL" as &[u8],
        b"EVALSHA",
        b"EVAL_RO",
        b"EVALSHA_RO",
        b"FCALL",
        b"FCALL_RO",
    ]
    .iter()
    .any(|scripted| name.eq_ignore_ascii_case(scripted))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(key: &str) -> Option<u16> {
        u16::try_from(hash_slot::of_key(key)).ok()
    }

    #[test]
    fn a_command_goes_to_its_first_keys_slot() {
        let set = redis::cmd("SET").arg("{lock:a}").arg("x").clone();
        assert_eq!(of_command(&set), slot("{lock:a}"));
        let incr = redis::cmd("incr").arg("tower-lock:fence:{7}").clone();
        assert_eq!(of_command(&incr), slot("tower-lock:fence:{7}"));
    }

    #[test]
    fn a_script_goes_to_the_slot_of_its_first_key_after_the_count() {
        let evalsha = redis::cmd("EVALSHA")
            .arg("abc")
            .arg(2)
            .arg("{k}")
            .arg("{k}:line")
            .clone();
        assert_eq!(of_command(&evalsha), slot("{k}"));
        let keyless = redis::cmd("EVAL").arg("return 1").arg(0).clone();
        assert_eq!(of_command(&keyless), None);
    }

    #[test]
    fn commands_without_a_key_have_no_slot() {
        let wait = redis::cmd("WAIT").arg(1).arg(100).clone();
        assert_eq!(of_command(&wait), None);
        let load = redis::cmd("SCRIPT").arg("LOAD").arg("return 1").clone();
        assert_eq!(of_command(&load), None);
        assert_eq!(of_command(&redis::cmd("PING")), None);
    }

    #[test]
    fn a_pipeline_goes_to_the_slot_of_its_first_keyed_command() {
        let mut pipeline = redis::pipe();
        pipeline
            .cmd("PING")
            .cmd("HLEN")
            .arg("{k}:writers")
            .cmd("GET")
            .arg("other");
        assert_eq!(of_pipeline(&pipeline), slot("{k}:writers"));
    }
}
