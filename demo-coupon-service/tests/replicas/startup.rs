//! What an operator sees when the demo starts, or cannot: a plain log when it is not on a
//! terminal, and a one-line error naming what failed.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use http::StatusCode;
use integration_tests::{DemoReplica, Http, ZookeeperEnsemble};
use serde_json::json;

const DEMO: &str = env!("CARGO_BIN_EXE_demo-coupon-service");

#[test]
fn an_address_in_use_is_one_line_naming_the_address() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();

    let output = Command::new(DEMO)
        .args(["--listen", &address])
        .output()
        .expect("the demo runs");

    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("cannot listen on {address}")),
        "{stderr}"
    );
    assert!(!stderr.contains("Os {"), "no Debug output: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

#[test]
fn the_log_has_no_colour_codes_when_it_is_not_on_a_terminal() {
    let port = integration_tests::free_port();
    let mut demo = Command::new(DEMO)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .spawn()
        .expect("the demo runs");
    let mut log = BufReader::new(demo.stdout.take().unwrap());
    let mut first_line = String::new();

    log.read_line(&mut first_line).unwrap();
    demo.kill().unwrap();
    demo.wait().unwrap();

    assert!(
        first_line.contains("coupon service listening"),
        "{first_line}"
    );
    assert!(!first_line.contains('\u{1b}'), "{first_line:?}");
}

#[test]
fn a_store_url_of_unknown_scheme_is_one_line_naming_the_known_ones() {
    let output = Command::new(DEMO)
        .args(["--store", "ftp://user:secret@127.0.0.1/x"])
        .output()
        .expect("the demo runs");

    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "memory://, redis://, rediss://, redis+cluster://, redis+sentinel://, postgres:// or \
             mysql://"
        ),
        "{stderr}"
    );
    assert!(
        !stderr.contains("secret"),
        "the password is redacted: {stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

#[test]
fn an_unreachable_sql_store_is_one_line_naming_it() {
    let port = integration_tests::free_port();
    let url = format!("postgres://root@127.0.0.1:{port}/test");

    let output = Command::new(DEMO)
        .args(["--store", &url])
        .output()
        .expect("the demo runs");

    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot connect to PostgreSQL at postgres://***@127.0.0.1:{port}/test"
        )),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

/// A coupon store that accepts connections and never answers is given up on at start within
/// tower-lock's connect bound (5 s), with one line naming it without its password — for each
/// SQL scheme. Within 20 s: `refused` fails a demo still running then.
#[test]
fn a_silent_sql_store_is_given_up_on_at_start_naming_it_without_its_password() {
    // The kernel completes the connections; nobody reads or writes on them.
    let silent = TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
    let port = silent.local_addr().expect("its address").port();
    for (scheme, name) in [("postgres", "PostgreSQL"), ("mysql", "MySQL")] {
        let url = format!("{scheme}://u:s3cret@127.0.0.1:{port}/db");

        let output = refused(&["--store", &url]);

        one_line_naming(
            &output,
            &format!(
                "cannot connect to {name} at {scheme}://***@127.0.0.1:{port}/db: no answer within 5s"
            ),
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("s3cret"), "{stderr}");
    }
}

