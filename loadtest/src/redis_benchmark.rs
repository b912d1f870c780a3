//! `redis-benchmark`'s rate for each command a lock sends, beside the distinct-keys table.

use redis::Script;

use crate::distinct_keys::RAW_FENCE_COUNTER;

/// `redis-benchmark` on the same server for the commands the locks send, each alone:
/// (description, requests/s). Empty when redis-benchmark is not installed.
pub async fn rates(url: &str, concurrency: usize) -> Vec<(String, f64)> {
    let port = url
        .rsplit(':')
        .next()
        .unwrap_or("6379")
        .trim_end_matches('/')
        .to_owned();
    let client = redis::Client::open(url).expect("a valid Redis URL");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("Redis reachable");
    let release = include_str!("../../middleware/src/backend/redis/lua/release.lua");
    let _: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(release)
        .query_async(&mut connection)
        .await
        .expect("SCRIPT LOAD answers");
    let commands: [(&str, Vec<String>); 3] = [
        (
            "SET NX PX",
            ["SET", "rb:__rand_int__", "token", "NX", "PX", "10000"]
                .map(str::to_owned)
                .to_vec(),
        ),
        (
            "INCR",
            ["INCR", RAW_FENCE_COUNTER].map(str::to_owned).to_vec(),
        ),
        (
            "EVALSHA release.lua",
            [
                "EVALSHA",
                Script::new(release).get_hash(),
                "1",
                "{rb:__rand_int__}",
                "token",
            ]
            .map(str::to_owned)
            .to_vec(),
        ),
    ];
    let mut figures = Vec::new();
    for (what, command) in commands {
        let output = tokio::process::Command::new("redis-benchmark")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-c",
                &concurrency.to_string(),
                "-n",
                "200000",
                "-r",
                "100000000",
                "-q",
            ])
            .args(&command)
            .output()
            .await;
        let Ok(output) = output else {
            return Vec::new();
        };
        let text = String::from_utf8_lossy(&output.stdout);
        // -q prints progress lines ending in '\r', then the final "<command>: <rate> requests
        // per second" line.
        let rate = text.rsplit(['\r', '\n']).find_map(|line| {
            line.split(": ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse::<f64>()
                .ok()
        });
        if let Some(rate) = rate {
            figures.push((what.to_owned(), rate));
        }
    }
    figures
}
