//! The demo's dashboard in headless Chromium during a claim storm on two replicas sharing
//! Redis: its numbers move while claims land, both replicas report, and `oversold` reads 0 —
//! and, the twin, without the lock the same page shows the coupon oversold. And the page fits
//! a desktop's, a laptop's and a phone's window: every number whole in its card, the replicas'
//! table whole, the coupon under attack first and in view, the locks panel in the first screen.

use std::path::PathBuf;
use std::time::Duration;

use http::StatusCode;
use integration_tests::{Browser, DemoReplica, Http, RedisServer};
use serde_json::json;
use tokio::task::JoinHandle;

const DEMO: &str = env!("CARGO_BIN_EXE_demo-coupon-service");

/// Claims of `coupon` by `users` distinct users, `concurrency` at a time, spread over
/// `replicas`.
fn claim_storm(
    urls: Vec<String>,
    coupon: &'static str,
    users: usize,
    concurrency: usize,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let http = Http::default();
        let workers = (0..concurrency).map(|worker| {
            let (http, urls) = (http.clone(), urls.clone());
            async move {
                for user in (worker..users).step_by(concurrency) {
                    let url = format!("{}/coupons/{coupon}/claim", urls[user % urls.len()]);
                    http.post(&url, json!({ "user_id": format!("user-{user}") }))
                        .await;
                }
            }
        });
        futures_util::future::join_all(workers).await;
    })
}

/// A number as the page prints it (`1,234`).
fn number(text: &str) -> u64 {
    let digits: String = text.chars().filter(char::is_ascii_digit).collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {text:?}"))
}

async fn seed(url: &str, stock: u64) {
    let seeded = Http::default()
        .put(&format!("{url}/coupons/storm"), json!({ "stock": stock }))
        .await;
    assert_eq!(seeded.status, StatusCode::OK, "{}", seeded.body);
}

