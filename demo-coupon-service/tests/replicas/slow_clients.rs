//! Clients that stop sending mid-request: a head without its final blank line, a body short of
//! its `Content-Length`. The demo gives each 10 s (its read timeout), then answers or closes,
//! instead of keeping the connection (and a claim's lock, were it taken) for good.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use integration_tests::DemoReplica;

const DEMO: &str = env!("CARGO_BIN_EXE_demo-coupon-service");

/// The read timeout, and what a slow machine may add to it.
const CLOSED_WITHIN: Duration = Duration::from_secs(10 + 5);

/// Sends `request` to `demo`, then stops sending: what the demo answered before it closed the
/// connection, and how long that took. Fails when the connection is still open after
/// [`CLOSED_WITHIN`] and 5 s more.
fn send_and_stall(demo: &DemoReplica, request: &str) -> (String, Duration) {
    let address = demo.url().trim_start_matches("http://").to_owned();
    let mut connection = TcpStream::connect(address).unwrap();
    connection.write_all(request.as_bytes()).unwrap();
    connection
        .set_read_timeout(Some(CLOSED_WITHIN + Duration::from_secs(5)))
        .unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    if let Err(error) = connection.read_to_end(&mut answer) {
        let open = String::from_utf8_lossy(&answer);
        panic!(
            "still open after {:?} ({error}); answered so far: {open:?}",
            started.elapsed()
        );
    }
    (
        String::from_utf8_lossy(&answer).into_owned(),
        started.elapsed(),
    )
}

#[test]
fn a_request_head_that_never_ends_is_closed_after_the_read_timeout() {
    let demo = DemoReplica::start(DEMO, &[]);
    let head = "POST /coupons/x/claim HTTP/1.1\r\nhost: demo\r\ncontent-type: application/json\r\n";

    let (answer, took) = send_and_stall(&demo, head);

    assert!(took < CLOSED_WITHIN, "closed after {took:?}");
    assert!(!answer.contains(" 201 "), "{answer}");
}

#[test]
fn a_body_short_of_its_length_is_answered_400_after_the_read_timeout() {
    let demo = DemoReplica::start(DEMO, &[]);
    let seeded = "PUT /coupons/x HTTP/1.1\r\nhost: demo\r\ncontent-type: application/json\r\n\
                  content-length: 12\r\nconnection: close\r\n\r\n{\"stock\": 1}";
    assert!(send_and_stall(&demo, seeded).0.starts_with("HTTP/1.1 200"));
    let short = "POST /coupons/x/claim HTTP/1.1\r\nhost: demo\r\ncontent-type: application/json\r\n\
                 content-length: 100\r\n\r\n{\"user_id\": ";

    let (answer, took) = send_and_stall(&demo, short);

    assert!(took < CLOSED_WITHIN, "closed after {took:?}");
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    let stock = "GET /coupons/x HTTP/1.1\r\nhost: demo\r\nconnection: close\r\n\r\n";
    let (coupon, _) = send_and_stall(&demo, stock);
    assert!(
        coupon.contains(r#""remaining":1"#),
        "nothing claimed: {coupon}"
    );
}
