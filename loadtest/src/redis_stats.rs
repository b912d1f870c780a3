//! Server-side command counts from `INFO commandstats`: they include commands run inside
//! scripts, so they show what a lock costs Redis whatever the client does.

use std::collections::HashMap;

/// Commands of the measurement itself and of connection set-up, not of locking.
const NOT_LOCKING: [&str; 7] = [
    "info", "hello", "client", "ping", "select", "command", "config",
];

/// The text of `INFO <section>` from the Redis at `url`.
pub async fn info(url: &str, section: &str) -> String {
    let client = redis::Client::open(url).expect("a valid Redis URL");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("Redis reachable");
    redis::cmd("INFO")
        .arg(section)
        .query_async(&mut connection)
        .await
        .expect("INFO answers")
}

/// Calls per command so far.
pub async fn command_calls(url: &str) -> HashMap<String, u64> {
    info(url, "commandstats")
        .await
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

fn delta(before: &HashMap<String, u64>, after: &HashMap<String, u64>, name: &str) -> u64 {
    after.get(name).copied().unwrap_or(0) - before.get(name).copied().unwrap_or(0)
}

/// Commands run for locking between the two snapshots, inside scripts included.
pub fn lock_commands(before: &HashMap<String, u64>, after: &HashMap<String, u64>) -> u64 {
    after
        .keys()
        .filter(|name| !NOT_LOCKING.contains(&name.as_str()))
        .map(|name| delta(before, after, name))
        .sum()
}

/// rslock's round trips, which it does not expose: it sends `SET NX PX` to lock and one
/// script call to unlock (also after every failed attempt), and nothing else.
pub fn client_issued_by_rslock(before: &HashMap<String, u64>, after: &HashMap<String, u64>) -> u64 {
    ["set", "eval", "evalsha"]
        .iter()
        .map(|name| delta(before, after, name))
        .sum()
}

/// Empties the server: a run starts without the keys earlier runs left (fencing counters).
pub async fn flush(url: &str) {
    let client = redis::Client::open(url).expect("a valid Redis URL");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("Redis reachable");
    let _: () = redis::cmd("FLUSHALL")
        .query_async(&mut connection)
        .await
        .expect("FLUSHALL answers");
}