/// Where the screenshot goes: the test's target directory, kept after the run.
fn artifact(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// How long the page may take to show a change: it polls twice a second, slower under load.
const PATIENCE: Duration = Duration::from_secs(15);
const CLAIMED: &str = "[data-coupon=storm] [data-field=claimed]";
const OVERSOLD: &str = "[data-coupon=storm] [data-field=oversold]";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_follows_a_claim_storm_and_shows_nothing_oversold() {
    let redis = RedisServer::start();
    // 600 claims of 5 ms each, one at a time: the storm lasts 3 s at the very least.
    let args = ["--redis-url", &redis.url(), "--work-ms", "5"];
    let replicas = [
        DemoReplica::start(DEMO, &args),
        DemoReplica::start(DEMO, &args),
    ];
    let urls: Vec<String> = replicas.iter().map(DemoReplica::url).collect();
    let browser = Browser::start().await;
    browser.open(&format!("{}/", urls[0])).await;

    seed(&urls[0], 600).await;
    let storm = claim_storm(urls.clone(), "storm", 2000, 24);
    let first = number(&browser.text(CLAIMED).await);
    let moved = |text: &str| number(text) > first;
    let later = number(&browser.text_when(CLAIMED, PATIENCE, moved).await);
    assert!(
        !storm.is_finished(),
        "the page showed claimed go from {first} to {later} only after the storm"
    );
    assert_eq!(browser.text(OVERSOLD).await, "0");
    assert_eq!(browser.count("#replicas tbody tr[data-replica]").await, 2);
    let screenshot = artifact("dashboard-claim-storm.png");
    browser.screenshot(&screenshot).await;
    eprintln!("screenshot: {}", screenshot.display());

    storm.await.unwrap();
    browser
        .text_when(CLAIMED, PATIENCE, |text| text == "600")
        .await;
    assert_eq!(browser.text(OVERSOLD).await, "0");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lock_the_dashboard_shows_the_coupon_oversold() {
    let redis = RedisServer::start();
    let args = ["--redis-url", &redis.url(), "--work-ms", "2", "--no-lock"];
    let replicas = [
        DemoReplica::start(DEMO, &args),
        DemoReplica::start(DEMO, &args),
    ];
    let urls: Vec<String> = replicas.iter().map(DemoReplica::url).collect();
    seed(&urls[0], 20).await;
    claim_storm(urls.clone(), "storm", 400, 32).await.unwrap();

    let browser = Browser::start().await;
    browser.open(&format!("{}/", urls[0])).await;
    let oversold = number(&browser.text(OVERSOLD).await);
    assert!(oversold > 0, "the control oversells, and the page says so");
    let bad = "[data-coupon=storm] .oversold.bad";
    assert_eq!(browser.count(bad).await, 1, "shown as a failure");
    browser
        .screenshot(&artifact("dashboard-oversold-without-lock.png"))
        .await;
    browser.close().await;
}

/// Answers of every kind on one replica, so that its row of answers by status is as long as
/// it gets: 201, 409 (claimed twice), 410 (sold out), 404 (no such coupon), 400 (a bad body).
async fn every_kind_of_answer(url: &str) {
    let http = Http::default();
    let claim = |coupon: &str| format!("{url}/coupons/{coupon}/claim");
    http.put(&format!("{url}/coupons/tiny"), json!({ "stock": 1 }))
        .await;
    for (coupon, body) in [
        ("tiny", json!({ "user_id": "ada" })),
        ("tiny", json!({ "user_id": "ada" })),
        ("tiny", json!({ "user_id": "grace" })),
        ("nowhere", json!({ "user_id": "ada" })),
        ("tiny", json!(null)),
    ] {
        http.post(&claim(coupon), body).await;
    }
}

/// Numbers cut short or sticking out of their cards, where the replicas begin and the locks
/// panel's token form ends, whether the page is wider than its window, and whether the
/// replicas' table is wider than its box.
const LAYOUT: &str = "const cut = [...document.querySelectorAll('.numbers b')] \
        .filter((number) => number.scrollWidth > number.clientWidth \
            || number.getBoundingClientRect().right \
                > number.closest('.card').getBoundingClientRect().right) \
        .map((number) => number.innerText); \
    const replicas = document.querySelector('#replicas').getBoundingClientRect(); \
    const locks = document.querySelector('#token-form').getBoundingClientRect(); \
    return { cut, replicas_top: replicas.top, locks_bottom: locks.bottom, \
        window_height: window.innerHeight, \
        too_wide: document.documentElement.scrollWidth > window.innerWidth, \
        table_width: document.querySelector('.table').scrollWidth, \
        table_box: document.querySelector('.table').clientWidth };";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_fits_a_desktop_and_a_phone_with_large_numbers_and_many_coupons() {
    let replica = DemoReplica::start(DEMO, &["--work-ms", "0"]);
    let (http, url) = (Http::default(), replica.url());
    for (id, stock) in (1..=15).map(|n| (format!("x{n}"), 500_u64)).chain([
        ("storm".to_owned(), 100_000),
        ("huge".to_owned(), 4_294_967_295),
    ]) {
        let created = http
            .put(&format!("{url}/coupons/{id}"), json!({ "stock": stock }))
            .await;
        assert_eq!(created.status, StatusCode::OK, "{}", created.body);
    }
    claim_storm(vec![url.clone()], "storm", 3_210, 16)
        .await
        .unwrap();
    every_kind_of_answer(&url).await;
    let browser = Browser::start().await;
    browser.open(&format!("{url}/")).await;
    browser
        .text_when(CLAIMED, PATIENCE, |text| text == "3,210")
        .await;

    let desktop = browser.evaluate(LAYOUT, vec![]).await;
    assert_eq!(
        desktop["cut"],
        json!([]),
        "every number whole at 1280×900: {desktop}"
    );
    assert!(
        desktop["replicas_top"].as_f64() < desktop["window_height"].as_f64(),
        "the replicas in view at 1280×900 however many coupons: {desktop}"
    );
    assert!(
        desktop["table_width"].as_f64() <= desktop["table_box"].as_f64(),
        "the replicas' table whole at 1280×900, every kind of answer in it: {desktop}"
    );
    browser.resize(1024, 768).await;
    let laptop = browser.evaluate(LAYOUT, vec![]).await;
    assert!(
        laptop["table_width"].as_f64() <= laptop["table_box"].as_f64(),
        "the replicas' table whole at 1024×768 too: {laptop}"
    );
    for (width, height) in [(1280, 800), (1920, 1080)] {
        browser.resize(width, height).await;
        let window = browser.evaluate(LAYOUT, vec![]).await;
        assert!(
            window["locks_bottom"].as_f64() <= window["window_height"].as_f64(),
            "the locks panel in the first screen at {width}×{height} however many coupons: {window}"
        );
    }
    browser.resize(1280, 900).await;
    assert_eq!(
        browser.count("[data-coupon]").await,
        18,
        "every coupon, not the last eight"
    );
    let quiet = browser.text("[data-coupon=x15] .caption").await;
    assert!(
        quiet.starts_with("no claims over the ") && quiet.ends_with(" s since this page opened"),
        "an empty chart says why, and over how long the page has watched: {quiet}"
    );

    browser.resize(390, 844).await;
    let phone = browser.evaluate(LAYOUT, vec![]).await;
    assert_eq!(
        phone["cut"],
        json!([]),
        "every number whole at a phone's width: {phone}"
    );
    assert_eq!(
        phone["too_wide"], false,
        "no sideways scrolling of the page: {phone}"
    );
    browser.screenshot(&artifact("dashboard-phone.png")).await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coupon_under_attack_comes_first_in_view() {
    let replica = DemoReplica::start(DEMO, &["--work-ms", "5"]);
    let (http, url) = (Http::default(), replica.url());
    let quiet = (1..=15).map(|n| (format!("x{n}"), 500_u64));
    for (id, stock) in quiet.chain([("zulu".to_owned(), 100_000)]) {
        let created = http
            .put(&format!("{url}/coupons/{id}"), json!({ "stock": stock }))
            .await;
        assert_eq!(created.status, StatusCode::OK, "{}", created.body);
    }
    let browser = Browser::start().await;
    browser.open(&format!("{url}/")).await;
    let first = "#coupons .card:first-child h3";
    assert_eq!(
        browser.text(first).await,
        "x1",
        "by name while nothing happens"
    );

    let storm = claim_storm(vec![url.clone()], "zulu", 3_000, 16);
    browser.text_when(first, PATIENCE, |id| id == "zulu").await;
    let place = "const card = document.querySelector('[data-coupon=zulu]').getBoundingClientRect(); \
        return { bottom: card.bottom, window_height: window.innerHeight };";
    let place = browser.evaluate(place, vec![]).await;
    assert!(
        place["bottom"].as_f64() <= place["window_height"].as_f64(),
        "the busiest coupon whole in view at 1280×900: {place}"
    );
    assert!(
        !storm.is_finished(),
        "the page put it first while it was claimed"
    );
    browser
        .screenshot(&artifact("dashboard-busiest-first.png"))
        .await;
    storm.await.unwrap();
    browser.close().await;
}

const ADMIN_TOKEN: &str = "the-operators-token-1";

/// The "locks now" panel, on a replica with the operator's routes: before the token it says
/// how to see the locks; given the token, it shows the coupon a claim on the other replica
/// holds, with the holder's label (that replica's address) and how long it has held it; once an
/// operator releases the lock, the row goes and the stuck claim answers lock-lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_locks_panel_shows_who_holds_a_coupon_until_an_operator_releases_it() {
    let redis = RedisServer::start();
    let replica = |work: &'static str| {
        let args = [
            "--store",
            &redis.url(),
            "--admin-token",
            ADMIN_TOKEN,
            "--work-ms",
            work,
        ];
        DemoReplica::start(DEMO, &args)
    };
    let (stuck, watched) = (replica("8000"), replica("5"));
    let browser = Browser::start().await;
    browser.open(&format!("{}/", watched.url())).await;
    let note = browser
        .text_when("#locks-note", PATIENCE, |text| !text.is_empty())
        .await;
    assert!(note.contains("--admin-token"), "{note}");

    let http = Http::default();
    let seeded = (http.put(
        &format!("{}/coupons/held", stuck.url()),
        json!({ "stock": 1 }),
    ))
    .await;
    assert_eq!(seeded.status, StatusCode::OK, "{}", seeded.body);
    let claim = {
        let (http, url) = (http.clone(), format!("{}/coupons/held/claim", stuck.url()));
        tokio::spawn(async move { http.post(&url, json!({ "user_id": "a" })).await })
    };
    let fill_in = "document.getElementById('admin-token').value = arguments[0]; \
                   document.querySelector('#token-form button').click();";
    browser.evaluate(fill_in, vec![json!(ADMIN_TOKEN)]).await;
    let row = "[data-lock='coupon:held']";
    let holder = (browser.text_when(&format!("{row} [data-field=holder]"), PATIENCE, |text| {
        text.contains(':')
    }))
    .await;
    let shape = browser.text(&format!("{row} [data-field=shape]")).await;
    assert_eq!(shape, "write", "holder {holder}");
    let address = stuck.url().replace("http://", "");
    assert_eq!(
        holder, address,
        "the holder is the replica as the dashboard names it"
    );
    let held_for = |text: &str| text.trim_end_matches(" ms").parse::<f64>().unwrap_or(0.0);
    let first = held_for(&browser.text(&format!("{row} [data-field=held_for]")).await);
    (browser.text_when(&format!("{row} [data-field=held_for]"), PATIENCE, |text| {
        held_for(text) > first
    }))
    .await;
    let screenshot = artifact("dashboard-locks-now.png");
    browser.screenshot(&screenshot).await;
    eprintln!("screenshot: {}", screenshot.display());

    let operator = http.bearer(ADMIN_TOKEN);
    let released = operator
        .delete(&format!("{}/admin/locks/coupon:held", watched.url()))
        .await;
    assert_eq!(released.status, StatusCode::OK, "{}", released.body);
    (browser.text_when("#locks-note", PATIENCE, |text| {
        text == "No lock is held right now."
    }))
    .await;
    assert_eq!(browser.count(row).await, 0);
    let stuck_answer = claim.await.unwrap();
    assert_eq!(
        stuck_answer.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        stuck_answer.body
    );
    browser.close().await;
}
