//! What an operator sees when the demo starts, or cannot: a plain log when it is not on a
//! terminal, and a one-line error naming what failed.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Command, Stdio};

const DEMO: &str = env!("CARGO_BIN_EXE_demo-replica");

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
        stderr.contains("redis://, postgres:// or mysql://"),
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
