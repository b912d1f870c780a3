//! CPU time spent by lockbench itself and by the Redis server. On a host whose cores the
//! client and Redis share, throughput follows what a pair costs both of them; CPU time per
//! pair moves far less with the host's noise than pairs/s do.

use std::time::Duration;

use crate::redis_stats;

/// Linux's clock tick for `/proc/<pid>/stat` times (`getconf CLK_TCK`; 100 on every
/// mainstream architecture).
const TICKS_PER_SECOND: u64 = 100;

/// User + system CPU time of this process so far, all its threads.
pub fn own() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat")
        .expect("lockbench measures its CPU time from /proc/self/stat (Linux)");
    let ticks = ticks(&stat).expect("/proc/self/stat has utime and stime");
    Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND)
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line. The command name (field 2)
/// may hold spaces and parentheses, so fields are counted after its last `)`.
fn ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// User + system CPU time of the Redis server so far, from `INFO cpu`'s `used_cpu_user` and
/// `used_cpu_sys`.
pub async fn redis(url: &str) -> Duration {
    let seconds: f64 = redis_stats::info(url, "cpu")
        .await
        .lines()
        .filter_map(|line| {
            let value = line
                .strip_prefix("used_cpu_user:")
                .or_else(|| line.strip_prefix("used_cpu_sys:"))?;
            value.trim().parse::<f64>().ok()
        })
        .sum();
    Duration::from_secs_f64(seconds)
}

#[cfg(test)]
mod tests {
    use super::ticks;

    #[test]
    fn ticks_are_counted_after_the_command_name() {
        let stat = "4242 (lock bench) ) S 1 4242 4242 0 -1 4194560 900 0 0 0 150 37 0 0 20 0";
        assert_eq!(ticks(stat), Some(187));
    }

    #[test]
    fn a_truncated_line_has_no_ticks() {
        assert_eq!(ticks("4242 (lockbench) S 1 4242"), None);
    }
}
