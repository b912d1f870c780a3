//! A short chaos run on every store several processes share (`integration_tests::chaos`): 3
//! worker processes × 16 tasks on 4 hot keys, taking mutexes, read and write locks, permits
//! of semaphores of two and two keys at once, while workers are killed, paused past their TTL
//! and cut off their store, and the store (a member of it) is killed and restarted — faults
//! overlapping, one beginning while another still runs. Every hold they recorded is checked:
//! no two holders of a key overlap where one is exclusive, and no semaphore has more holders
//! than permits, unless fencing refused the stale one's writes or it was told its lease was
//! lost; and no update to the counters the locks protect is lost. The twin pair: holders paused past their TTL that finish
//! their work are refused by a store that checks fences; without the checks their stale
//! writes land.

use std::process::Command;
use std::time::Duration;

use integration_tests::chaos::{self, ChaosPlan, ChaosStore, Fault};

/// Exclusive holds per store (over a thousand holds of every shape), with each fault at least
/// once and one beginning while another runs.
const SHORT: u64 = 600;
/// The time between the beginnings of two faults, shorter than a long run's: CI's time is
/// counted.
const QUIET: (Duration, Duration) = (Duration::from_millis(500), Duration::from_millis(1_500));

fn worker() -> Command {
    Command::new(env!("CARGO_BIN_EXE_chaos-worker"))
}

fn short_run_holds_up(store: ChaosStore) {
    let plan = ChaosPlan {
        quiet: QUIET,
        // 15–60 s each on the CI machine; a store that stops granting fails in 2 minutes.
        time_limit: Duration::from_secs(120),
        ..ChaosPlan::new(store, SHORT)
    };
    let report = chaos::run(&plan, &worker);
    println!("{report}");
    assert!(
        report.verdict.holds as u64 >= SHORT,
        "too few holds: {report}"
    );
    assert_eq!(
        report.verdict.shapes.len(),
        5,
        "every shape was taken: {report}"
    );
    assert!(
        report.overlapped > 0,
        "a fault began while another ran: {report}"
    );
    assert!(report.holds_up(), "{report}");
}

#[test]
fn chaos_on_redis_holds_up() {
    short_run_holds_up(ChaosStore::Redis);
}

#[test]
fn chaos_on_postgres_holds_up() {
    short_run_holds_up(ChaosStore::Postgres);
}

#[test]
fn chaos_on_mariadb_holds_up() {
    short_run_holds_up(ChaosStore::Mysql);
}

#[test]
fn chaos_on_etcd_holds_up() {
    short_run_holds_up(ChaosStore::Etcd);
}

#[test]
fn chaos_on_zookeeper_holds_up() {
    short_run_holds_up(ChaosStore::Zookeeper);
}

/// Holders paused past their TTL whose work runs on after the loss (`OnLost::Continue`),
/// against a register that checks fences (`fenced`) or not: six pauses of 1.5–3 s, each lock
/// held 10–30 ms between read and write.
fn paused_holders_finishing_their_work(fenced: bool) -> chaos::ChaosReport {
    let plan = ChaosPlan {
        fenced,
        finish_after_loss: true,
        schedule: vec![Fault::PauseProcess; 6],
        pauses: (Duration::from_millis(1_500), Duration::from_secs(3)),
        // Long enough that most pauses catch a task between its read and its write.
        holds_for: (Duration::from_millis(10), Duration::from_millis(30)),
        quiet: QUIET,
        time_limit: Duration::from_secs(120),
        ..ChaosPlan::new(ChaosStore::Redis, 1_000)
    };
    let report = chaos::run(&plan, &worker);
    println!("{report}");
    report
}

#[test]
fn a_fenced_store_refuses_paused_holders_that_finish_their_work() {
    let report = paused_holders_finishing_their_work(true);
    assert!(report.verdict.fenced_overlaps > 0, "{report}");
    assert!(report.register.refused > 0, "{report}");
    assert!(report.holds_up(), "{report}");
}

#[test]
fn without_fence_checks_paused_holders_that_finish_their_work_write_stale_data() {
    let report = paused_holders_finishing_their_work(false);
    assert!(report.verdict.unfenced_reported > 0, "{report}");
    // Each stale write overwrites what other holders wrote meanwhile: updates are lost (how
    // many depends on the timing; the report prints them).
    assert!(report.register.stale > 0, "{report}");
}