#[test]
fn optimistic_without_a_sql_store_is_one_line_saying_what_it_needs() {
    let output = Command::new(DEMO)
        .args(["--optimistic"])
        .output()
        .expect("the demo runs");

    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--optimistic needs a SQL store"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

/// Runs the demo with `args`, which it must refuse: its output once it exited, or a failure
/// when it still runs after 20 s (it started instead).
fn refused(args: &[&str]) -> Output {
    let mut demo = Command::new(DEMO)
        .args(args)
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the demo runs");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while demo.try_wait().expect("the demo's status").is_none() {
        if std::time::Instant::now() > deadline {
            demo.kill().ok();
            panic!("the demo started with {args:?} instead of refusing them");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    demo.wait_with_output().expect("the demo's output")
}

/// Asserts that `output` is a start-up failure of one line on stderr that contains `needle`,
/// not a panic.
fn one_line_naming(output: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains(needle), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

#[test]
fn lease_ttls_out_of_range_are_one_line_naming_the_option_and_its_bounds() {
    let cases = [
        ("0", "at least 10 ms"),
        ("1", "at least 10 ms"),
        ("86400001", "at most 86400000 ms"),
        ("18446744073709551615", "at most 86400000 ms"),
    ];
    for (ttl, bound) in cases {
        let output = refused(&["--lock-ttl-ms", ttl]);

        one_line_naming(&output, &format!("--lock-ttl-ms {ttl}: "));
        one_line_naming(&output, bound);
    }
}

#[test]
fn local_runs_out_of_range_are_one_line_naming_the_option_and_its_bounds() {
    for holds in ["0", "257"] {
        let output = refused(&["--lock-local-run", holds]);

        one_line_naming(&output, &format!("--lock-local-run {holds}: "));
        one_line_naming(&output, "from 1 (never) to 256 times in a row");
    }
}

#[test]
fn work_past_a_minute_is_one_line_naming_the_option_and_its_bound() {
    for work in ["60001", "18446744073709551615"] {
        let output = refused(&["--work-ms", work]);

        one_line_naming(&output, &format!("--work-ms {work}: "));
        one_line_naming(&output, "at most 60000 ms");
    }
}

/// RedLock connects on first use; the demo asks its masters at start all the same, like every
/// other lock store, instead of answering each request 503.
#[test]
fn redlock_without_a_majority_of_its_masters_is_one_line_naming_them() {
    let ports = [(); 3].map(|()| integration_tests::free_port());
    let masters = ports.map(|port| format!("127.0.0.1:{port}")).join(",");
    let output = refused(&["--lock-store", &format!("redlock://{masters}")]);

    one_line_naming(&output, "2 of 3 masters must answer; 3 did not");
    one_line_naming(&output, &format!("127.0.0.1:{}", ports[0]));
}

/// The lock store comes from tower-lock's URL API; its error is said once, not wrapped in the
/// demo's own words around the library's.
#[test]
fn an_unreachable_lock_store_is_one_line_naming_it_once_without_its_password() {
    let port = integration_tests::free_port();
    let output = refused(&["--lock-store", &format!("redis://:s3cret@127.0.0.1:{port}")]);

    one_line_naming(
        &output,
        &format!("--lock-store: cannot connect to Redis at 127.0.0.1:{port}: "),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.matches("cannot connect").count(), 1, "{stderr}");
    assert!(!stderr.contains("unavailable"), "{stderr}");
    assert!(!stderr.contains("s3cret"), "{stderr}");
}

#[test]
fn a_lock_store_that_vouches_for_less_than_the_ttl_asked_names_what_it_allows() {
    let zookeeper = ZookeeperEnsemble::granting_sessions_up_to(1, Duration::from_secs(10));

    let output = refused(&["--lock-store", &zookeeper.url(), "--lock-ttl-ms", "10000"]);

    one_line_naming(
        &output,
        "--lock-ttl-ms 10000: the lock store vouches for leases of at most 6666 ms",
    );
    one_line_naming(&output, "use --lock-ttl-ms 6666 or less");
}

#[test]
fn without_a_ttl_the_demo_takes_the_longest_the_lock_store_vouches_for_and_says_so() {
    let zookeeper = ZookeeperEnsemble::granting_sessions_up_to(1, Duration::from_secs(10));
    let port = integration_tests::free_port();
    let mut demo = Command::new(DEMO)
        .args(["--lock-store", &zookeeper.url()])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .spawn()
        .expect("the demo runs");
    let log = BufReader::new(demo.stdout.take().unwrap());
    // The ZooKeeper client logs its session first.
    let listening = log
        .lines()
        .map_while(Result::ok)
        .find(|line| line.contains("coupon service listening"));
    demo.kill().unwrap();
    demo.wait().unwrap();

    let listening = listening.expect("the demo started");
    assert!(
        listening.contains("6666 (the longest the lock store vouches for"),
        "{listening}"
    );
}

/// `--store memory://`, the memory store as the library's URLs name it, is the embedded store
/// the demo runs without `--store`: it serves claims, locked.
#[tokio::test]
async fn the_memory_store_by_its_url_serves_claims() {
    for scheme in ["memory", "MEMORY"] {
        serves_a_claim(&["--store", &format!("{scheme}://")]).await;
    }
}

#[tokio::test]
async fn a_wait_too_long_for_the_clock_serves_claims() {
    serves_a_claim(&["--lock-wait-ms", "18446744073709551615"]).await;
}

/// Starts the demo with `args` and checks that it seeds a coupon and grants a claim on it.
async fn serves_a_claim(args: &[&str]) {
    let demo = DemoReplica::start(DEMO, args);
    let http = Http::default();
    let coupon = format!("{}/coupons/c1", demo.url());

    let seeded = http.put(&coupon, json!({ "stock": 1 })).await;
    let claim = http
        .post(&format!("{coupon}/claim"), json!({ "user_id": "u1" }))
        .await;

    assert_eq!(seeded.status, StatusCode::OK, "{}", seeded.body);
    assert_eq!(claim.status, StatusCode::CREATED, "{}", claim.body);
}
